/*
 * The device limits Rucx's GPU paths are measured against, from the CUDA driver API alone:
 * pointer-attribute queries, small-copy latency (synchronous, and asynchronous with an event
 * polled), copy bandwidth on one GPU, between GPUs and to/from pinned host memory, IPC
 * handle export/open between two processes, and which mappings of /proc/self/maps belong to
 * the driver. Build and run on the GPU machine:
 *
 *   nvcc -O2 -o probe contrib/gpu/probe.cu -lcuda && ./probe
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A grid-stride copy of 16-byte words (n a multiple of 16). */
__global__ void copy16(int4 *dst, const int4 *src, size_t n16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

static void kcopy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int blocks)
{
    size_t n16 = n / 16;
    int threads = 512;
    if (n16 < (size_t)threads) threads = n16 ? (int)n16 : 1;
    copy16<<<blocks, threads, 0, (cudaStream_t)s>>>((int4 *)dst, (const int4 *)src, n16);
}

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; \
    cuGetErrorString(r_, &s_); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
    exit(1); } } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n timings of f (each timing one call), in microseconds. */
#define MEDIAN_US(n, body) ({ double *t_ = (double *)malloc(sizeof(double) * (n)); \
    for (int i_ = 0; i_ < (n); i_++) { double t0_ = now(); body; t_[i_] = (now() - t0_) * 1e6; } \
    qsort(t_, (n), sizeof(double), cmpd); double m_ = t_[(n) / 2]; free(t_); m_; })

static void spin(CUevent e)
{
    CUresult r;
    while ((r = cuEventQuery(e)) == CUDA_ERROR_NOT_READY) {}
    CK(r);
}

/* A word of mapped host memory the GPU writes (a stream write) and the host polls. */
struct flag { volatile unsigned *host; CUdeviceptr dev; unsigned seq; };

