/* Endpoint scale through ucp.h, the same program over any libucp.so.0 (contrib/bench/scale.sh):
 * a parent and a forked child, each with one worker. The parent connects 1, 16, 64 and
 * then 256 endpoints to the child's worker (UCX and Rucx both allow several endpoints to
 * one worker), and at each count measures
 *   - the 8-byte tag ping-pong latency over its first endpoint (median of ROUNDS batches
 *     of ITERS round trips, half a round trip, microseconds), and
 *   - its resident memory, whence the memory of each endpoint added (after every new
 *     endpoint has exchanged a message with the child, so that wire-up is done).
 * Prints one line per count: "eps N lat_us L rss_kib R per_ep_bytes B". The two processes
 * are pinned to the first two CPUs they may use. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>

#define ITERS 2000
#define ROUNDS 7
#define MAX_EPS 256
#define TAG_PING 1
#define TAG_STOP 2

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static long rss_kib(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

#define CHECK(x)                                                                   \
    do {                                                                           \
        ucs_status_t s_ = (x);                                                     \
        if (s_ != UCS_OK) {                                                        \
            fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static ucs_status_t wait_req(ucp_worker_h w, void *r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    return s;
}

static void send8(ucp_worker_h w, ucp_ep_h ep, uint64_t *v, ucp_tag_t tag)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    CHECK(wait_req(w, ucp_tag_send_nbx(ep, v, 8, tag, &p)));
}

static ucp_tag_t recv8(ucp_worker_h w, uint64_t *v)
{
    ucp_tag_recv_info_t info;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO,
                             .recv_info.tag_info = &info};
    void *r = ucp_tag_recv_nbx(w, v, 8, 0, 0, &p);
    if (UCS_PTR_IS_ERR(r)) CHECK(UCS_PTR_STATUS(r));
    if (r == NULL) return info.sender_tag; /* completed at once: info is filled */
    ucs_status_t s;
    while ((s = ucp_tag_recv_request_test(r, &info)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    CHECK(s);
    return info.sender_tag;
}

static ucp_ep_h connect_to(ucp_worker_h w, void *addr)
{
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                          .address = addr};
    ucp_ep_h e;
    CHECK(ucp_ep_create(w, &ep, &e));
    return e;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent)) return 1;
    pid_t pid = fork();
    int parent = pid != 0;
    /* Each process on a core of its own (both busy-poll): the parent on the first CPU
     * this process may use, the child on the second. */
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) >= 2) {
        int k = 0, want = parent ? 0 : 1;
        for (int c = 0; c < CPU_SETSIZE; c++) {
            if (!CPU_ISSET(c, &allowed)) continue;
            if (k++ == want) {
                CPU_ZERO(&one);
                CPU_SET(c, &one);
                sched_setaffinity(0, sizeof one, &one);
                break;
            }
        }
    }
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    CHECK(ucp_init(&pp, NULL, &ctx));
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *mine;
    size_t mine_len;
    CHECK(ucp_worker_get_address(w, &mine, &mine_len));
    int out = parent ? to_child[1] : to_parent[1], in = parent ? to_parent[0] : to_child[0];
    if (write(out, &mine_len, sizeof mine_len) != sizeof mine_len ||
        write(out, mine, mine_len) != (ssize_t)mine_len)
        return 1;
    size_t len;
    if (read(in, &len, sizeof len) != sizeof len) return 1;
    void *peer = malloc(len);
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(in, (char *)peer + got, len - got);
        if (n <= 0) return 1;
        got += n;
    }
    uint64_t v = 0;
    if (!parent) {
        /* Answer every ping on the one endpoint back, until told to stop. */
        ucp_ep_h back = connect_to(w, peer);
        for (;;) {
            ucp_tag_t t = recv8(w, &v);
            if (t == TAG_STOP) break;
            send8(w, back, &v, TAG_PING);
        }
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        wait_req(w, ucp_ep_close_nbx(back, &cp));
        ucp_worker_release_address(w, mine);
        ucp_worker_destroy(w);
        ucp_cleanup(ctx);
        return 0;
    }
    static ucp_ep_h eps[MAX_EPS];
    int counts[] = {1, 16, 64, 256}, have = 0;
    long rss_base = rss_kib(), rss_prev = rss_base;
    int prev = 0;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        while (have < counts[c]) {
            eps[have] = connect_to(w, peer);
            /* One message each way: the endpoint is wired up and used. */
            send8(w, eps[have], &v, TAG_PING);
            recv8(w, &v);
            have++;
        }
        double lat[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            double t0 = now();
            for (int i = 0; i < ITERS; i++) {
                send8(w, eps[0], &v, TAG_PING);
                recv8(w, &v);
            }
            lat[r] = (now() - t0) / ITERS / 2 * 1e6;
        }
        qsort(lat, ROUNDS, sizeof lat[0], cmp);
        long rss = rss_kib();
        long per = have > prev ? (rss - rss_prev) * 1024 / (have - prev) : 0;
        if (have == 1) per = (rss - rss_base) * 1024;
        printf("eps %d lat_us %.3f rss_kib %ld per_ep_bytes %ld\n", have, lat[ROUNDS / 2], rss,
               per);
        fflush(stdout);
        rss_prev = rss;
        prev = have;
    }
    send8(w, eps[0], &v, TAG_STOP);
    for (int i = 0; i < have; i++) {
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        wait_req(w, ucp_ep_close_nbx(eps[i], &cp));
    }
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) ucp_worker_progress(w);
    ucp_worker_release_address(w, mine);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    free(peer);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
