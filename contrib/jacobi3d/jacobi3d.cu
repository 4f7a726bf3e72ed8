/*
 * Jacobi3D on GPUs over Rucx's C API: the proxy of Charm++'s
 * examples/charm++/cuda/gpudirect/jacobi3d, written against ucp.h and rucx.h (channels).
 *
 * A global grid of N^3 doubles is split into px x py x pz blocks, one per process (the
 * factorisation nearest a cube); each block has one ghost layer. An iteration packs the
 * faces a block shares with its neighbours (up to six) with CUDA kernels, exchanges them
 * over one channel per neighbour (ucpx_channel_*: in-order tagged messages, no metadata
 * message), unpacks them into the ghosts and runs the 7-point Jacobi kernel. Variants:
 *
 *   direct   the faces go from and to device memory (GPU-direct: cuda_ipc on one host);
 *   staged   each face is copied to pinned host memory, sent from there, received into
 *            pinned host memory and copied to the device (host staging).
 *
 * Processes are forked by this program before any CUDA call (rank r uses GPU r mod G) and
 * exchange worker addresses through pipes. At the end every block's interior sum goes to
 * the parent, which compares the total against the same iterations run on the CPU.
 * Prints per-iteration time (the slowest rank's mean) and the part spent communicating
 * (from the packed faces to the unpacked ones, staging copies included).
 *
 *   nvcc -O2 -o jacobi3d contrib/jacobi3d/jacobi3d.cu -Ibindings-c/include \
 *        -L<dir of libucp.so.0> -l:libucp.so.0 -Xlinker -rpath=<that dir>
 *   ./jacobi3d -p 8 -g 2 -n 192 -i 100 -m direct
 */
#include <rucx.h>
#include <ucp/api/ucp.h>

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(_call)                                                                    \
    do {                                                                                \
        ucs_status_t _s = (_call);                                                      \
        if (_s != UCS_OK) {                                                             \
            fprintf(stderr, "rank %d %s:%d %s: %s\n", rank, __FILE__, __LINE__, #_call, \
                    ucpx_status_string(_s));                                            \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)
#define CUDA(_call)                                                                      \
    do {                                                                                 \
        cudaError_t _e = (_call);                                                        \
        if (_e != cudaSuccess) {                                                         \
            fprintf(stderr, "rank %d %s:%d %s: %s\n", rank, __FILE__, __LINE__, #_call,  \
                    cudaGetErrorString(_e));                                             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static int rank = -1;

struct Opts {
    int procs, gpus, n, iters, warmup, staged;
};

struct Result {
    double sum, iter_us, comm_us;
};

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* px * py * pz = p, as near a cube as it goes (largest factor first along x). */
static void factor(int p, int d[3])
{
    d[0] = d[1] = d[2] = 1;
    for (int f = 2; p > 1;) {
        if (p % f) {
            f++;
            continue;
        }
        p /= f;
        int k = d[0] <= d[1] && d[0] <= d[2] ? 0 : (d[1] <= d[2] ? 1 : 2);
        d[k] *= f;
    }
}

/* The boundary: the x = 0 face of the global grid is held at 1, the others at 0. */
__host__ __device__ static double boundary(long gx, long gy, long gz, int n)
{
    (void)gy;
    (void)gz;
    (void)n;
    return gx < 0 ? 1.0 : 0.0;
}

/* Index into a block of (lx+2) x (ly+2) x (lz+2), x fastest. */
__host__ __device__ static long at(int x, int y, int z, int lx, int ly)
{
    return (long)x + (long)(lx + 2) * ((long)y + (long)(ly + 2) * z);
}

__global__ void init_block(double *a, int lx, int ly, int lz, int ox, int oy, int oz, int n)
{
    long cells = (long)(lx + 2) * (ly + 2) * (lz + 2);
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < cells;
         i += (long)gridDim.x * blockDim.x) {
        int x = i % (lx + 2), y = (i / (lx + 2)) % (ly + 2), z = i / ((long)(lx + 2) * (ly + 2));
        long gx = ox + x - 1, gy = oy + y - 1, gz = oz + z - 1;
        bool outside = gx < 0 || gy < 0 || gz < 0 || gx >= n || gy >= n || gz >= n;
        a[i] = outside ? boundary(gx, gy, gz, n) : 0.0;
    }
}

/* A face: axis 0..2, side 0 (low) or 1 (high). Its plane is w x h cells. */
__device__ static void face_cell(int axis, int side, int k, int lx, int ly, int lz, int ghost,
                                 int *x, int *y, int *z)
{
    int d[3] = {lx, ly, lz};
    int u = axis == 0 ? 1 : 0, v = axis == 2 ? 1 : 2;
    int plane = ghost ? (side ? d[axis] + 1 : 0) : (side ? d[axis] : 1);
    int c[3];
    c[axis] = plane;
    c[u] = 1 + k % d[u];
    c[v] = 1 + k / d[u];
    *x = c[0];
    *y = c[1];
    *z = c[2];
}

__global__ void pack_face(const double *a, double *buf, int axis, int side, int lx, int ly,
                          int lz, int cells)
{
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < cells; k += gridDim.x * blockDim.x) {
        int x, y, z;
        face_cell(axis, side, k, lx, ly, lz, 0, &x, &y, &z);
        buf[k] = a[at(x, y, z, lx, ly)];
    }
}

__global__ void unpack_face(double *a, const double *buf, int axis, int side, int lx, int ly,
                            int lz, int cells)
{
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < cells; k += gridDim.x * blockDim.x) {
        int x, y, z;
        face_cell(axis, side, k, lx, ly, lz, 1, &x, &y, &z);
        a[at(x, y, z, lx, ly)] = buf[k];
    }
}

