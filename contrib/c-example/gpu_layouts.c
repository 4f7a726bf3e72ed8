/*
 * Rucx C example: noncontiguous data in GPU memory through ucp.h and rucx.h, as an MPI
 * library would send derived datatypes from device buffers. Two processes (a fork, before
 * either touches CUDA) each hold an N^3 grid of doubles in device memory from
 * ucp_mem_map(UCP_MEM_MAP_ALLOCATE, UCS_MEMORY_TYPE_CUDA), so no CUDA header or toolkit is
 * needed to build it.
 *
 *   1. The parent's grid is filled from host memory (a contiguous message to itself).
 *   2. An MPI-style vector (a column: N blocks of one double, N*N apart) goes from the
 *      parent's device grid into the child's host buffer, contiguous.
 *   3. A 3D face (the subarray z = 0 of the grid, C order: N*N single doubles, N apart)
 *      goes from the parent's device grid into the child's device grid as a different
 *      subarray (its face z = N - 1), device to device with a layout on each side.
 *   4. The child sends its whole grid back to host memory and checks that the face landed
 *      where it should and that nothing else changed.
 *
 * Prints "gpu_layouts: OK"; exits 77 ("skipped") where there is no GPU. With
 * GPU_LAYOUTS_ON_HOST=1 the grids are host memory from ucp_mem_map instead (the same
 * steps, to check the example itself anywhere).
 *
 *   make gpu_layouts && ./gpu_layouts
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

enum { N = 64 };
#define AT(x, y, z) (((size_t)(x) * N + (y)) * N + (z))
static const char *me = "parent";

static double value(size_t i) { return (double)i * 0.25 + 1.0; }

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

/* Sends or receives `count` elements of `dt` at `buf` and waits. */
static void xfer(ucp_worker_h w, ucp_ep_h ep, void *buf, size_t count, ucp_datatype_t dt,
                 ucp_tag_t tag, int send)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = dt};
    ucs_status_ptr_t r = send ? ucp_tag_send_nbx(ep, buf, count, tag, &p)
                              : ucp_tag_recv_nbx(w, buf, count, tag, ~0ull, &p);
    CHECK(wait_req(w, r));
}

