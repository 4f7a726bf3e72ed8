/* Rucx C ABI test over oshmem (spml ucx, sshmem ucx: the symmetric heap is ucp_mem_map
 * ALLOCATE memory): shmem_malloc/shmem_free of many sizes, several live at once and freed
 * out of order, shmem_calloc, shmem_align, shmem_realloc, a large allocation, each reached
 * from another PE; shmem_addr_accessible/shmem_pe_accessible; shmem_ptr on the heap and on
 * static data (NULL is allowed; where it is not, loads and stores through it reach the PE).
 * PE 0 prints whether shmem_ptr mapped another PE's memory, for the record. */
#include "check.h"

#include <stdint.h>
#include <string.h>

static int64_t sdata[256];

static unsigned char pat(int pe, size_t i, int salt)
{
    return (unsigned char)(pe * 29 + i * 11 + salt * 5 + (i >> 10));
}

/* Fills this PE's block, and after a barrier reads the right neighbour's through `p` (the
 * same symmetric address there). */
static void reach(unsigned char *p, size_t len, int salt, const char *what)
{
    const int right = (me + 1) % npes;
    for (size_t i = 0; i < len; i++) p[i] = pat(me, i, salt);
    shmem_barrier_all();
    unsigned char *got = malloc(len ? len : 1);
    shmem_getmem(got, p, len, right);
    for (size_t i = 0; i < len; i++)
        if (got[i] != pat(right, i, salt)) FAIL("%s of %zu: [%zu] = %u", what, len, i, got[i]);
    free(got);
    shmem_barrier_all();
}

/* shmem_ptr(x, right): NULL, or a pointer through which stores land in the right
 * neighbour's x and loads see what it wrote. Returns whether it was mapped. */
static int through_ptr(int64_t *x, size_t n, const char *what)
{
    const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    int64_t *q = shmem_ptr(x, right);
    int64_t *self = shmem_ptr(x, me);
    if (self != NULL && self != x) FAIL("%s: shmem_ptr to myself = %p, not %p", what, (void *)self, (void *)x);
    for (size_t i = 0; i < n; i++) x[i] = -1;
    shmem_barrier_all();
    if (q)
        for (size_t i = 0; i < n; i++) q[i] = me * 1000 + (int64_t)i;
    else
        for (size_t i = 0; i < n; i++) shmem_int64_p(&x[i], me * 1000 + (int64_t)i, right);
    shmem_barrier_all();
    for (size_t i = 0; i < n; i++)
        if (x[i] != left * 1000 + (int64_t)i)
            FAIL("%s: [%zu] = %lld after pe %d stored %s", what, i, (long long)x[i], left,
                 q ? "through shmem_ptr" : "with shmem_p");
    shmem_barrier_all();
    for (size_t i = 0; i < n; i++) x[i] = -(me * 1000 + (int64_t)i);
    shmem_barrier_all();
    if (q)
        for (size_t i = 0; i < n; i++)
            if (q[i] != -(right * 1000 + (int64_t)i)) FAIL("%s: load through shmem_ptr [%zu] = %lld", what, i, (long long)q[i]);
    shmem_barrier_all();
    /* every PE must agree, or the record would say nothing */
    static int mapped[2];
    static long ps[SHMEM_REDUCE_SYNC_SIZE], wrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE > 2 ? SHMEM_REDUCE_MIN_WRKDATA_SIZE : 2];
    static int any, all;
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) ps[i] = SHMEM_SYNC_VALUE;
    mapped[0] = q != NULL;
    shmem_barrier_all();
    shmem_int_max_to_all(&any, mapped, 1, 0, 0, npes, (int *)wrk, ps);
    shmem_barrier_all();
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) ps[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
    shmem_int_min_to_all(&all, mapped, 1, 0, 0, npes, (int *)wrk, ps);
    shmem_barrier_all();
    if (me == 0)
        printf("%s: shmem_ptr to another PE %s\n", what,
               all ? "maps it" : any ? "maps it for some PEs only" : "is NULL");
    return q != NULL;
}

int main(void)
{
    start();
    const int right = (me + 1) % npes;

    /* many sizes, one at a time */
    for (int r = 0; r < 40; r++) {
        size_t len = (size_t)(r * 7919) % 150000 + 1;
        unsigned char *p = shmem_malloc(len);
        CHECK(p, "shmem_malloc(%zu) failed", len);
        reach(p, len, r, "shmem_malloc");
        shmem_free(p);
    }
    /* several live at once, freed out of order, the freed space reused */
    unsigned char *live[8];
    for (int i = 0; i < 8; i++) {
        live[i] = shmem_malloc((size_t)(i + 1) * 10000);
        CHECK(live[i], "shmem_malloc");
    }
    for (int i = 0; i < 8; i++) reach(live[i], (size_t)(i + 1) * 10000, 100 + i, "live block");
    for (int i = 0; i < 8; i += 2) shmem_free(live[i]);
    unsigned char *again = shmem_malloc(25000);
    CHECK(again, "shmem_malloc after free");
    reach(again, 25000, 7, "reused block");
    for (int i = 1; i < 8; i += 2) reach(live[i], (size_t)(i + 1) * 10000, 200 + i, "surviving block");
    for (int i = 1; i < 8; i += 2) shmem_free(live[i]);
    shmem_free(again);

    /* calloc: zero here and as seen from another PE */
    int64_t *z = shmem_calloc(5000, sizeof(int64_t));
    CHECK(z, "shmem_calloc failed");
    for (int i = 0; i < 5000; i++)
        if (z[i]) FAIL("shmem_calloc [%d] = %lld", i, (long long)z[i]);
    shmem_barrier_all();
    int64_t zz[5000];
    shmem_getmem(zz, z, sizeof zz, right);
    for (int i = 0; i < 5000; i++)
        if (zz[i]) FAIL("shmem_calloc seen from pe %d: [%d] = %lld", me, i, (long long)zz[i]);
    shmem_barrier_all();

    /* align */
    for (size_t a = 64; a <= 65536; a *= 32) {
        unsigned char *p = shmem_align(a, 12345);
        CHECK(p && (uintptr_t)p % a == 0, "shmem_align(%zu) = %p", a, (void *)p);
        reach(p, 12345, (int)a, "shmem_align");
        shmem_free(p);
    }

    /* realloc: the old contents kept, the new size reachable */
    unsigned char *p = shmem_malloc(1000);
    CHECK(p, "shmem_malloc");
    for (int i = 0; i < 1000; i++) p[i] = pat(me, i, 55);
    shmem_barrier_all();
    p = shmem_realloc(p, 300000);
    CHECK(p, "shmem_realloc failed");
    for (int i = 0; i < 1000; i++)
        if (p[i] != pat(me, i, 55)) FAIL("shmem_realloc lost [%d]", i);
    reach(p, 300000, 56, "shmem_realloc");

    /* a large allocation */
    unsigned char *big = shmem_malloc(24 << 20);
    CHECK(big, "shmem_malloc(24 MiB) failed");
    reach(big, 24 << 20, 9, "large block");

    if (!shmem_addr_accessible(p, right) || !shmem_addr_accessible(sdata, right) || !shmem_pe_accessible(right))
        FAIL("symmetric memory of pe %d not accessible", right);
    int64_t not_symmetric[4];
    if (shmem_addr_accessible(not_symmetric, right)) FAIL("a stack address is accessible remotely");

    through_ptr((int64_t *)big, 4096, "heap");
    through_ptr(sdata, 256, "static data");

    shmem_free(big);
    shmem_free(p);
    shmem_free(z);
    return finish("heap");
}
