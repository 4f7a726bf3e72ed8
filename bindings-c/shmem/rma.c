/* Rucx C ABI test over oshmem (spml ucx): puts and gets. Contiguous 1 B .. 4 MiB
 * (shmem_putmem/getmem, symmetric heap and private buffers), typed put/get and p/g of every
 * width, put/get 32/64/128, strided iput/iget, non-blocking puts and gets completed by
 * shmem_quiet, shmem_fence ordering puts to one PE, and a private context. Every PE writes
 * to its right neighbour and reads from it; any number of PEs. */
#include "check.h"

#include <stdint.h>
#include <string.h>

enum { MAXB = 4 << 20 };

static unsigned char pat(int pe, size_t i, int salt)
{
    return (unsigned char)(pe * 131 + i * 7 + (i >> 9) + salt * 13);
}

static long sdata[1024]; /* symmetric: static data */
static long flag, order;
static int si;
static short ss;
static char sc;
static long long sll;
static float sf;
static double sd;
static uint32_t w32[64];
static uint64_t w64[64], w128[128];
static int istr[1500];
static int64_t lstr[1500];

static void check_bytes(const unsigned char *p, size_t len, int pe, int salt, const char *what)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat(pe, i, salt))
            FAIL("%s: %zu bytes, [%zu] = %u, want %u (from pe %d)", what, len, i, p[i],
                 pat(pe, i, salt), pe);
}

