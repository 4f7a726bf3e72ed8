/*
 * Rucx: the one libucs debugging function programs outside UCX call. UCX's
 * libucs_signal.so (which Python's libucx.load_library() opens by name) asks it
 * whether a signal belongs to UCX's error handler; Rucx installs none, so the
 * answer is always no.
 */
#ifndef RUCX_UCS_DEBUG_DEBUG_H
#define RUCX_UCS_DEBUG_DEBUG_H

#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

/* Whether `signum` is one UCX's error handler catches: 0 in Rucx. */
int ucs_debug_is_error_signal(int signum);

END_C_DECLS

#endif
