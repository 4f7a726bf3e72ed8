/*
 * The C half of `ucs_log_dispatch`, libucs's logging entry point, which UCXX's libucxx.so
 * imports: its log macros format nothing themselves and hand the format string and its
 * arguments to this variadic function. Stable Rust cannot define a C-variadic function, so
 * the exported symbol is a one-instruction Rust trampoline (`ucs_log::ucs_log_dispatch`)
 * that jumps here with the caller's registers and stack untouched; this function formats
 * the message and gives it to Rust to print (`rucx_log_line`).
 *
 * Written from the declaration in UCX's `ucs/debug/log_def.h` and the layout of
 * `ucs_log_component_config_t` in `ucs/config/types.h`: a level, a 16-byte name, a file
 * filter.
 */
#include <stdarg.h>
#include <stdio.h>

typedef struct {
    int log_level;
    char name[16];
    const char *file_filter;
} rucx_log_component_t;

/* Prints one formatted message (Rust, bindings-c/src/ucs_log.rs). */
extern void rucx_log_line(const char *file, unsigned line, const char *function, int level,
                          const char *component, const char *message);

/* ucs_log_level_t's UCS_LOG_LEVEL_PRINT: printed whatever the component's level. */
enum { RUCX_LOG_LEVEL_PRINT = 13 };

void rucx_ucs_log_dispatch(const char *file, unsigned line, const char *function, int level,
                           const rucx_log_component_t *comp, const char *format, ...)
{
    if (format == NULL) {
        return;
    }
    if (comp != NULL && level != RUCX_LOG_LEVEL_PRINT && level > comp->log_level) {
        return;
    }
    char name[sizeof(comp->name) + 1] = "UCX";
    if (comp != NULL) {
        /* The name need not be terminated within its 16 bytes. */
        for (size_t i = 0; i < sizeof(comp->name); i++) {
            name[i] = comp->name[i];
            if (name[i] == '\0') {
                break;
            }
        }
        name[sizeof(comp->name)] = '\0';
    }
    char message[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(message, sizeof(message), format, ap);
    va_end(ap);
    rucx_log_line(file, line, function, level, name, message);
}