static int run(int rd, int wr, int parent)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    CHECK(ucp_context_query(ctx, &ca));
    int on_host = getenv("GPU_LAYOUTS_ON_HOST") != NULL;
    if (!on_host && !(ca.memory_types & (1ull << UCS_MEMORY_TYPE_CUDA))) {
        printf("gpu_layouts: skipped (this context moves no CUDA memory: no GPU)\n");
        return 77;
    }
    ucp_worker_params_t wp = {0};
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *addr;
    size_t len;
    CHECK(ucp_worker_get_address(w, &addr, &len));
    put_blob(wr, addr, len);
    ucp_worker_release_address(w, addr);
    void *peer = get_blob(rd);
    ucp_ep_params_t epp = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    ucp_ep_h ep, self_ep;
    CHECK(ucp_ep_create(w, &epp, &ep));
    CHECK(ucp_worker_get_address(w, &addr, &len));
    ucp_ep_params_t sp = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = addr};
    CHECK(ucp_ep_create(w, &sp, &self_ep));
    ucp_worker_release_address(w, addr);

    size_t bytes = (size_t)N * N * N * sizeof(double);
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        .length = bytes,
        .flags = UCP_MEM_MAP_ALLOCATE,
        .memory_type = on_host ? UCS_MEMORY_TYPE_HOST : UCS_MEMORY_TYPE_CUDA,
    };
    ucp_mem_h memh;
    CHECK(ucp_mem_map(ctx, &mp, &memh));
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    CHECK(ucp_mem_query(memh, &ma));
    double *dev = ma.address;
    double *host = malloc(bytes);
    ucp_datatype_t dbl = ucp_dt_make_contig(sizeof(double));

    /* The layouts: a column (MPI_Type_vector) and two faces (MPI_Type_create_subarray). */
    ucp_datatype_t column, face0, face_last;
    CHECK(ucpx_dt_create_vector(N, 1, (ptrdiff_t)N * N, sizeof(double), &column));
    size_t sizes[3] = {N, N, N}, sub[3] = {N, N, 1};
    size_t s0[3] = {0, 0, 0}, s1[3] = {0, 0, N - 1};
    CHECK(ucpx_dt_create_subarray(3, sizes, sub, s0, UCPX_ORDER_C, sizeof(double), &face0));
    CHECK(ucpx_dt_create_subarray(3, sizes, sub, s1, UCPX_ORDER_C, sizeof(double), &face_last));

    int rc = 0;
    if (parent) {
        /* 1. Fill the device grid: host -> device, through a message to ourselves. */
        for (size_t i = 0; i < (size_t)N * N * N; i++) host[i] = value(i);
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = dbl};
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(w, dev, (size_t)N * N * N, 1, ~0ull, &p);
        xfer(w, self_ep, host, (size_t)N * N * N, dbl, 1, 1);
        CHECK(wait_req(w, rr));
        /* 2. A column (y = 3, z = 5) from device memory as a vector. */
        xfer(w, ep, dev + AT(0, 3, 5), 1, column, 2, 1);
        /* 3. The face z = 0 from device memory, into the child's face z = N - 1. */
        xfer(w, ep, dev, 1, face0, 3, 1);
    } else {
        /* The child's grid: -1 everywhere, written from host memory. */
        for (size_t i = 0; i < (size_t)N * N * N; i++) host[i] = -1.0;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = dbl};
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(w, dev, (size_t)N * N * N, 9, ~0ull, &p);
        xfer(w, self_ep, host, (size_t)N * N * N, dbl, 9, 1);
        CHECK(wait_req(w, rr));
        /* 2. The column into host memory, contiguous. */
        double col[N];
        xfer(w, ep, col, N, dbl, 2, 0);
        for (int x = 0; x < N; x++)
            if (col[x] != value(AT(x, 3, 5))) {
                fprintf(stderr, "child: column element %d is %g, expected %g\n", x, col[x],
                        value(AT(x, 3, 5)));
                rc = 1;
            }
        /* 3. The face into our device grid's last face. */
        xfer(w, ep, dev, 1, face_last, 3, 0);
        /* 4. The whole grid back to host memory (ourselves), checked. */
        memset(host, 0, bytes);
        ucs_status_ptr_t r2 = ucp_tag_recv_nbx(w, host, (size_t)N * N * N, 10, ~0ull, &p);
        xfer(w, self_ep, dev, (size_t)N * N * N, dbl, 10, 1);
        CHECK(wait_req(w, r2));
        for (int x = 0; x < N && rc == 0; x++)
            for (int y = 0; y < N && rc == 0; y++)
                for (int z = 0; z < N && rc == 0; z++) {
                    double want = z == N - 1 ? value(AT(x, y, 0)) : -1.0;
                    if (host[AT(x, y, z)] != want) {
                        fprintf(stderr, "child: (%d, %d, %d) is %g, expected %g\n", x, y, z,
                                host[AT(x, y, z)], want);
                        rc = 1;
                    }
                }
    }
    /* Both are done before either leaves. */
    char b = 1;
    xfer(w, ep, &b, 1, ucp_dt_make_contig(1), 1000, parent);
    xfer(w, ep, &b, 1, ucp_dt_make_contig(1), 1001, !parent);
    CHECK(ucpx_dt_destroy(column));
    CHECK(ucpx_dt_destroy(face0));
    CHECK(ucpx_dt_destroy(face_last));
    CHECK(ucp_mem_unmap(ctx, memh));
    ucp_request_param_t cp = {.op_attr_mask = 0};
    CHECK(wait_req(w, ucp_ep_close_nbx(ep, &cp)));
    CHECK(wait_req(w, ucp_ep_close_nbx(self_ep, &cp)));
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    free(host);
    free(peer);
    return rc;
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
        printf("gpu_layouts: OK\n");
        return 0;
    }
    return 1;
}
