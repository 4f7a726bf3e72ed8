/* Rucx C ABI test over oshmem (spml ucx): shmem_barrier_all and the OpenSHMEM 1.4
 * collectives, on all PEs (scoll mpi over pml ucx where it takes them) and on active sets of
 * fewer PEs (scoll basic, over spml ucx): broadcast32/64, collect32/64, fcollect32/64, the
 * sum/prod/max/min/and/or/xor reductions on short/int/long/long long and
 * sum/prod/max/min on float/double, alltoall32/64, alltoalls32/64, shmem_sync_all. */
#include "check.h"

#include <stdint.h>
#include <string.h>

enum { BN = 1 << 17, RN = 1000, AN = 300, MAXPE = 16 };

/* every collective's pSync size, with room to spare */
enum { PSYNC = 16 };
_Static_assert(SHMEM_BCAST_SYNC_SIZE <= PSYNC && SHMEM_COLLECT_SYNC_SIZE <= PSYNC &&
                   SHMEM_REDUCE_SYNC_SIZE <= PSYNC && SHMEM_ALLTOALL_SYNC_SIZE <= PSYNC &&
                   SHMEM_ALLTOALLS_SYNC_SIZE <= PSYNC,
               "pSync size");
static long psync[2][PSYNC];
static int round_;

