/*
 * Rucx: UCX 1.19's logging entry point, ucs_log_dispatch, and what a program needs to log
 * through it with a component of its own (UCXX's C++ does: its macros test the component's
 * level and call ucs_log_dispatch). Written for Rucx with UCX's names and signature.
 *
 * UCX's own ucs_log()/ucs_error()/... macros read libucs's global options
 * (ucs_global_opts), which Rucx does not have: they are not defined here.
 */
#ifndef RUCX_UCS_DEBUG_LOG_DEF_H
#define RUCX_UCS_DEBUG_LOG_DEF_H

#include <ucs/sys/compiler_def.h>
#include <ucs/config/types.h>
#include <stdarg.h>
#include <stdint.h>

BEGIN_C_DECLS

/* The most verbose level compiled in (a program may define it lower). */
#ifndef UCS_MAX_LOG_LEVEL
#  define UCS_MAX_LOG_LEVEL UCS_LOG_LEVEL_LAST
#endif

/* Whether `_level` is shown for the component `_comp_log_config` points at. */
#define ucs_log_component_is_enabled(_level, _comp_log_config)                       \
    ucs_unlikely(((_level) <= UCS_MAX_LOG_LEVEL) &&                                  \
                 ((_level) <=                                                        \
                  (((ucs_log_component_config_t *)(_comp_log_config))->log_level)))

/* Logs a printf-style message for a component, when its level is enabled. */
#define ucs_log_component(_level, _comp_log_config, _fmt, ...)                       \
    do {                                                                             \
        if (ucs_log_component_is_enabled(_level, _comp_log_config)) {                \
            ucs_log_dispatch(__FILE__, __LINE__, __func__, (ucs_log_level_t)(_level), \
                             _comp_log_config, _fmt, ##__VA_ARGS__);                 \
        }                                                                            \
    } while (0)

/* What a log handler tells the dispatcher: stop here, or go on to the next handler. */
typedef enum {
    UCS_LOG_FUNC_RC_STOP,
    UCS_LOG_FUNC_RC_CONTINUE
} ucs_log_func_rc_t;

typedef ucs_log_func_rc_t (*ucs_log_func_t)(const char *file, unsigned line,
                                            const char *function, ucs_log_level_t level,
                                            const ucs_log_component_config_t *comp_conf,
                                            const char *message, va_list ap);

/* Formats and prints one message: "[time] [host:pid] file:line COMPONENT LEVEL text" on
 * stderr, when `level` is at most the component's level (PRINT always). */
void ucs_log_dispatch(const char *file, unsigned line, const char *function,
                      ucs_log_level_t level, ucs_log_component_config_t *comp_conf,
                      const char *format, ...) UCS_F_PRINTF(6, 7);

END_C_DECLS

#endif