static struct flag flag_new(void)
{
    struct flag f = {0, 0, 0};
    CK(cuMemHostAlloc((void **)&f.host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CK(cuMemHostGetDevicePointer(&f.dev, (void *)f.host, 0));
    return f;
}

/* Queues a write of the next value on s and waits until the host sees it. */
static void flag_wait(struct flag *f, CUstream s)
{
    f->seq++;
    CK(cuStreamWriteValue32(s, f->dev, f->seq, 0));
    while (*f->host != f->seq) {}
}

static CUcontext ctx_of(int dev)
{
    CUdevice d;
    CUcontext c;
    CK(cuDeviceGet(&d, dev));
    CK(cuDevicePrimaryCtxRetain(&c, d));
    return c;
}

static void small_copies(int dev)
{
    CK(cuCtxSetCurrent(ctx_of(dev)));
    CUdeviceptr a, b;
    CK(cuMemAlloc(&a, 1 << 20));
    CK(cuMemAlloc(&b, 1 << 20));
    void *pinned, *pageable = malloc(64);
    CK(cuMemHostAlloc(&pinned, 1 << 20, 0));
    CUstream s;
    CUevent e;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    for (int w = 0; w < 100; w++) CK(cuMemcpyDtoD(b, a, 8));
    printf("gpu%d 8 B copies (median us): DtoD sync %.2f, DtoD async+event %.2f, "
           "HtoD pinned async+event %.2f, DtoH pinned async+event %.2f, HtoD pageable sync %.2f, "
           "DtoH pageable sync %.2f\n", dev,
           MEDIAN_US(2000, CK(cuMemcpyDtoD(b, a, 8))),
           MEDIAN_US(2000, { CK(cuMemcpyDtoDAsync(b, a, 8, s)); CK(cuEventRecord(e, s)); spin(e); }),
           MEDIAN_US(2000, { CK(cuMemcpyHtoDAsync(b, pinned, 8, s)); CK(cuEventRecord(e, s)); spin(e); }),
           MEDIAN_US(2000, { CK(cuMemcpyDtoHAsync(pinned, a, 8, s)); CK(cuEventRecord(e, s)); spin(e); }),
           MEDIAN_US(2000, CK(cuMemcpyHtoD(b, pageable, 8))),
           MEDIAN_US(2000, CK(cuMemcpyDtoH(pageable, a, 8))));
    /* Completion seen by polling host memory the GPU writes (no driver call in the loop). */
    struct flag fl = flag_new();
    double flagcopy = MEDIAN_US(2000, { CK(cuMemcpyDtoDAsync(b, a, 8, s)); flag_wait(&fl, s); });
    double flagkernel = MEDIAN_US(2000, { kcopy(b, a, 16, s, 1); flag_wait(&fl, s); });
    double flagonly = MEDIAN_US(2000, flag_wait(&fl, s));
    double ksync = MEDIAN_US(2000, { kcopy(b, a, 16, s, 1); CK(cuStreamSynchronize(s)); });
    printf("gpu%d 8-16 B with a host-polled stream write: DtoD copy %.2f us, copy kernel %.2f us, "
           "write alone %.2f us; copy kernel + stream sync %.2f us\n", dev, flagcopy, flagkernel,
           flagonly, ksync);
    printf("gpu%d event record+query of an idle stream %.2f us, stream query %.2f us\n", dev,
           MEDIAN_US(2000, { CK(cuEventRecord(e, s)); spin(e); }),
           MEDIAN_US(2000, CK(cuStreamQuery(s))));
    CUpointer_attribute at[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_BUFFER_ID};
    unsigned mt = 0, managed = 0; int ord = 0; unsigned long long bid = 0;
    void *vals[4] = {&mt, &managed, &ord, &bid};
    void *heap = malloc(4096);
    printf("gpu%d cuPointerGetAttributes (4 attrs): device %.3f us, host heap %.3f us, pinned %.3f us\n",
           dev, MEDIAN_US(5000, cuPointerGetAttributes(4, at, vals, a)),
           MEDIAN_US(5000, cuPointerGetAttributes(4, at, vals, (CUdeviceptr)(uintptr_t)heap)),
           MEDIAN_US(5000, cuPointerGetAttributes(4, at, vals, (CUdeviceptr)(uintptr_t)pinned)));
    CUresult r = cuPointerGetAttributes(4, at, vals, (CUdeviceptr)(uintptr_t)heap);
    printf("gpu%d host heap pointer: result %d type %u managed %u ordinal %d\n", dev, r, mt, managed, ord);
}

static double gbps(size_t bytes, double us) { return bytes / us / 1e3; }

static void bandwidth(int ndev)
{
    size_t n = 64 << 20;
    for (int dev = 0; dev < ndev; dev++) {
        CK(cuCtxSetCurrent(ctx_of(dev)));
        CUdeviceptr a, b;
        CK(cuMemAlloc(&a, n));
        CK(cuMemAlloc(&b, n));
        CK(cuMemsetD8(a, 1, n));
        void *pinned;
        CK(cuMemHostAlloc(&pinned, n, 0));
        CUstream s;
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CK(cuMemcpyDtoDAsync(b, a, n, s));
        CK(cuStreamSynchronize(s));
        double dd = MEDIAN_US(20, { CK(cuMemcpyDtoDAsync(b, a, n, s)); CK(cuStreamSynchronize(s)); });
        double hd = MEDIAN_US(10, { CK(cuMemcpyHtoDAsync(a, pinned, n, s)); CK(cuStreamSynchronize(s)); });
        double dh = MEDIAN_US(10, { CK(cuMemcpyDtoHAsync(pinned, a, n, s)); CK(cuStreamSynchronize(s)); });
        int sms = 0;
        CUdevice dv;
        CK(cuDeviceGet(&dv, dev));
        CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dv));
        double kc[3];
        int mult[3] = {1, 2, 4};
        for (int m = 0; m < 3; m++) {
            kcopy(b, a, n, s, sms * mult[m]);
            CK(cuStreamSynchronize(s));
            kc[m] = MEDIAN_US(20, { kcopy(b, a, n, s, sms * mult[m]); CK(cuStreamSynchronize(s)); });
        }
        printf("gpu%d 64 MiB: DtoD %.0f GB/s (bytes moved, one way), copy kernel %.0f / %.0f / %.0f GB/s "
               "(1/2/4 blocks per SM, %d SMs), HtoD pinned %.1f GB/s, DtoH pinned %.1f GB/s\n",
               dev, gbps(n, dd), gbps(n, kc[0]), gbps(n, kc[1]), gbps(n, kc[2]), sms, gbps(n, hd), gbps(n, dh));
    }
    for (int i = 0; i < ndev; i++)
        for (int j = 0; j < ndev; j++) {
            if (i == j) continue;
            CUdevice di, dj;
            CK(cuDeviceGet(&di, i));
            CK(cuDeviceGet(&dj, j));
            int can = 0, perf = 0, atomics = 0;
            CK(cuDeviceCanAccessPeer(&can, di, dj));
            cuDeviceGetP2PAttribute(&perf, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, di, dj);
            cuDeviceGetP2PAttribute(&atomics, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, di, dj);
            printf("gpu%d -> gpu%d: peer access %d, performance rank %d, native atomics %d\n", i, j,
                   can, perf, atomics);
            if (!can) continue;
            CK(cuCtxSetCurrent(ctx_of(j)));
            CUdeviceptr dst;
            CK(cuMemAlloc(&dst, n));
            CK(cuCtxSetCurrent(ctx_of(i)));
            CUresult r = cuCtxEnablePeerAccess(ctx_of(j), 0);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) CK(r);
            CUdeviceptr src;
            CK(cuMemAlloc(&src, n));
            CUstream s;
            CUevent e;
            CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
            CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
            CK(cuMemcpyDtoDAsync(dst, src, n, s));
            CK(cuStreamSynchronize(s));
            double t = MEDIAN_US(20, { CK(cuMemcpyDtoDAsync(dst, src, n, s)); CK(cuStreamSynchronize(s)); });
            double lat = MEDIAN_US(2000, { CK(cuMemcpyDtoDAsync(dst, src, 8, s)); CK(cuEventRecord(e, s)); spin(e); });
            printf("gpu%d -> gpu%d (peer, stream on gpu%d): 64 MiB %.0f GB/s, 8 B async+event %.2f us\n",
                   i, j, i, gbps(n, t), lat);
            /* Split over 4 streams. */
            CUstream ss[4];
            for (int k = 0; k < 4; k++) CK(cuStreamCreate(&ss[k], CU_STREAM_NON_BLOCKING));
            double t4 = MEDIAN_US(20, {
                for (int k = 0; k < 4; k++) CK(cuMemcpyDtoDAsync(dst + k * (n / 4), src + k * (n / 4), n / 4, ss[k]));
                for (int k = 0; k < 4; k++) CK(cuStreamSynchronize(ss[k]));
            });
            printf("gpu%d -> gpu%d 64 MiB over 4 streams: %.0f GB/s\n", i, j, gbps(n, t4));
            /* The same copy queued on a stream of the destination GPU (a pull by gpu j's
             * copy engines), whole and split over 4 streams. */
            CK(cuCtxSetCurrent(ctx_of(j)));
            r = cuCtxEnablePeerAccess(ctx_of(i), 0);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) CK(r);
            CUstream sj[4];
            for (int k = 0; k < 4; k++) CK(cuStreamCreate(&sj[k], CU_STREAM_NON_BLOCKING));
            CK(cuMemcpyDtoDAsync(dst, src, n, sj[0]));
            CK(cuStreamSynchronize(sj[0]));
            double tj = MEDIAN_US(20, { CK(cuMemcpyDtoDAsync(dst, src, n, sj[0])); CK(cuStreamSynchronize(sj[0])); });
            double tj4 = MEDIAN_US(20, {
                for (int k = 0; k < 4; k++) CK(cuMemcpyDtoDAsync(dst + k * (n / 4), src + k * (n / 4), n / 4, sj[k]));
                for (int k = 0; k < 4; k++) CK(cuStreamSynchronize(sj[k]));
            });
            printf("gpu%d -> gpu%d 64 MiB on gpu%d's streams (pull): one stream %.0f GB/s, 4 streams %.0f GB/s\n",
                   i, j, j, gbps(n, tj), gbps(n, tj4));
            int smj = 0;
            CK(cuDeviceGetAttribute(&smj, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dj));
            kcopy(dst, src, n, sj[0], smj * 2);
            CK(cuStreamSynchronize(sj[0]));
            double kj = MEDIAN_US(20, { kcopy(dst, src, n, sj[0], smj * 2); CK(cuStreamSynchronize(sj[0])); });
            printf("gpu%d -> gpu%d 64 MiB copy kernel on gpu%d (pull), 2 blocks/SM: %.0f GB/s\n", i, j, j, gbps(n, kj));
            CK(cuCtxSetCurrent(ctx_of(i)));
            int sms = 0;
            CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, di));
            for (int m = 1; m <= 4; m *= 2) {
                kcopy(dst, src, n, s, sms * m);
                CK(cuStreamSynchronize(s));
                double push = MEDIAN_US(20, { kcopy(dst, src, n, s, sms * m); CK(cuStreamSynchronize(s)); });
                double pull = MEDIAN_US(20, { kcopy(src, dst, n, s, sms * m); CK(cuStreamSynchronize(s)); });
                printf("gpu%d -> gpu%d 64 MiB copy kernel on gpu%d, %d blocks/SM: push %.0f GB/s, pull %.0f GB/s\n",
                       i, j, i, m, gbps(n, push), gbps(n, pull));
            }
        }
}