/* A pSync array no collective is using (the two alternate; a barrier_all separates uses). */
static long *sync_array(void)
{
    long *p = psync[round_++ & 1];
    for (size_t i = 0; i < sizeof psync[0] / sizeof psync[0][0]; i++) p[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
    return p;
}

static int64_t bval(int root, long i) { return ((int64_t)root << 40) + i * 7 + 3; }

static long seen[MAXPE];

/* the active set (start, 2^logstride, size) */
struct set { int start, logstride, size; };

static int in_set(struct set s, int pe)
{
    int d = pe - s.start, st = 1 << s.logstride;
    return d >= 0 && d % st == 0 && d / st < s.size;
}

static int nth(struct set s, int i) { return s.start + (i << s.logstride); }

int main(void)
{
    start();
    CHECK(npes <= MAXPE, "at most %d PEs", MAXPE);

    /* barrier_all: every PE stores its round into every other PE's slot; after the barrier
     * all of them are there */
    for (long r = 1; r <= 20; r++) {
        for (int p = 0; p < npes; p++) shmem_long_p(&seen[me], r, p);
        shmem_barrier_all();
        for (int p = 0; p < npes; p++)
            if (seen[p] != r) FAIL("barrier_all round %ld: pe %d's store missing (%ld)", r, p, seen[p]);
        shmem_barrier_all();
    }
    for (int r = 0; r < 5; r++) shmem_sync_all();

    int64_t *src = shmem_malloc(sizeof(int64_t) * BN * 2);
    int64_t *dst = shmem_malloc(sizeof(int64_t) * (BN + 1024));
    CHECK(src && dst, "shmem_malloc failed");

    /* the whole job, every other PE (0, 2, ..), and all but PE 0 */
    struct set sets[3] = {{0, 0, npes}, {0, 1, (npes + 1) / 2}, {1, 0, npes - 1}};
    for (int si = 0; si < 3; si++) {
        struct set s = sets[si];
        if (s.size < 1) continue;
        const int member = in_set(s, me);

        /* broadcast from the set's last member, 1 element and many */
        const int root_i = s.size - 1, root = nth(s, root_i);
        static const size_t bn[] = {1, 33, BN};
        for (int k = 0; k < 3; k++) {
            size_t n = bn[k];
            for (size_t i = 0; i < n; i++) src[i] = bval(me, (long)i + k);
            for (size_t i = 0; i < n + 1; i++) dst[i] = -1;
            long *ps = sync_array();
            if (member) {
                shmem_broadcast64(dst, src, n, root_i, s.start, s.logstride, s.size, ps);
                if (me != root)
                    for (size_t i = 0; i < n; i++)
                        if (dst[i] != bval(root, (long)i + k))
                            FAIL("set %d broadcast64 of %zu: [%zu] = %lld", si, n, i, (long long)dst[i]);
                if (dst[n] != -1) FAIL("set %d broadcast64 of %zu wrote past the end", si, n);
            }
            int32_t *s32 = (int32_t *)src, *d32 = (int32_t *)dst;
            for (size_t i = 0; i < n; i++) s32[i] = (int32_t)bval(me, (long)i) ^ 0x5a5a;
            ps = sync_array();
            if (member) {
                shmem_broadcast32(d32, s32, n, root_i, s.start, s.logstride, s.size, ps);
                if (me != root)
                    for (size_t i = 0; i < n; i++)
                        if (d32[i] != ((int32_t)bval(root, (long)i) ^ 0x5a5a))
                            FAIL("set %d broadcast32 of %zu: [%zu]", si, n, i);
            }
        }

        /* collect: member i contributes i + 1 elements, concatenated in set order;
         * fcollect: 50 each */
        int mi = -1;
        for (int i = 0; i < s.size; i++)
            if (nth(s, i) == me) mi = i;
        for (int i = 0; i < mi + 1; i++) src[i] = bval(me, i);
        long *ps = sync_array();
        if (member) {
            shmem_collect64(dst, src, mi + 1, s.start, s.logstride, s.size, ps);
            size_t at = 0;
            for (int j = 0; j < s.size; j++)
                for (int i = 0; i < j + 1; i++, at++)
                    if (dst[at] != bval(nth(s, j), i))
                        FAIL("set %d collect64: [%zu] = %lld", si, at, (long long)dst[at]);
        }
        int32_t *s32 = (int32_t *)src, *d32 = (int32_t *)dst;
        for (int i = 0; i < 2 * mi + 1; i++) s32[i] = me * 1000 + i;
        ps = sync_array();
        if (member) {
            shmem_collect32(d32, s32, 2 * mi + 1, s.start, s.logstride, s.size, ps);
            size_t at = 0;
            for (int j = 0; j < s.size; j++)
                for (int i = 0; i < 2 * j + 1; i++, at++)
                    if (d32[at] != nth(s, j) * 1000 + i) FAIL("set %d collect32: [%zu] = %d", si, at, d32[at]);
        }
        for (int i = 0; i < 50; i++) src[i] = bval(me, i + 100);
        ps = sync_array();
        if (member) {
            shmem_fcollect64(dst, src, 50, s.start, s.logstride, s.size, ps);
            for (int j = 0; j < s.size; j++)
                for (int i = 0; i < 50; i++)
                    if (dst[j * 50 + i] != bval(nth(s, j), i + 100)) FAIL("set %d fcollect64 [%d][%d]", si, j, i);
        }
        for (int i = 0; i < 77; i++) s32[i] = -(me * 100 + i);
        ps = sync_array();
        if (member) {
            shmem_fcollect32(d32, s32, 77, s.start, s.logstride, s.size, ps);
            for (int j = 0; j < s.size; j++)
                for (int i = 0; i < 77; i++)
                    if (d32[j * 77 + i] != -(nth(s, j) * 100 + i)) FAIL("set %d fcollect32 [%d][%d]", si, j, i);
        }
        shmem_barrier_all();
    }

    /* reductions: all PEs, then every other PE */
#define WRK(T) (RN / 2 + 1 > SHMEM_REDUCE_MIN_WRKDATA_SIZE ? RN / 2 + 1 : SHMEM_REDUCE_MIN_WRKDATA_SIZE)
#define REDUCE_CASE(T, N, OP, EXPR, INIT, VAL)                                               \
    do {                                                                                   \
        static T rs[RN], rd[RN + 1], wrk[WRK(T)];                                          \
        for (int i = 0; i < RN; i++) rs[i] = VAL(me, i);                                   \
        for (int i = 0; i <= RN; i++) rd[i] = (T)77;                                       \
        long *ps = sync_array();                                                           \
        if (member) {                                                                      \
            shmem_##N##_##OP##_to_all(rd, rs, nr, s.start, s.logstride, s.size, wrk, ps);  \
            for (int i = 0; i < nr; i++) {                                                 \
                T acc = INIT;                                                              \
                for (int j = 0; j < s.size; j++) {                                         \
                    T x = VAL(nth(s, j), i);                                               \
                    acc = (T)(EXPR);                                                       \
                }                                                                          \
                if (rd[i] != acc)                                                          \
                    FAIL("set %d: " #N "_" #OP "_to_all of %d: [%d] = %lld, want %lld", si, nr, \
                         i, (long long)rd[i], (long long)acc);                             \
            }                                                                              \
            if (rd[nr] != (T)77)                                                           \
                FAIL("set %d: " #N "_" #OP "_to_all wrote past %d", si, nr);               \
        }                                                                                  \
    } while (0)
#define IVAL(pe, i) ((pe) * 37 + (i) % 101 - 50)
#define PVAL(pe, i) (((pe) + (i)) % 3 + 1)
#define BVAL(pe, i) (((i) * 2654435761u) ^ ((pe) * 0x01010101u) ^ ((unsigned)(i) << ((pe) + 3)))
#define FVAL(pe, i) ((pe) * 0.5 + (i) * 0.25 - 7)
#define INTEGER_REDUCTIONS(T, N)                                                           \
    REDUCE_CASE(T, N, sum, acc + x, 0, IVAL);                                              \
    REDUCE_CASE(T, N, prod, acc * x, 1, PVAL);                                             \
    REDUCE_CASE(T, N, max, x > acc ? x : acc, (T)IVAL(s.start, i), IVAL);                  \
    REDUCE_CASE(T, N, min, x < acc ? x : acc, (T)IVAL(s.start, i), IVAL);                  \
    REDUCE_CASE(T, N, and, acc & x, (T)~(T)0, BVAL);                                       \
    REDUCE_CASE(T, N, or, acc | x, 0, BVAL);                                               \
    REDUCE_CASE(T, N, xor, acc ^ x, 0, BVAL)
#define FLOAT_REDUCTIONS(T, N)                                                             \
    REDUCE_CASE(T, N, sum, acc + x, 0, FVAL);                                              \
    REDUCE_CASE(T, N, prod, acc * x, 1, PVAL);                                             \
    REDUCE_CASE(T, N, max, x > acc ? x : acc, (T)FVAL(s.start, i), FVAL);                  \
    REDUCE_CASE(T, N, min, x < acc ? x : acc, (T)FVAL(s.start, i), FVAL)

    for (int si = 0; si < 2; si++) {
        struct set s = sets[si];
        const int member = in_set(s, me);
        static const int nrs[] = {1, 7, RN};
        for (int k = 0; k < 3; k++) {
            const int nr = nrs[k];
            INTEGER_REDUCTIONS(short, short);
            INTEGER_REDUCTIONS(int, int);
            INTEGER_REDUCTIONS(long, long);
            INTEGER_REDUCTIONS(long long, longlong);
            FLOAT_REDUCTIONS(float, float);
            FLOAT_REDUCTIONS(double, double);
        }
        shmem_barrier_all();
    }

    /* alltoall: block j of PE p's source goes to block p of PE j */
    for (int si = 0; si < 2; si++) {
        struct set s = sets[si];
        const int member = in_set(s, me);
        int mi = -1;
        for (int i = 0; i < s.size; i++)
            if (nth(s, i) == me) mi = i;
        static const size_t an[] = {1, AN};
        for (int k = 0; k < 2; k++) {
            size_t n = an[k];
            for (int j = 0; j < s.size; j++)
                for (size_t i = 0; i < n; i++) src[j * n + i] = bval(me, j * 1000 + (long)i);
            long *ps = sync_array();
            if (member) {
                shmem_alltoall64(dst, src, n, s.start, s.logstride, s.size, ps);
                for (int j = 0; j < s.size; j++)
                    for (size_t i = 0; i < n; i++)
                        if (dst[j * n + i] != bval(nth(s, j), mi * 1000 + (long)i))
                            FAIL("set %d alltoall64 of %zu: from %d [%zu]", si, n, nth(s, j), i);
            }
            int32_t *s32 = (int32_t *)src, *d32 = (int32_t *)dst;
            for (int j = 0; j < s.size; j++)
                for (size_t i = 0; i < n; i++) s32[j * n + i] = me * 100000 + j * 1000 + (int)i;
            ps = sync_array();
            if (member) {
                shmem_alltoall32(d32, s32, n, s.start, s.logstride, s.size, ps);
                for (int j = 0; j < s.size; j++)
                    for (size_t i = 0; i < n; i++)
                        if (d32[j * n + i] != nth(s, j) * 100000 + mi * 1000 + (int)i)
                            FAIL("set %d alltoall32 of %zu: from %d [%zu]", si, n, nth(s, j), i);
            }
        }
        /* strided: source stride 3, target stride 2 (elements), 40 per PE */
        const ptrdiff_t sst = 3, dstr = 2;
        const size_t n = 40;
        const size_t span = (size_t)(s.size & (MAXPE * 2 - 1)) * n; /* s.size, as the compiler can bound it */
        for (size_t i = 0; i < span * sst; i++) src[i] = -1;
        for (int j = 0; j < s.size; j++)
            for (size_t i = 0; i < n; i++) src[(j * n + i) * sst] = bval(me, j * 100 + (long)i);
        for (size_t i = 0; i < span * dstr; i++) dst[i] = -2;
        long *ps = sync_array();
        if (member) {
            shmem_alltoalls64(dst, src, dstr, sst, n, s.start, s.logstride, s.size, ps);
            for (int j = 0; j < s.size; j++)
                for (size_t i = 0; i < n; i++) {
                    if (dst[(j * n + i) * dstr] != bval(nth(s, j), mi * 100 + (long)i))
                        FAIL("set %d alltoalls64: from %d [%zu]", si, nth(s, j), i);
                    if (dst[(j * n + i) * dstr + 1] != -2) FAIL("set %d alltoalls64 wrote a gap", si);
                }
        }
        int32_t *s32 = (int32_t *)src, *d32 = (int32_t *)dst;
        for (int j = 0; j < s.size; j++)
            for (size_t i = 0; i < n; i++) s32[(j * n + i) * sst] = me * 7000 + j * 100 + (int)i;
        ps = sync_array();
        if (member) {
            shmem_alltoalls32(d32, s32, dstr, sst, n, s.start, s.logstride, s.size, ps);
            for (int j = 0; j < s.size; j++)
                for (size_t i = 0; i < n; i++)
                    if (d32[(j * n + i) * dstr] != nth(s, j) * 7000 + mi * 100 + (int)i)
                        FAIL("set %d alltoalls32: from %d [%zu]", si, nth(s, j), i);
        }
        shmem_barrier_all();
    }

    shmem_free(dst);
    shmem_free(src);
    return finish("coll");
}