__global__ void jacobi(const double *a, double *b, int lx, int ly, int lz)
{
    long cells = (long)lx * ly * lz;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < cells;
         i += (long)gridDim.x * blockDim.x) {
        int x = 1 + i % lx, y = 1 + (i / lx) % ly, z = 1 + i / ((long)lx * ly);
        long c = at(x, y, z, lx, ly), sx = 1, sy = lx + 2, sz = (long)(lx + 2) * (ly + 2);
        b[c] = (a[c] + a[c - sx] + a[c + sx] + a[c - sy] + a[c + sy] + a[c - sz] + a[c + sz]) /
               7.0;
    }
}

__global__ void interior_sum(const double *a, double *out, int lx, int ly, int lz)
{
    long cells = (long)lx * ly * lz;
    double s = 0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < cells;
         i += (long)gridDim.x * blockDim.x) {
        int x = 1 + i % lx, y = 1 + (i / lx) % ly, z = 1 + i / ((long)lx * ly);
        s += a[at(x, y, z, lx, ly)];
    }
    atomicAdd(out, s);
}

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

static void *get_blob(int fd, size_t *len)
{
    size_t n;
    if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n)) exit(1);
    char *p = (char *)malloc(n ? n : 1);
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, p + got, n - got);
        if (k <= 0) exit(1);
        got += (size_t)k;
    }
    if (len) *len = n;
    return p;
}

