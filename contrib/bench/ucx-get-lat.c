/* Latency of one small ucp_get_nbi completed by ucp_ep_flush, between two processes on one
 * host, the target only calling ucp_worker_progress: the pattern of MPICH's MPI_Get +
 * MPI_Win_flush through ch4:ucx (osu.c get_lat), without MPICH. The target's memory is
 * registered (ucp_mem_map of malloc'ed memory, as MPICH's windows are), not allocated by
 * the library. Built against Debian's UCX headers; run over UCX or Rucx by
 * LD_LIBRARY_PATH. Prints "get_lat SIZE US" per size, the mean of ITERS round trips;
 * with GET_WINDOW=N in the environment, N gets per flush (osu.c get_bw) and "get_bw SIZE
 * MB/s".
 *
 *   ucx-get-lat [ITERS] [SIZE ...]     (default 100000; 8)
 */
#include <ucp/api/ucp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REGION (1 << 20)

static void die(const char *what)
{
    fprintf(stderr, "ucx-get-lat: %s failed\n", what);
    exit(1);
}

static void put_blob(int fd, const void *p, uint64_t n)
{
    if (write(fd, &n, sizeof(n)) != sizeof(n) || write(fd, p, n) != (ssize_t)n) die("write");
}

static void *get_blob(int fd, uint64_t *n)
{
    if (read(fd, n, sizeof(*n)) != sizeof(*n)) die("read");
    char *p = malloc(*n);
    for (uint64_t got = 0; got < *n;) {
        ssize_t r = read(fd, p + got, *n - got);
        if (r <= 0) die("read");
        got += (uint64_t)r;
    }
    return p;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
    pid_t pid = fork();
    int target = pid == 0, fd = sv[target ? 1 : 0];

    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_RMA};
    ucp_config_t *cfg;
    ucp_context_h ctx;
    ucp_worker_h w;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK || ucp_init(&p, cfg, &ctx) != UCS_OK)
        die("ucp_init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_worker_create(ctx, &wp, &w) != UCS_OK) die("ucp_worker_create");
    ucp_address_t *addr;
    size_t alen;
    if (ucp_worker_get_address(w, &addr, &alen) != UCS_OK) die("ucp_worker_get_address");
    put_blob(fd, addr, alen);
    uint64_t n;
    void *peer = get_blob(fd, &n);
    ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    ucp_ep_h ep;
    if (ucp_ep_create(w, &ep_p, &ep) != UCS_OK) die("ucp_ep_create");

    char *region = calloc(1, REGION);
    if (target) {
        for (size_t i = 0; i < REGION - 8; i++) region[i] = (char)(i * 7 + 1);
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                   .address = region, .length = REGION};
        ucp_mem_h mh;
        void *rk;
        size_t rklen;
        if (ucp_mem_map(ctx, &mp, &mh) != UCS_OK) die("ucp_mem_map");
        if (ucp_rkey_pack(ctx, mh, &rk, &rklen) != UCS_OK) die("ucp_rkey_pack");
        put_blob(fd, rk, rklen);
        uint64_t base = (uint64_t)(uintptr_t)region;
        put_blob(fd, &base, sizeof(base));
        /* The origin puts a nonzero byte at the region's end when it is done. */
        volatile char *stop = region + REGION - 1;
        while (*stop == 0) ucp_worker_progress(w);
        char c = 0;
        if (write(fd, &c, 1) != 1) die("write");
        for (int i = 0; i < 1000; i++) ucp_worker_progress(w);
        return 0;
    }

    void *rk = get_blob(fd, &n), *b = get_blob(fd, &n);
    uint64_t base;
    memcpy(&base, b, sizeof(base));
    ucp_rkey_h rkey;
    if (ucp_ep_rkey_unpack(ep, rk, &rkey) != UCS_OK) die("ucp_ep_rkey_unpack");
    char *buf = malloc(REGION);
    const char *wenv = getenv("GET_WINDOW");
    long window = wenv ? atol(wenv) : 1;
    if (window < 1 || window > 1024) die("GET_WINDOW");
    int nsizes = argc > 2 ? argc - 2 : 1;
    for (int s = 0; s < nsizes; s++) {
        size_t size = argc > 2 ? strtoul(argv[2 + s], NULL, 10) : 8;
        if (size == 0 || size * (size_t)window > REGION / 2) die("size");
        double t0 = 0;
        long warm = iters / 10 + 10;
        for (long i = 0; i < iters + warm; i++) {
            if (i == warm) t0 = now_us();
            size_t off = (size_t)(i % 64) * 8;
            for (long k = 0; k < window; k++)
                if (ucp_get_nbi(ep, buf + (size_t)k * size, size, base + off, rkey) < 0)
                    die("ucp_get_nbi");
            if (ucp_ep_flush(ep) != UCS_OK) die("ucp_ep_flush");
            if (i < 64)
                for (size_t k = 0; k < size; k++)
                    if (buf[k] != (char)((off + k) * 7 + 1)) die("check of the data read");
        }
        double us = now_us() - t0;
        if (window > 1)
            printf("get_bw %zu %.1f\n", size, (double)size * (double)window * iters / us);
        else
            printf("get_lat %zu %.3f\n", size, us / iters);
        fflush(stdout);
    }
    static char one = 1;
    if (ucp_put_nbi(ep, &one, 1, base + REGION - 1, rkey) < 0) die("ucp_put_nbi");
    if (ucp_ep_flush(ep) != UCS_OK) die("ucp_ep_flush");
    char c;
    if (read(fd, &c, 1) != 1) die("read");
    int st;
    waitpid(pid, &st, 0);
    return 0;
}
