/*
 * Device messaging two ways, in the OSU latency shape (ping-pong, one-way latency = half
 * the round trip), 8 B to 4 MiB, on host and on GPU buffers:
 *
 *   devmsg   Charm++'s GPU Messaging API: the sender sends a small host message with the
 *            data's size and tag (in Charm++, the entry method's message), then the data
 *            with that tag; the receiver takes the metadata and only then posts the
 *            receive on its buffer. Plain ucp_tag_* calls: runs over UCX as well.
 *   channel  Rucx's channels (ucpx_channel_*): both sides derive each message's tag, so
 *            the receive is posted at once and no metadata message goes. Rucx only: the
 *            symbols are weak, and the mode is skipped on a library without them.
 *
 * Two processes (a fork before either touches CUDA) exchange worker addresses through
 * pipes; GPU buffers come from ucp_mem_map(UCP_MEM_MAP_ALLOCATE, UCS_MEMORY_TYPE_CUDA), so
 * no CUDA header is needed (UCX allocates only in a current CUDA context: each process makes
 * device 0's primary context current first, through the driver loaded with dlopen). The
 * first round checks every byte of every size.
 *
 *   cc -O2 -Ibindings-c/include -o gpu-msg contrib/bench/gpu-msg.c -L<dir> -l:libucp.so.0
 *   ./gpu-msg [host|cuda ...]
 */
#include <rucx.h>
#include <ucp/api/ucp.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#pragma weak ucpx_channel_open
#pragma weak ucpx_channel_send_nbx
#pragma weak ucpx_channel_recv_nbx
#pragma weak ucpx_channel_close

#define CHECK(_call)                                                                       \
    do {                                                                                   \
        ucs_status_t _s = (_call);                                                         \
        if (_s != UCS_OK) {                                                                \
            fprintf(stderr, "%s %s:%d %s: status %d\n", me, __FILE__, __LINE__, #_call,   \
                    (int)_s);                                                              \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

enum { MAX = 4 << 20 };
static const char *me = "parent";
static ucp_worker_h w;
static ucp_ep_h ep;
static ucpx_channel_h ch;
static uint64_t counter;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static ucs_status_t wait_req(ucs_status_ptr_t r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    return s;
}

static void put_blob(int fd, const void *p, size_t n)
{
    if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(fd, p, n) != (ssize_t)n) exit(1);
}

static void *get_blob(int fd)
{
    size_t n;
    if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n)) exit(1);
    char *p = malloc(n);
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, p + got, n - got);
        if (k <= 0) exit(1);
        got += (size_t)k;
    }
    return p;
}

#define META_TAG (1ull << 62)
#define DATA_TAG (2ull << 62)

struct meta {
    uint64_t size, tag;
};

/* One message each way of the Charm++ device path: metadata, then data on its tag. */
static void devmsg_send(void *buf, size_t n)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    struct meta m = {n, DATA_TAG | counter++};
    ucs_status_ptr_t a = ucp_tag_send_nbx(ep, &m, sizeof(m), META_TAG, &p);
    ucs_status_ptr_t b = ucp_tag_send_nbx(ep, buf, n, m.tag, &p);
    CHECK(wait_req(a));
    CHECK(wait_req(b));
}

static void devmsg_recv(void *buf, size_t n)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    struct meta m;
    CHECK(wait_req(ucp_tag_recv_nbx(w, &m, sizeof(m), META_TAG, ~0ull, &p)));
    if (m.size != n) {
        fprintf(stderr, "%s: metadata says %llu bytes, expected %zu\n", me,
                (unsigned long long)m.size, n);
        exit(1);
    }
    counter++;
    CHECK(wait_req(ucp_tag_recv_nbx(w, buf, n, m.tag, ~0ull, &p)));
}

static void channel_send(void *buf, size_t n)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    CHECK(wait_req(ucpx_channel_send_nbx(ch, buf, n, &p)));
}

static void channel_recv(void *buf, size_t n)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    CHECK(wait_req(ucpx_channel_recv_nbx(ch, buf, n, &p)));
}

/* Makes device 0's primary context current, as a CUDA application would have (UCX's
 * ucp_mem_map of CUDA memory needs one); nothing where there is no driver. */
static void cuda_context(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) return;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
    int (*set)(void *) = (int (*)(void *))dlsym(h, "cuCtxSetCurrent");
    void *ctx = NULL;
    if (init && retain && set && init(0) == 0 && retain(&ctx, 0) == 0) set(ctx);
}

