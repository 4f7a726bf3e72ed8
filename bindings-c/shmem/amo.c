/* Rucx C ABI test over oshmem (spml ucx, atomic ucx): the OpenSHMEM 1.4 atomics on every
 * type oshmem offers them for (4- and 8-byte integers; fetch/set/swap also on float and
 * double), every PE on the same words at once, on the last PE (remote for the others,
 * local for itself) and on PE 0: fetch_add, add, inc, fetch_inc, fetch, set, swap,
 * compare_swap (as a counter and where it must fail; 8-byte types only, see below),
 * fetch_and/or/xor and and/or/xor. Start values where carries show (through zero, through
 * 2^32), near the types' limits and wrapping round the unsigned ones. */
#include "check.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

enum { K = 60, MAXPE = 64 };

static long long offsets; /* on PE 0: the sum of every fetched fetch_add offset */

/* fetch_add/add/inc/fetch_inc/cswap counters, swap, set, fetch: on PE npes - 1 */
#define DEF_ARITH(T, N, CSWAP)                                                             \
    static T N##_v[8], N##_s[MAXPE], N##_got[MAXPE];                                       \
    static void arith_##N(T base)                                                          \
    {                                                                                      \
        const int t = npes - 1;                                                            \
        if (me == t)                                                                       \
            for (int i = 0; i < 8; i++) N##_v[i] = base;                                   \
        if (me == 0) offsets = 0;                                                          \
        shmem_barrier_all();                                                               \
        T prev = base;                                                                     \
        long long sum = 0;                                                                 \
        for (int k = 0; k < K; k++) {                                                      \
            T got = shmem_##N##_atomic_fetch_add(&N##_v[0], (T)3, t);                      \
            T off = (T)(got - base);                                                       \
            if (off % 3 != 0 || off >= (T)(3 * K * npes) || (k && off <= (T)(prev - base)))  \
                FAIL(#N " fetch_add returned base + %lld after base + %lld", (long long)off, \
                     (long long)(T)(prev - base));                                         \
            prev = got;                                                                    \
            sum += (long long)(off / 3);                                                   \
            shmem_##N##_atomic_add(&N##_v[1], (T)5, t);                                    \
            shmem_##N##_atomic_inc(&N##_v[2], t);                                          \
            T fi = shmem_##N##_atomic_fetch_inc(&N##_v[3], t);                             \
            if ((T)(fi - base) >= (T)(K * npes)) FAIL(#N " fetch_inc out of range");       \
            if (CSWAP) {                                                                   \
                T cur = shmem_##N##_atomic_fetch(&N##_v[4], t);                            \
                for (;;) {                                                                 \
                    T old = CSWAP_##N(&N##_v[4], cur, (T)(cur + 1), t);                    \
                    if (old == cur) break;                                                 \
                    cur = old;                                                             \
                }                                                                          \
            } else                                                                         \
                shmem_##N##_atomic_add(&N##_v[4], (T)1, t);                                \
        }                                                                                  \
        shmem_longlong_atomic_add(&offsets, sum, 0);                                       \
        T old = shmem_##N##_atomic_swap(&N##_v[5], (T)(base + 1 + me), t);                 \
        shmem_##N##_p(&N##_got[me], old, 0);                                               \
        shmem_##N##_atomic_set(&N##_s[me], (T)(base + 11 * me), t);                        \
        if (CSWAP) {                                                                       \
            T no = CSWAP_##N(&N##_v[6], (T)(base + 1), (T)(base + 2), t);                  \
            if (no != base) FAIL(#N " compare_swap that must fail returned base + %lld",   \
                                 (long long)(T)(no - base));                               \
        }                                                                                  \
        shmem_barrier_all();                                                               \
        const long long nk = (long long)K * npes;                                          \
        T want[5] = {(T)(base + 3 * nk), (T)(base + 5 * nk), (T)(base + nk), (T)(base + nk), \
                     (T)(base + nk)};                                                      \
        for (int i = 0; i < 5; i++) {                                                      \
            T v = shmem_##N##_atomic_fetch(&N##_v[i], t);                                  \
            if (v != want[i])                                                              \
                FAIL(#N " counter %d = base + %lld, want base + %lld", i,                  \
                     (long long)(T)(v - base), (long long)(T)(want[i] - base));            \
        }                                                                                  \
        for (int p = 0; p < npes; p++)                                                     \
            if (shmem_##N##_atomic_fetch(&N##_s[p], t) != (T)(base + 11 * p))              \
                FAIL(#N " set by pe %d lost", p);                                          \
        if (shmem_##N##_atomic_fetch(&N##_v[6], t) != base)                               \
            FAIL(#N " a failed compare_swap wrote");                                       \
        if (me == 0) {                                                                     \
            if (offsets != nk * (nk - 1) / 2)                                              \
                FAIL(#N " fetch_add offsets sum to %lld: some value fetched twice",        \
                     offsets);                                                             \
            /* the swaps' returns and the final value are base .. base + npes, once each */ \
            char seen[MAXPE + 1] = {0};                                                    \
            N##_got[npes] = shmem_##N##_atomic_fetch(&N##_v[5], t);                        \
            for (int p = 0; p <= npes; p++) {                                              \
                T d = (T)(N##_got[p] - base);                                              \
                if (d > (T)npes || seen[(int)d]++)                                         \
                    FAIL(#N " swap chain broken at %d: base + %lld", p, (long long)d);     \
            }                                                                              \
        }                                                                                  \
        shmem_barrier_all();                                                               \
    }

/* OpenMPI 4.1.4's atomic ucx stores 8 bytes into the 4-byte result of a 4-byte
 * compare_swap (mca_atomic_ucx_cswap: `*prev = value`), which smashes the caller's stack
 * over any libucp (open-mpi/ompi#11257, fixed in 4.1.5): compare_swap only on the 8-byte
 * types, add in its place on the 4-byte ones. */
#define CSWAP_long shmem_long_atomic_compare_swap
#define CSWAP_longlong shmem_longlong_atomic_compare_swap
#define CSWAP_ulong shmem_ulong_atomic_compare_swap
#define CSWAP_ulonglong shmem_ulonglong_atomic_compare_swap
#define CSWAP_int(p, c, v, pe) ((void)(c), (void)(v), 0)
#define CSWAP_uint(p, c, v, pe) ((void)(c), (void)(v), 0u)

DEF_ARITH(int, int, 0)
DEF_ARITH(long, long, 1)
DEF_ARITH(long long, longlong, 1)
DEF_ARITH(unsigned int, uint, 0)
DEF_ARITH(unsigned long, ulong, 1)
DEF_ARITH(unsigned long long, ulonglong, 1)

/* Over UCX 1.13 (Debian's 1.13.1-1) a fetching AND/OR/XOR that a process sends to itself
 * (the self transport, CPU atomics) returns the old value but combines the target with
 * itself instead of the operand: AND and OR leave it unchanged, XOR zeroes it (the machine
 * code of its uct_sm_ep_atomic{32,64}_fetch drops the operand). The argument
 * "no-self-bitwise-fetch", given over UCX 1.13 only, has the target PE use the
 * non-fetching operations on itself. */
static int no_self_bitwise_fetch;

/* fetch_and/or/xor and and/or/xor: every PE owns two bits (a low one and a high one, the
 * sign bit's neighbourhood), on PE 0 */
#define DEF_BITS(T, U, N)                                                                  \
    static T N##_b[6];                                                                     \
    static void bits_##N(void)                                                             \
    {                                                                                      \
        const int t = 0, bits = 8 * (int)sizeof(T);                                        \
        const T zero = 0, ones = (T)~(U)0;                                                 \
        if (me == t) {                                                                     \
            N##_b[0] = N##_b[2] = N##_b[3] = N##_b[5] = zero;                              \
            N##_b[1] = N##_b[4] = ones;                                                    \
        }                                                                                  \
        shmem_barrier_all();                                                               \
        U all = 0;                                                                         \
        for (int p = 0; p < npes; p++) all |= ((U)1 << p) | ((U)1 << (bits - 1 - p));      \
        const T mine = (T)(((U)1 << me) | ((U)1 << (bits - 1 - me)));                      \
        if (me == t && no_self_bitwise_fetch) {                                            \
            shmem_##N##_atomic_or(&N##_b[0], mine, t);                                     \
            shmem_##N##_atomic_and(&N##_b[1], (T)~(U)mine, t);                             \
            shmem_##N##_atomic_xor(&N##_b[2], mine, t);                                    \
        } else {                                                                           \
            T got = shmem_##N##_atomic_fetch_or(&N##_b[0], mine, t);                       \
            if ((U)got & (U)mine) FAIL(#N " fetch_or: my bits were set before me");        \
            got = shmem_##N##_atomic_fetch_and(&N##_b[1], (T)~(U)mine, t);                 \
            if (((U)got & (U)mine) != (U)mine) FAIL(#N " fetch_and: my bits were cleared"); \
            got = shmem_##N##_atomic_fetch_xor(&N##_b[2], mine, t);                        \
            if ((U)got & (U)mine) FAIL(#N " fetch_xor: my bits were flipped before me");   \
        }                                                                                  \
        shmem_##N##_atomic_or(&N##_b[3], mine, t);                                         \
        shmem_##N##_atomic_and(&N##_b[4], (T)~(U)mine, t);                                 \
        shmem_##N##_atomic_xor(&N##_b[5], (T)((U)1 << 20), t);                             \
        shmem_##N##_atomic_xor(&N##_b[5], mine, t);                                        \
        shmem_##N##_atomic_xor(&N##_b[5], (T)((U)1 << 20), t);                             \
        shmem_barrier_all();                                                               \
        const U want[6] = {all, ~all, all, all, ~all, all};                                \
        for (int i = 0; i < 6; i++) {                                                      \
            U v = (U)shmem_##N##_atomic_fetch(&N##_b[i], t);                               \
            if (v != want[i])                                                              \
                FAIL(#N " bitwise word %d = %#llx, want %#llx", i, (unsigned long long)v,  \
                     (unsigned long long)want[i]);                                         \
        }                                                                                  \
        shmem_barrier_all();                                                               \
    }

/* shmem_N_atomic_fetch is not offered for the fixed-width names in OpenMPI 4.1: read those
 * with shmem_N_atomic_fetch_or(0) */
#define shmem_int32_atomic_fetch(p, pe) shmem_int32_atomic_fetch_or(p, 0, pe)
#define shmem_int64_atomic_fetch(p, pe) shmem_int64_atomic_fetch_or(p, 0, pe)
#define shmem_uint32_atomic_fetch(p, pe) shmem_uint32_atomic_fetch_or(p, 0, pe)
#define shmem_uint64_atomic_fetch(p, pe) shmem_uint64_atomic_fetch_or(p, 0, pe)

DEF_BITS(int, unsigned int, int)
DEF_BITS(long, unsigned long, long)
DEF_BITS(long long, unsigned long long, longlong)
DEF_BITS(unsigned int, unsigned int, uint)
DEF_BITS(unsigned long, unsigned long, ulong)
DEF_BITS(unsigned long long, unsigned long long, ulonglong)
DEF_BITS(int32_t, uint32_t, int32)
DEF_BITS(int64_t, uint64_t, int64)
DEF_BITS(uint32_t, uint32_t, uint32)
DEF_BITS(uint64_t, uint64_t, uint64)

static float fv[MAXPE];
static double dv[MAXPE];

int main(int argc, char **argv)
{
    no_self_bitwise_fetch = argc > 1 && !strcmp(argv[1], "no-self-bitwise-fetch");
    start();
    CHECK(npes <= 8, "at most 8 PEs (two bits each in a 32-bit word)");

    arith_int(-400);              /* through zero: a carry across every bit */
    arith_long((1L << 32) - 300); /* through 2^32: a carry into the upper half */
    arith_longlong(LLONG_MIN + 5);
    arith_uint(UINT_MAX - 50);
    arith_ulong(ULONG_MAX - 300);
    arith_ulonglong(1ULL << 63);

    bits_int();
    bits_long();
    bits_longlong();
    bits_uint();
    bits_ulong();
    bits_ulonglong();
    bits_int32();
    bits_int64();
    bits_uint32();
    bits_uint64();

    /* float and double: set, fetch, swap */
    const int t = npes - 1;
    shmem_float_atomic_set(&fv[me], 1.5f * me + 0.25f, t);
    shmem_double_atomic_set(&dv[me], -2.5 * me - 1e10, t);
    shmem_barrier_all();
    for (int p = 0; p < npes; p++)
        if (shmem_float_atomic_fetch(&fv[p], t) != 1.5f * p + 0.25f ||
            shmem_double_atomic_fetch(&dv[p], t) != -2.5 * p - 1e10)
            FAIL("float/double set by pe %d lost", p);
    shmem_barrier_all();
    float fo = shmem_float_atomic_swap(&fv[(me + 1) % npes], 3.0f * me, t);
    double dw = shmem_double_atomic_swap(&dv[(me + 1) % npes], 1e-3 * me, t);
    int q = (me + 1) % npes;
    if (fo != 1.5f * q + 0.25f || dw != -2.5 * q - 1e10) FAIL("float/double swap returned %g %g", fo, dw);
    shmem_barrier_all();
    if (shmem_float_atomic_fetch(&fv[q], t) != 3.0f * me || shmem_double_atomic_fetch(&dv[q], t) != 1e-3 * me)
        FAIL("float/double swap lost");
    shmem_barrier_all();

    /* on the symmetric heap: a counter every PE increments with fetch_add and with
     * compare_swap, on PE 0 */
    long *hc = shmem_calloc(2, sizeof(long));
    CHECK(hc, "shmem_calloc failed");
    shmem_barrier_all();
    for (int k = 0; k < K; k++) {
        shmem_long_atomic_fetch_add(&hc[0], 1, 0);
        long cur = shmem_long_atomic_fetch(&hc[1], 0), old;
        while ((old = shmem_long_atomic_compare_swap(&hc[1], cur, cur + 2, 0)) != cur) cur = old;
    }
    shmem_barrier_all();
    if (me == 0 && (hc[0] != (long)K * npes || hc[1] != 2L * K * npes))
        FAIL("heap counters %ld %ld, want %ld %ld", hc[0], hc[1], (long)K * npes, 2L * K * npes);
    shmem_barrier_all();
    shmem_free(hc);
    return finish("amo");
}
