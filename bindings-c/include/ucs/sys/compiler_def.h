/*
 * Rucx: compiler helpers used by the ucp.h-compatible declarations.
 * Written for Rucx; names follow UCX 1.19 so that UCX programs compile unchanged.
 */
#ifndef RUCX_UCS_SYS_COMPILER_DEF_H
#define RUCX_UCS_SYS_COMPILER_DEF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#  define BEGIN_C_DECLS extern "C" {
#  define END_C_DECLS   }
#else
#  define BEGIN_C_DECLS
#  define END_C_DECLS
#endif

/* A 64-bit word with bit `i` set, and with bits 0..i-1 set (all 64 for i >= 64). */
#define UCS_BIT(i)  (1ul << (i))
#define UCS_MASK(i) (((i) >= 64) ? ~0ul : (UCS_BIT(i) - 1))

/* Branch hints. */
#define ucs_likely(x)   __builtin_expect(x, 1)
#define ucs_unlikely(x) __builtin_expect(x, 0)

/* Smallest size for an enum or struct (ucs_status_t is one byte, as in UCX). */
#define UCS_S_PACKED __attribute__((packed))

/* A printf-like function: format string in argument `fmt`, its values from argument `va`. */
#define UCS_F_PRINTF(fmt, va) __attribute__((format(printf, fmt, va)))

#endif