static int run(int rd, int wr, int parent, int argc, char **argv)
{
    cuda_context();
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *addr;
    size_t len;
    CHECK(ucp_worker_get_address(w, &addr, &len));
    put_blob(wr, addr, len);
    ucp_worker_release_address(w, addr);
    void *peer = get_blob(rd);
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    CHECK(ucp_ep_create(w, &ep_params, &ep));
    int channels = ucpx_channel_open != NULL;
    if (channels) CHECK(ucpx_channel_open(ep, 7, NULL, &ch));

    const char *mems[] = {"host", "cuda"};
    unsigned char *check = malloc(MAX);
    if (parent) printf("# one-way latency (us), median of 3 rounds of ping-pongs\n");
    for (int mi = 0; mi < 2; mi++) {
        int wanted = argc <= 1;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], mems[mi]) == 0;
        if (!wanted) continue;
        void *buf;
        ucp_mem_h memh = NULL;
        if (mi == 0) {
            buf = malloc(MAX);
        } else {
            ucp_mem_map_params_t mp = {
                .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                              UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
                .length = MAX,
                .flags = UCP_MEM_MAP_ALLOCATE,
                .memory_type = UCS_MEMORY_TYPE_CUDA,
            };
            if (ucp_mem_map(ctx, &mp, &memh) != UCS_OK) {
                if (parent) printf("# %s: skipped (no GPU memory from ucp_mem_map)\n", mems[mi]);
                continue;
            }
            ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
            CHECK(ucp_mem_query(memh, &ma));
            buf = ma.address;
        }
        for (int mode = 0; mode < 2; mode++) {
            if (mode == 1 && !channels) {
                if (parent) printf("# %s channel: skipped (no ucpx_channel_* in this library)\n",
                                   mems[mi]);
                continue;
            }
            void (*snd)(void *, size_t) = mode ? channel_send : devmsg_send;
            void (*rcv)(void *, size_t) = mode ? channel_recv : devmsg_recv;
            if (parent) printf("## %s %s\n", mems[mi], mode ? "channel" : "devmsg");
            for (size_t n = 8; n <= MAX; n *= 2) {
                int iters = n <= 65536 ? 1000 : 100;
                double best[3];
                for (int round = 0; round < 3; round++) {
                    /* Round 0 checks the bytes: the parent sends a pattern, the child
                     * returns it, the parent reads it back through a host copy. */
                    if (round == 0) {
                        if (parent) {
                            for (size_t i = 0; i < n; i++) check[i] = (unsigned char)(i * 13 + n);
                            if (mi == 0) memcpy(buf, check, n);
                            else {
                                /* Host pattern to the child's device buffer, back into ours. */
                                snd(check, n);
                                rcv(buf, n);
                                memset(check, 0, n);
                                /* Ours, device, to the child's host buffer and back to host. */
                                snd(buf, n);
                                rcv(check, n);
                                for (size_t i = 0; i < n; i++)
                                    if (check[i] != (unsigned char)(i * 13 + n)) {
                                        fprintf(stderr, "%s %zu: byte %zu wrong\n", mems[mi], n, i);
                                        exit(1);
                                    }
                            }
                        } else if (mi == 1) {
                            rcv(buf, n);
                            snd(buf, n);
                            rcv(check, n);
                            snd(check, n);
                        }
                    }
                    double t0 = now_us();
                    for (int i = 0; i < iters; i++) {
                        if (parent) {
                            snd(buf, n);
                            rcv(buf, n);
                        } else {
                            rcv(buf, n);
                            snd(buf, n);
                        }
                    }
                    best[round] = (now_us() - t0) / (2.0 * iters);
                }
                if (mi == 0 && parent) {
                    /* What came back after the ping-pongs is what went. */
                    for (size_t i = 0; i < n; i++)
                        if (((unsigned char *)buf)[i] != (unsigned char)(i * 13 + n)) {
                            fprintf(stderr, "host %zu: byte %zu wrong\n", n, i);
                            exit(1);
                        }
                }
                /* Median of three. */
                double a = best[0], b = best[1], c = best[2];
                double med = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
                if (parent) printf("%-9zu %10.2f\n", n, med);
            }
        }
        if (memh) CHECK(ucp_mem_unmap(ctx, memh));
        else free(buf);
    }
    /* Both are done before either leaves. */
    char b = 1;
    ucp_request_param_t p = {.op_attr_mask = 0};
    if (parent) {
        CHECK(wait_req(ucp_tag_send_nbx(ep, &b, 1, 99, &p)));
        CHECK(wait_req(ucp_tag_recv_nbx(w, &b, 1, 98, ~0ull, &p)));
    } else {
        CHECK(wait_req(ucp_tag_recv_nbx(w, &b, 1, 99, ~0ull, &p)));
        CHECK(wait_req(ucp_tag_send_nbx(ep, &b, 1, 98, &p)));
    }
    if (channels) CHECK(ucpx_channel_close(ch));
    ucp_request_param_t cp = {.op_attr_mask = 0};
    wait_req(ucp_ep_close_nbx(ep, &cp));
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    free(check);
    free(peer);
    return 0;
}

int main(int argc, char **argv)
{
    int a[2], b[2];
    if (pipe(a) || pipe(b)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        me = "child";
        exit(run(a[0], b[1], 0, argc, argv));
    }
    int rc = run(b[0], a[1], 1, argc, argv), st = 0;
    waitpid(pid, &st, 0);
    return rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
