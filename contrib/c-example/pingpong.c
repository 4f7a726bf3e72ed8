/*
 * Rucx C example: two processes (a fork) exchange their ucp worker addresses through pipes
 * and play tag ping-pong, then send a strided matrix column block with a Rucx layout
 * datatype (rucx.h) and receive it as contiguous data.
 *
 *   make            # builds against Rucx through pkg-config (see Makefile)
 *   ./pingpong [iterations]
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
        fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #_call, \
                ucpx_status_string(_s)); exit(1); } } while (0)

static const char *me = "parent";

/* Waits for a request returned by a _nbx call (NULL: done at once). */
static ucs_status_t wait_req(ucp_worker_h w, ucs_status_ptr_t r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    return s;
}

static void send_blob(int fd, const void *p, size_t n)
{
    if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(fd, p, n) != (ssize_t)n) {
        perror("write"); exit(1);
    }
}

static void *recv_blob(int fd)
{
    size_t n;
    if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n)) { perror("read"); exit(1); }
    char *p = malloc(n);
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, p + got, n - got);
        if (k <= 0) { perror("read"); exit(1); }
        got += (size_t)k;
    }
    return p;
}

static int run(int rd, int wr, int first, int iters)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features   = UCP_FEATURE_TAG,
    };
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_worker_params_t wp = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w));

    /* exchange addresses */
    ucp_address_t *addr;
    size_t addr_len;
    CHECK(ucp_worker_get_address(w, &addr, &addr_len));
    send_blob(wr, addr, addr_len);
    ucp_worker_release_address(w, addr);
    void *peer = recv_blob(rd);
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
        .address    = peer,
    };
    ucp_ep_h ep;
    CHECK(ucp_ep_create(w, &ep_params, &ep));
    free(peer);

    /* ping-pong: 8 B, 64 KiB, 1 MiB */
    size_t sizes[] = {8, 64 << 10, 1 << 20};
    ucp_request_param_t rp = {0};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        unsigned char *buf = malloc(n);
        for (int i = 0; i < iters; i++) {
            if (first) {
                memset(buf, (unsigned char)(i + k), n);
                CHECK(wait_req(w, ucp_tag_send_nbx(ep, buf, n, 1, &rp)));
                CHECK(wait_req(w, ucp_tag_recv_nbx(w, buf, n, 2, UINT64_MAX, &rp)));
                for (size_t j = 0; j < n; j++)
                    if (buf[j] != (unsigned char)(i + k + 1)) {
                        fprintf(stderr, "%s: pong %zu B: byte %zu wrong\n", me, n, j);
                        return 1;
                    }
            } else {
                CHECK(wait_req(w, ucp_tag_recv_nbx(w, buf, n, 1, UINT64_MAX, &rp)));
                for (size_t j = 0; j < n; j++) buf[j]++;
                CHECK(wait_req(w, ucp_tag_send_nbx(ep, buf, n, 2, &rp)));
            }
        }
        free(buf);
    }

    /* a 64x32 block of a 256x256 matrix of doubles, sent as a vector layout (no packing by
     * the application), received as 2048 contiguous doubles */
    enum { N = 256, ROWS = 64, COLS = 32, R0 = 10, C0 = 100 };
    if (first) {
        double *m = malloc(sizeof(double) * N * N);
        for (int i = 0; i < N * N; i++) m[i] = i;
        ucp_datatype_t block;
        CHECK(ucpx_dt_create_vector(ROWS, COLS, N, sizeof(double), &block));
        size_t packed;
        ptrdiff_t extent;
        CHECK(ucpx_dt_query(block, &packed, &extent));
        if (packed != sizeof(double) * ROWS * COLS) { fprintf(stderr, "packed %zu\n", packed); return 1; }
        ucp_request_param_t lp = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
            .datatype     = block,
        };
        CHECK(wait_req(w, ucp_tag_send_nbx(ep, &m[R0 * N + C0], 1, 3, &lp)));
        CHECK(ucpx_dt_destroy(block));
        free(m);
    } else {
        double *c = calloc(ROWS * COLS, sizeof(double));
        ucp_tag_recv_info_t info;
        ucp_request_param_t ip = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO,
            .recv_info.tag_info = &info,
        };
        CHECK(wait_req(w, ucp_tag_recv_nbx(w, c, sizeof(double) * ROWS * COLS, 3, UINT64_MAX, &ip)));
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < COLS; j++)
                if (c[r * COLS + j] != (double)((R0 + r) * N + C0 + j)) {
                    fprintf(stderr, "%s: block [%d][%d] = %g\n", me, r, j, c[r * COLS + j]);
                    return 1;
                }
        free(c);
    }

    /* close: flush the endpoint, then a last handshake so neither side leaves early */
    ucp_request_param_t cp = {0};
    CHECK(wait_req(w, ucp_ep_close_nbx(ep, &cp)));
    char done = 1;
    if (write(wr, &done, 1) != 1 || read(rd, &done, 1) != 1) { perror("handshake"); return 1; }
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    int a[2], b[2];
    if (pipe(a) || pipe(b)) { perror("pipe"); return 1; }
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        me = "child";
        return run(a[0], b[1], 0, iters);
    }
    int rc = run(b[0], a[1], 1, iters);
    int st;
    waitpid(pid, &st, 0);
    if (rc != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "pingpong: FAILED (parent %d, child status %d)\n", rc, st);
        return 1;
    }
    printf("pingpong: OK (%d round trips of 8 B, 64 KiB, 1 MiB; vector-layout block)\n", iters);
    return 0;
}