int main(void)
{
    start();
    const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    unsigned char *src = shmem_malloc(MAXB), *dst = shmem_malloc(MAXB);
    unsigned char *loc = malloc(MAXB);
    CHECK(src && dst && loc, "allocation failed");

    /* contiguous, at unaligned offsets; puts from the heap and from private memory */
    static const size_t sizes[] = {1, 2, 3, 7, 8, 9, 63, 64, 65, 255, 256, 4095, 4096, 8193,
                                   65536, 262147, 1 << 20, MAXB - 64, MAXB};
    for (int s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++) {
        size_t len = sizes[s], off = len + 64 <= MAXB ? (size_t)(s * 17) % 61 + 1 : 0;
        for (size_t i = 0; i < len; i++) src[off + i] = pat(me, i, s);
        memset(dst, 0xa5, len + off + (off + len < MAXB));
        shmem_barrier_all();
        if (s % 2)
            shmem_putmem(dst + off, src + off, len, right);
        else {
            memcpy(loc, src + off, len);
            shmem_putmem(dst + off, loc, len, right);
        }
        shmem_barrier_all();
        check_bytes(dst + off, len, left, s, "putmem");
        if (off && dst[off - 1] != 0xa5) FAIL("putmem %zu wrote before its target", len);
        if (off + len < MAXB && dst[off + len] != 0xa5) FAIL("putmem %zu wrote past its target", len);
        memset(loc, 0, len + 1);
        shmem_getmem(loc, src + off, len, right);
        check_bytes(loc, len, right, s, "getmem");
        if (loc[len] != 0) FAIL("getmem %zu wrote past its buffer", len);
        shmem_getmem(dst + off, src + off, len, right); /* into the symmetric heap */
        check_bytes(dst + off, len, right, s, "getmem into the heap");
        shmem_barrier_all();
    }

    /* typed put/get into static symmetric data */
    long lv[1024], lg[1024];
    for (int i = 0; i < 1024; i++) lv[i] = me * 100000L + i;
    shmem_long_put(sdata, lv, 1024, right);
    shmem_barrier_all();
    for (int i = 0; i < 1024; i++)
        if (sdata[i] != left * 100000L + i) FAIL("long_put [%d] = %ld", i, sdata[i]);
    shmem_long_get(lg, sdata, 1024, right);
    for (int i = 0; i < 1024; i++)
        if (lg[i] != me * 100000L + i) FAIL("long_get [%d] = %ld", i, lg[i]);
    shmem_barrier_all();

    /* p and g of every width */
    shmem_int_p(&si, 1000 + me, right);
    shmem_short_p(&ss, (short)(-200 - me), right);
    shmem_char_p(&sc, (char)('a' + me), right);
    shmem_longlong_p(&sll, (1LL << 40) + me, right);
    shmem_float_p(&sf, 0.25f + me, right);
    shmem_double_p(&sd, -0.5 - me, right);
    shmem_barrier_all();
    if (si != 1000 + left || ss != -200 - left || sc != 'a' + left || sll != (1LL << 40) + left ||
        sf != 0.25f + left || sd != -0.5 - left)
        FAIL("p: %d %d %d %lld %g %g", si, ss, sc, sll, sf, sd);
    if (shmem_int_g(&si, right) != 1000 + me || shmem_short_g(&ss, right) != -200 - me ||
        shmem_char_g(&sc, right) != 'a' + me || shmem_longlong_g(&sll, right) != (1LL << 40) + me ||
        shmem_float_g(&sf, right) != 0.25f + me || shmem_double_g(&sd, right) != -0.5 - me)
        FAIL("g");
    shmem_barrier_all();

    /* put/get 32, 64, 128 */
    uint32_t v32[64], g32[64];
    uint64_t v64[64], g64[64], v128[128], g128[128];
    for (int i = 0; i < 64; i++) {
        v32[i] = 0x80000000u + me * 64u + i;
        v64[i] = 0x8000000000000000ull + ((uint64_t)me << 32) + i;
    }
    for (int i = 0; i < 128; i++) v128[i] = ((uint64_t)me << 48) + i * 0x10001ull;
    shmem_put32(w32, v32, 64, right);
    shmem_put64(w64, v64, 64, right);
    shmem_put128(w128, v128, 64, right);
    shmem_barrier_all();
    for (int i = 0; i < 64; i++)
        if (w32[i] != 0x80000000u + left * 64u + i || w64[i] != 0x8000000000000000ull + ((uint64_t)left << 32) + i)
            FAIL("put32/64 [%d]", i);
    for (int i = 0; i < 128; i++)
        if (w128[i] != ((uint64_t)left << 48) + i * 0x10001ull) FAIL("put128 [%d]", i);
    shmem_get32(g32, w32, 64, right);
    shmem_get64(g64, w64, 64, right);
    shmem_get128(g128, w128, 64, right);
    if (memcmp(g32, v32, sizeof g32) || memcmp(g64, v64, sizeof g64) || memcmp(g128, v128, sizeof g128))
        FAIL("get32/64/128");
    shmem_barrier_all();

    /* strided: every 2nd source element to every 3rd target element, and back */
    int isrc[1000], ig[500];
    int64_t lsrc[1500], lgs[300];
    for (int i = 0; i < 1500; i++) istr[i] = -1, lstr[i] = -1;
    for (int i = 0; i < 1000; i++) isrc[i] = me * 10000 + i;
    for (int i = 0; i < 1500; i++) lsrc[i] = ((int64_t)me << 40) + i;
    shmem_barrier_all();
    shmem_int_iput(istr, isrc, 3, 2, 500, right);
    shmem_iput64(lstr, lsrc, 5, 2, 300, right);
    shmem_barrier_all();
    for (int i = 0; i < 1500; i++) {
        int want = i % 3 == 0 ? left * 10000 + 2 * (i / 3) : -1;
        if (istr[i] != want) FAIL("int_iput [%d] = %d, want %d", i, istr[i], want);
        int64_t lwant = i % 5 == 0 ? ((int64_t)left << 40) + 2 * (i / 5) : -1;
        if (lstr[i] != lwant) FAIL("iput64 [%d] = %lld", i, (long long)lstr[i]);
    }
    shmem_int_iget(ig, istr, 1, 3, 500, right);
    for (int i = 0; i < 500; i++)
        if (ig[i] != me * 10000 + 2 * i) FAIL("int_iget [%d] = %d", i, ig[i]);
    shmem_iget64(lgs, lstr, 1, 10, 150, right);
    for (int i = 0; i < 150; i++)
        if (lgs[i] != ((int64_t)me << 40) + 4 * i) FAIL("iget64 [%d] = %lld", i, (long long)lgs[i]);
    shmem_barrier_all();

    /* non-blocking puts made complete by shmem_quiet; the target learns it from a flag */
    const size_t nb = 3 << 20;
    for (size_t i = 0; i < nb; i++) src[i] = pat(me, i, 99);
    memset(dst, 0, nb);
    flag = 0;
    shmem_barrier_all();
    for (int c = 0; c < 64; c++) shmem_putmem_nbi(dst + c * 16384, src + c * 16384, 16384, right);
    shmem_putmem_nbi(dst + (1 << 20), src + (1 << 20), nb - (1 << 20), right);
    shmem_quiet();
    shmem_long_atomic_set(&flag, 1, right);
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 1);
    check_bytes(dst, nb, left, 99, "putmem_nbi + quiet");
    shmem_barrier_all();

    /* shmem_fence orders puts to one PE: the last of 300 stores to one word wins, and data
     * put before the fence is there when the flag put after it is */
    order = 0;
    flag = 0;
    for (size_t i = 0; i < (1 << 20); i++) src[i] = pat(me, i, 42);
    shmem_barrier_all();
    for (long k = 1; k <= 300; k++) {
        shmem_long_p(&order, k, right);
        shmem_fence();
    }
    shmem_putmem(dst, src, 1 << 20, right);
    shmem_fence();
    shmem_long_p(&flag, 2, right);
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 2);
    if (order != 300) FAIL("fence: order = %ld after 300 fenced puts", order);
    check_bytes(dst, 1 << 20, left, 42, "putmem + fence");
    shmem_barrier_all();

    /* non-blocking gets */
    for (size_t i = 0; i < (1 << 20); i++) src[i] = pat(me, i, 77);
    memset(loc, 0, 1 << 20);
    shmem_barrier_all();
    for (int c = 0; c < 32; c++) shmem_getmem_nbi(loc + c * 4096, src + c * 4096, 4096, right);
    shmem_getmem_nbi(loc + 32 * 4096, src + 32 * 4096, (1 << 20) - 32 * 4096, right);
    shmem_quiet();
    check_bytes(loc, 1 << 20, right, 77, "getmem_nbi + quiet");
    shmem_barrier_all();

    /* a private context: its own operations, made complete by shmem_ctx_quiet */
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0, "shmem_ctx_create failed");
    for (size_t i = 0; i < 65536; i++) src[i] = pat(me, i, 5);
    memset(dst, 0, 65536);
    flag = 0;
    shmem_barrier_all();
    shmem_ctx_putmem(ctx, dst, src, 65536, right);
    shmem_ctx_long_p(ctx, &sdata[7], 7000 + me, right);
    shmem_ctx_quiet(ctx);
    shmem_long_p(&flag, 3, right);
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 3);
    check_bytes(dst, 65536, left, 5, "ctx_putmem + ctx_quiet");
    if (sdata[7] != 7000 + left) FAIL("ctx_long_p: %ld", sdata[7]);
    memset(loc, 0, 65536);
    shmem_ctx_getmem(ctx, loc, src, 65536, right);
    check_bytes(loc, 65536, right, 5, "ctx_getmem");
    shmem_ctx_destroy(ctx);

    shmem_barrier_all();
    shmem_free(dst);
    shmem_free(src);
    free(loc);
    return finish("rma");
}