static int run_rank(const Opts *o, int up, int down)
{
    int d[3];
    factor(o->procs, d);
    int c[3] = {rank % d[0], (rank / d[0]) % d[1], rank / (d[0] * d[1])};
    int l[3], off[3];
    for (int k = 0; k < 3; k++) {
        if (o->n % d[k]) {
            fprintf(stderr, "grid %d does not divide by %d\n", o->n, d[k]);
            return 1;
        }
        l[k] = o->n / d[k];
        off[k] = c[k] * l[k];
    }
    CUDA(cudaSetDevice(rank % o->gpus));

    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_worker_params_t wp = {};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *addr;
    size_t len;
    CHECK(ucp_worker_get_address(w, &addr, &len));
    put_blob(up, addr, len);
    ucp_worker_release_address(w, addr);
    void **peers = (void **)calloc(o->procs, sizeof(void *));
    for (int r = 0; r < o->procs; r++) peers[r] = get_blob(down, NULL);

    /* Neighbours: face f = 2 * axis + side. */
    int nbr[6];
    ucp_ep_h ep[6] = {};
    ucpx_channel_h ch[6] = {};
    size_t cells[6];
    double *dsend[6] = {}, *drecv[6] = {}, *hsend[6] = {}, *hrecv[6] = {};
    for (int f = 0; f < 6; f++) {
        int axis = f / 2, side = f % 2;
        int cc[3] = {c[0], c[1], c[2]};
        cc[axis] += side ? 1 : -1;
        nbr[f] = (cc[axis] < 0 || cc[axis] >= d[axis])
                     ? -1
                     : cc[0] + d[0] * (cc[1] + d[1] * cc[2]);
        int u = axis == 0 ? 1 : 0, v = axis == 2 ? 1 : 2;
        cells[f] = (size_t)l[u] * l[v];
        if (nbr[f] < 0) continue;
        ucp_ep_params_t ep_params = {};
        ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address = (const ucp_address_t *)peers[nbr[f]];
        CHECK(ucp_ep_create(w, &ep_params, &ep[f]));
        /* Both sides of a face name it by its axis: one channel per neighbour pair. */
        CHECK(ucpx_channel_open(ep[f], 1 + axis, NULL, &ch[f]));
        CUDA(cudaMalloc(&dsend[f], cells[f] * sizeof(double)));
        CUDA(cudaMalloc(&drecv[f], cells[f] * sizeof(double)));
        if (o->staged) {
            CUDA(cudaMallocHost(&hsend[f], cells[f] * sizeof(double)));
            CUDA(cudaMallocHost(&hrecv[f], cells[f] * sizeof(double)));
        }
    }

    size_t total = (size_t)(l[0] + 2) * (l[1] + 2) * (l[2] + 2);
    double *a, *b, *sum;
    CUDA(cudaMalloc(&a, total * sizeof(double)));
    CUDA(cudaMalloc(&b, total * sizeof(double)));
    CUDA(cudaMalloc(&sum, sizeof(double)));
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    init_block<<<256, 256, 0, s>>>(a, l[0], l[1], l[2], off[0], off[1], off[2], o->n);
    init_block<<<256, 256, 0, s>>>(b, l[0], l[1], l[2], off[0], off[1], off[2], o->n);
    CUDA(cudaStreamSynchronize(s));

    double t_iter = 0, t_comm = 0;
    ucp_request_param_t rp = {};
    for (int it = 0; it < o->warmup + o->iters; it++) {
        double t0 = now_us();
        ucs_status_ptr_t rr[6] = {}, sr[6] = {};
        for (int f = 0; f < 6; f++) {
            if (nbr[f] < 0) continue;
            void *dst = o->staged ? (void *)hrecv[f] : (void *)drecv[f];
            rr[f] = ucpx_channel_recv_nbx(ch[f], dst, cells[f] * sizeof(double), &rp);
            int bl = (int)((cells[f] + 255) / 256);
            pack_face<<<bl < 1024 ? bl : 1024, 256, 0, s>>>(a, dsend[f], f / 2, f % 2, l[0], l[1],
                                                           l[2], (int)cells[f]);
        }
        CUDA(cudaStreamSynchronize(s));
        double t1 = now_us();
        if (o->staged) {
            for (int f = 0; f < 6; f++)
                if (nbr[f] >= 0)
                    CUDA(cudaMemcpyAsync(hsend[f], dsend[f], cells[f] * sizeof(double),
                                         cudaMemcpyDeviceToHost, s));
            CUDA(cudaStreamSynchronize(s));
        }
        for (int f = 0; f < 6; f++) {
            if (nbr[f] < 0) continue;
            void *src = o->staged ? (void *)hsend[f] : (void *)dsend[f];
            sr[f] = ucpx_channel_send_nbx(ch[f], src, cells[f] * sizeof(double), &rp);
        }
        for (int f = 0; f < 6; f++) {
            if (nbr[f] < 0) continue;
            CHECK(wait_req(w, rr[f]));
            if (o->staged)
                CUDA(cudaMemcpyAsync(drecv[f], hrecv[f], cells[f] * sizeof(double),
                                     cudaMemcpyHostToDevice, s));
            int bl = (int)((cells[f] + 255) / 256);
            unpack_face<<<bl < 1024 ? bl : 1024, 256, 0, s>>>(a, drecv[f], f / 2, f % 2, l[0],
                                                             l[1], l[2], (int)cells[f]);
        }
        for (int f = 0; f < 6; f++)
            if (nbr[f] >= 0) CHECK(wait_req(w, sr[f]));
        CUDA(cudaStreamSynchronize(s));
        double t2 = now_us();
        jacobi<<<1024, 256, 0, s>>>(a, b, l[0], l[1], l[2]);
        CUDA(cudaStreamSynchronize(s));
        double *t = a;
        a = b;
        b = t;
        if (it >= o->warmup) {
            t_iter += now_us() - t0;
            t_comm += t2 - t1;
        }
    }
    CUDA(cudaMemsetAsync(sum, 0, sizeof(double), s));
    interior_sum<<<256, 256, 0, s>>>(a, sum, l[0], l[1], l[2]);
    Result res;
    CUDA(cudaMemcpyAsync(&res.sum, sum, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA(cudaStreamSynchronize(s));
    res.iter_us = t_iter / o->iters;
    res.comm_us = t_comm / o->iters;
    put_blob(up, &res, sizeof(res));
    /* Everyone reported before anyone tears down (the parent answers once all did). */
    free(get_blob(down, NULL));
    for (int f = 0; f < 6; f++) {
        if (nbr[f] < 0) continue;
        CHECK(ucpx_channel_close(ch[f]));
        ucp_request_param_t cp = {};
        wait_req(w, ucp_ep_close_nbx(ep[f], &cp));
    }
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    return 0;
}

/* The same iterations on the CPU, for the check: the interior sum. */
static double reference(int n, int iters)
{
    int l[3] = {n, n, n};
    size_t total = (size_t)(n + 2) * (n + 2) * (n + 2);
    double *a = (double *)malloc(total * sizeof(double)), *b = (double *)malloc(total * sizeof(double));
    for (size_t i = 0; i < total; i++) {
        int x = i % (n + 2), y = (i / (n + 2)) % (n + 2), z = i / ((size_t)(n + 2) * (n + 2));
        long gx = x - 1, gy = y - 1, gz = z - 1;
        bool outside = gx < 0 || gy < 0 || gz < 0 || gx >= n || gy >= n || gz >= n;
        a[i] = b[i] = outside ? boundary(gx, gy, gz, n) : 0.0;
    }
    long sx = 1, sy = n + 2, sz = (long)(n + 2) * (n + 2);
    for (int it = 0; it < iters; it++) {
        for (int z = 1; z <= l[2]; z++)
            for (int y = 1; y <= l[1]; y++)
                for (int x = 1; x <= l[0]; x++) {
                    long c = at(x, y, z, n, n);
                    b[c] = (a[c] + a[c - sx] + a[c + sx] + a[c - sy] + a[c + sy] + a[c - sz] +
                            a[c + sz]) / 7.0;
                }
        double *t = a;
        a = b;
        b = t;
    }
    double s = 0;
    for (int z = 1; z <= n; z++)
        for (int y = 1; y <= n; y++)
            for (int x = 1; x <= n; x++) s += a[at(x, y, z, n, n)];
    free(a);
    free(b);
    return s;
}

int main(int argc, char **argv)
{
    Opts o = {2, 1, 192, 100, 10, 0};
    int opt;
    while ((opt = getopt(argc, argv, "p:g:n:i:w:m:")) != -1) {
        switch (opt) {
        case 'p': o.procs = atoi(optarg); break;
        case 'g': o.gpus = atoi(optarg); break;
        case 'n': o.n = atoi(optarg); break;
        case 'i': o.iters = atoi(optarg); break;
        case 'w': o.warmup = atoi(optarg); break;
        case 'm': o.staged = strcmp(optarg, "staged") == 0; break;
        default:
            fprintf(stderr, "usage: %s [-p procs] [-g gpus] [-n grid] [-i iters] [-w warmup] "
                            "[-m direct|staged]\n", argv[0]);
            return 2;
        }
    }
    if (o.procs < 1 || o.procs > 64 || o.gpus < 1 || o.n < 2 || o.iters < 1 || o.warmup < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    int (*up)[2] = (int (*)[2])calloc(o.procs, sizeof(int[2]));
    int (*down)[2] = (int (*)[2])calloc(o.procs, sizeof(int[2]));
    pid_t *pid = (pid_t *)calloc(o.procs, sizeof(pid_t));
    for (int r = 0; r < o.procs; r++) {
        if (pipe(up[r]) || pipe(down[r])) return 1;
        pid[r] = fork();
        if (pid[r] == 0) {
            rank = r;
            exit(run_rank(&o, up[r][1], down[r][0]));
        }
    }
    /* Every address to every rank. */
    void **addr = (void **)calloc(o.procs, sizeof(void *));
    size_t *alen = (size_t *)calloc(o.procs, sizeof(size_t));
    for (int r = 0; r < o.procs; r++) addr[r] = get_blob(up[r][0], &alen[r]);
    for (int r = 0; r < o.procs; r++)
        for (int q = 0; q < o.procs; q++) put_blob(down[r][1], addr[q], alen[q]);
    double sum = 0, iter = 0, comm = 0;
    for (int r = 0; r < o.procs; r++) {
        size_t n;
        Result *res = (Result *)get_blob(up[r][0], &n);
        if (n != sizeof(Result)) return 1;
        sum += res->sum;
        iter = res->iter_us > iter ? res->iter_us : iter;
        comm = res->comm_us > comm ? res->comm_us : comm;
        free(res);
    }
    for (int r = 0; r < o.procs; r++) put_blob(down[r][1], "", 0);
    int failed = 0;
    for (int r = 0; r < o.procs; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        failed |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    double want = reference(o.n, o.warmup + o.iters);
    double rel = fabs(sum - want) / (fabs(want) > 0 ? fabs(want) : 1);
    int d[3];
    factor(o.procs, d);
    printf("jacobi3d %s: %d processes (%dx%dx%d) on %d GPU(s), grid %d^3, %d iterations: "
           "%.1f us/iteration, %.1f us communicating; sum %.12g, CPU %.12g (rel. diff %.1e) %s\n",
           o.staged ? "staged" : "direct", o.procs, d[0], d[1], d[2], o.gpus, o.n, o.iters, iter,
           comm, sum, want, rel, !failed && rel < 1e-9 ? "OK" : "FAILED");
    return !failed && rel < 1e-9 ? 0 : 1;
}
