/*
 * Rucx C example: GPU buffers through ucp.h. Two processes (a fork, before either touches
 * CUDA) exchange worker addresses through pipes; each allocates device memory with
 * ucp_mem_map(UCP_MEM_MAP_ALLOCATE, UCS_MEMORY_TYPE_CUDA), so no CUDA header or toolkit
 * is needed to build this. For each size, the data goes host -> device (parent to child),
 * device -> device (child to parent) and device -> host (parent to child), and the child
 * checks the bytes that come back to host memory. Prints "gpu_pingpong: OK"; exits 77
 * ("skipped") where there is no GPU.
 *
 *   make gpu_pingpong && ./gpu_pingpong
 */
#include <rucx.h>
#include <ucp/api/ucp.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(_call) do { ucs_status_t _s = (_call); if (_s != UCS_OK) { \
        fprintf(stderr, "%s %s:%d %s: %s\n", me, __FILE__, __LINE__, #_call, \
                ucpx_status_string(_s)); exit(1); } } while (0)

enum { MAX = 4 << 20 };
static const size_t sizes[] = {8, 4096, 100000, 1 << 20, MAX};
static const char *me = "parent";

static ucs_status_t wait_req(ucp_worker_h w, ucs_status_ptr_t r)
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

static void xfer(ucp_worker_h w, ucp_ep_h ep, void *buf, size_t n, ucp_tag_t tag, int send)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    ucs_status_ptr_t r = send ? ucp_tag_send_nbx(ep, buf, n, tag, &p)
                              : ucp_tag_recv_nbx(w, buf, n, tag, ~0ull, &p);
    CHECK(wait_req(w, r));
}

static int run(int rd, int wr, int parent)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    CHECK(ucp_context_query(ctx, &ca));
    if (!(ca.memory_types & (1ull << UCS_MEMORY_TYPE_CUDA))) {
        printf("gpu_pingpong: skipped (this context moves no CUDA memory: no GPU)\n");
        return 77;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *addr;
    size_t len;
    CHECK(ucp_worker_get_address(w, &addr, &len));
    put_blob(wr, addr, len);
    ucp_worker_release_address(w, addr);
    void *peer = get_blob(rd);
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    ucp_ep_h ep;
    CHECK(ucp_ep_create(w, &ep_params, &ep));

    /* Device memory from ucp itself. */
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        .length = MAX,
        .flags = UCP_MEM_MAP_ALLOCATE,
        .memory_type = UCS_MEMORY_TYPE_CUDA,
    };
    ucp_mem_h memh;
    CHECK(ucp_mem_map(ctx, &mp, &memh));
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_MEM_TYPE};
    CHECK(ucp_mem_query(memh, &ma));
    if (ma.mem_type != UCS_MEMORY_TYPE_CUDA) {
        fprintf(stderr, "%s: ucp_mem_query says memory type %d, not CUDA\n", me, (int)ma.mem_type);
        return 1;
    }
    void *dev = ma.address;
    unsigned char *host = malloc(MAX);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        ucp_tag_t t = k * 4;
        if (parent) {
            for (size_t i = 0; i < n; i++) host[i] = (unsigned char)(i * 7 + k);
            xfer(w, ep, host, n, t, 1);       /* host -> child's device */
            xfer(w, ep, dev, n, t + 1, 0);    /* child's device -> my device */
            xfer(w, ep, dev, n, t + 2, 1);    /* my device -> child's host */
        } else {
            xfer(w, ep, dev, n, t, 0);
            xfer(w, ep, dev, n, t + 1, 1);
            memset(host, 0, n);
            xfer(w, ep, host, n, t + 2, 0);
            for (size_t i = 0; i < n; i++)
                if (host[i] != (unsigned char)(i * 7 + k)) {
                    fprintf(stderr, "child: %zu bytes: byte %zu is %u\n", n, i, host[i]);
                    return 1;
                }
        }
    }
    /* Both are done before either leaves. */
    char b = 1;
    xfer(w, ep, &b, 1, 1000, parent);
    xfer(w, ep, &b, 1, 1001, !parent);
    CHECK(ucp_mem_unmap(ctx, memh));
    ucp_request_param_t cp = {.op_attr_mask = 0};
    CHECK(wait_req(w, ucp_ep_close_nbx(ep, &cp)));
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    free(host);
    free(peer);
    return 0;
}

int main(void)
{
    int a[2], b[2];
    if (pipe(a) || pipe(b)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        me = "child";
        exit(run(a[0], b[1], 0));
    }
    int rc = run(b[0], a[1], 1), st = 0;
    waitpid(pid, &st, 0);
    int child = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    if (rc == 77 || child == 77) return 77;
    if (rc == 0 && child == 0) {
        printf("gpu_pingpong: OK\n");
        return 0;
    }
    return 1;
}