/* IPC: the parent exports a buffer on gpu0; a fresh process (CUDA does not survive fork)
 * opens it from each GPU and copies. */
static void ipc_child(const char *hex, int ndev)
{
    CUipcMemHandle h;
    for (int i = 0; i < (int)sizeof(h.reserved); i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    size_t n = 64 << 20;
    for (int dev = 0; dev < ndev; dev++) {
        CK(cuCtxSetCurrent(ctx_of(dev)));
        CUdeviceptr m;
        double t0 = now();
        CUresult r = cuIpcOpenMemHandle(&m, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        double open_us = (now() - t0) * 1e6;
        if (r != CUDA_SUCCESS) { printf("ipc open on gpu%d failed: %d\n", dev, r); continue; }
        CUdeviceptr mine;
        CK(cuMemAlloc(&mine, n));
        CUstream s;
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CK(cuMemcpyDtoDAsync(mine, m, n, s));
        CK(cuStreamSynchronize(s));
        double lat = MEDIAN_US(2000, CK(cuMemcpyDtoD(mine, m, 8)));
        /* The small read a rendezvous receiver makes, with four ways of knowing it is done:
         * stream synchronize, an event polled, a stream write into mapped host memory that
         * the host polls, and a one-block copy kernel followed by that stream write. */
        {
            CUstream q;
            CUevent ev;
            CK(cuStreamCreate(&q, CU_STREAM_NON_BLOCKING));
            CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
            struct flag fl = flag_new();
            for (int w = 0; w < 200; w++) { CK(cuMemcpyDtoDAsync(mine, m, 8, q)); CK(cuStreamSynchronize(q)); }
            double a_sync = MEDIAN_US(2000, { CK(cuMemcpyDtoDAsync(mine, m, 8, q)); CK(cuStreamSynchronize(q)); });
            double a_ev = MEDIAN_US(2000, { CK(cuMemcpyDtoDAsync(mine, m, 8, q)); CK(cuEventRecord(ev, q)); spin(ev); });
            double a_flag = MEDIAN_US(2000, { CK(cuMemcpyDtoDAsync(mine, m, 8, q)); flag_wait(&fl, q); });
            double k_flag = MEDIAN_US(2000, { kcopy(mine, m, 16, q, 1); flag_wait(&fl, q); });
            double k_sync = MEDIAN_US(2000, { kcopy(mine, m, 16, q, 1); CK(cuStreamSynchronize(q)); });
            double call = MEDIAN_US(2000, CK(cuMemcpyDtoDAsync(mine, m, 8, q)));
            CK(cuStreamSynchronize(q));
            double wcall = MEDIAN_US(2000, CK(cuStreamWriteValue32(q, fl.dev, 0, 0)));
            CK(cuStreamSynchronize(q));
            printf("ipc 8 B read on gpu%d (median us): async+sync %.2f, async+event %.2f, async+host-polled "
                   "stream write %.2f, copy kernel+stream write %.2f, copy kernel+sync %.2f; "
                   "the copy call alone %.2f, the stream write call alone %.2f\n",
                   dev, a_sync, a_ev, a_flag, k_flag, k_sync, call, wcall);
        }
        double bw = MEDIAN_US(20, { CK(cuMemcpyDtoDAsync(mine, m, n, s)); CK(cuStreamSynchronize(s)); });
        double wr = MEDIAN_US(20, { CK(cuMemcpyDtoDAsync(m, mine, n, s)); CK(cuStreamSynchronize(s)); });
        /* Back to back, as a transport queues a window of messages: 20 copies on one
         * stream, an event recorded after each, one wait at the end; then the same over
         * four streams taken in turn. */
        CUevent evs[20];
        for (int k = 0; k < 20; k++) CK(cuEventCreate(&evs[k], CU_EVENT_DISABLE_TIMING));
        CUstream s4[4];
        for (int k = 0; k < 4; k++) CK(cuStreamCreate(&s4[k], CU_STREAM_NON_BLOCKING));
        double b2b_read = MEDIAN_US(5, {
            for (int k = 0; k < 20; k++) { CK(cuMemcpyAsync(mine, m, n, s)); CK(cuEventRecord(evs[k], s)); }
            CK(cuStreamSynchronize(s));
        }) / 20;
        double b2b_write = MEDIAN_US(5, {
            for (int k = 0; k < 20; k++) { CK(cuMemcpyAsync(m, mine, n, s)); CK(cuEventRecord(evs[k], s)); }
            CK(cuStreamSynchronize(s));
        }) / 20;
        double b2b4 = MEDIAN_US(5, {
            for (int k = 0; k < 20; k++) { CK(cuMemcpyAsync(mine, m, n, s4[k % 4])); CK(cuEventRecord(evs[k], s4[k % 4])); }
            for (int k = 0; k < 4; k++) CK(cuStreamSynchronize(s4[k]));
        }) / 20;
        /* Polling the events as a progress loop does, instead of one wait. */
        double b2b_poll = MEDIAN_US(5, {
            for (int k = 0; k < 20; k++) { CK(cuMemcpyAsync(mine, m, n, s)); CK(cuEventRecord(evs[k], s)); }
            for (int k = 0; k < 20; k++) spin(evs[k]);
        }) / 20;
        printf("ipc from gpu0 buffer, opened on gpu%d: 20 x 64 MiB back to back: read %.0f GB/s, write %.0f GB/s, "
               "read over 4 streams %.0f GB/s, read with polled events %.0f GB/s\n",
               dev, gbps(n, b2b_read), gbps(n, b2b_write), gbps(n, b2b4), gbps(n, b2b_poll));
        unsigned char c = 0;
        CK(cuMemcpyDtoH(&c, m + n - 1, 1));
        CUpointer_attribute at = CU_POINTER_ATTRIBUTE_BUFFER_ID;
        unsigned long long bid = 0;
        void *val = &bid;
        CK(cuPointerGetAttributes(1, &at, &val, m));
        double close_t0 = now();
        CK(cuIpcCloseMemHandle(m));
        double close_us = (now() - close_t0) * 1e6;
        printf("ipc from gpu0 buffer, opened on gpu%d: open %.1f us, close %.1f us, 8 B sync read %.2f us, "
               "64 MiB read %.0f GB/s, write %.0f GB/s, last byte %u, buffer id here %llu\n",
               dev, open_us, close_us, lat, gbps(n, bw), gbps(n, wr), c, bid);
    }
}

static void ipc(const char *self, int ndev)
{
    CK(cuCtxSetCurrent(ctx_of(0)));
    size_t n = 64 << 20;
    CUdeviceptr buf;
    CK(cuMemAlloc(&buf, n));
    CK(cuMemsetD8(buf, 7, n));
    CK(cuCtxSynchronize());
    CUipcMemHandle h;
    double get = MEDIAN_US(100, CK(cuIpcGetMemHandle(&h, buf)));
    char hex[2 * sizeof(h.reserved) + 1];
    for (int i = 0; i < (int)sizeof(h.reserved); i++)
        sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
    printf("ipc: cuIpcGetMemHandle %.2f us\n", get);
    fflush(stdout);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --ipc-child %s", self, hex);
    int st = system(cmd);
    printf("ipc: child exit %d\n", st);
}

static void maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int k = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, "nvidia") && k++ < 12) printf("maps: %s", line);
    printf("maps: %d driver mappings\n", k);
    if (f) fclose(f);
}

int main(int argc, char **argv)
{
    CK(cuInit(0));
    int ndev;
    CK(cuDeviceGetCount(&ndev));
    if (argc == 3 && strcmp(argv[1], "--ipc-child") == 0) {
        ipc_child(argv[2], ndev);
        return 0;
    }
    for (int i = 0; i < ndev; i++) {
        CUdevice d;
        char name[128];
        size_t mem;
        CK(cuDeviceGet(&d, i));
        CK(cuDeviceGetName(name, sizeof(name), d));
        CK(cuDeviceTotalMem(&mem, d));
        printf("gpu%d: %s, %zu MiB\n", i, name, mem >> 20);
    }
    for (int i = 0; i < ndev; i++) small_copies(i);
    bandwidth(ndev);
    maps();
    ipc(argv[0], ndev);
    return 0;
}
