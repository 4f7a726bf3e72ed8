/*
 * How long one copy out of another process's GPU allocation (a cuda_ipc read) takes to
 * queue and to be known done, by driver call: cuMemcpyAsync, cuMemcpyDtoDAsync and
 * cuMemcpyPeerAsync, waited for by stream synchronize, a stream query spin, an event query
 * spin or an event synchronize, on a non-blocking stream and one of default flags. A forked
 * child allocates on GPU PEER and exports an IPC handle; the parent opens it on GPU MINE.
 * FLAGS is given to cuDevicePrimaryCtxSetFlags (0: the default; 1: CU_CTX_SCHED_SPIN);
 * GAP is how long the host spins between copies, in microseconds (0: back to back; the
 * copies of a ping-pong come 10-20 us apart). Build and run on the GPU machine:
 *
 *   nvcc -O2 -o copy-api contrib/gpu/copy-api.cu -lcuda && ./copy-api MINE PEER [FLAGS [BYTES [GAP]]]
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <algorithm>
#include <vector>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; \
    cuGetErrorString(r_, &s_); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
    exit(1); } } while (0)
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
int main(int argc, char **argv)
{
    int mydev = atoi(argv[1]), peerdev = atoi(argv[2]);
    unsigned flags = argc > 3 ? atoi(argv[3]) : 0;
    size_t sz = argc > 4 ? atol(argv[4]) : 8;
    double gap = argc > 5 ? atof(argv[5]) : 0;
    int p2c[2], c2p[2]; if (pipe(p2c) || pipe(c2p)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, peerdev)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
        CUdeviceptr b; CK(cuMemAlloc(&b, 1 << 20)); CK(cuMemsetD8(b, 5, 1 << 20)); CK(cuCtxSynchronize());
        CUipcMemHandle h; CK(cuIpcGetMemHandle(&h, b));
        if (write(c2p[1], &h, sizeof h) != sizeof h) return 1;
        char x; if (read(p2c[0], &x, 1) != 1) return 1;
        return 0;
    }
    CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, mydev));
    if (flags) CK(cuDevicePrimaryCtxSetFlags(d, flags));
    CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
    CUipcMemHandle h; if (read(c2p[0], &h, sizeof h) != sizeof h) return 1;
    CUdeviceptr src; CK(cuIpcOpenMemHandle(&src, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CUdeviceptr dst; CK(cuMemAlloc(&dst, 1 << 20));
    CUstream snb, sdef; CK(cuStreamCreate(&snb, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&sdef, CU_STREAM_DEFAULT));
    CUevent ev; CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    const int N = 5000;
    printf("mine GPU %d, peer's allocation on GPU %d, ctx flags %u, %zu B, %.1f us apart: median enqueue / total us (p90 total)\n", mydev, peerdev, flags, sz, gap);
    for (int v = 0; v < 7; v++) {
        std::vector<double> e, t;
        CUstream s = v == 6 ? sdef : snb;
        for (int i = 0; i < N + 200; i++) {
            double a = now();
            switch (v) {
            case 0: case 6: CK(cuMemcpyAsync(dst, src, sz, s)); break;
            case 1: case 2: case 3: case 5: CK(cuMemcpyDtoDAsync(dst, src, sz, s)); break;
            case 4: CK(cuMemcpyPeerAsync(dst, c, src, c, sz, s)); break;
            }
            double b = now();
            switch (v) {
            case 2: while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {} break;
            case 3: CK(cuEventRecord(ev, s)); while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {} break;
            case 5: CK(cuEventRecord(ev, s)); CK(cuEventSynchronize(ev)); break;
            default: CK(cuStreamSynchronize(s));
            }
            double z = now();
            if (i >= 200) { e.push_back(b - a); t.push_back(z - a); }
            while (now() - z < gap) { }
        }
        std::sort(e.begin(), e.end()); std::sort(t.begin(), t.end());
        const char *names[] = {"MemcpyAsync+StreamSync", "DtoDAsync+StreamSync", "DtoDAsync+StreamQuery spin", "DtoDAsync+EventQuery spin", "PeerAsync+StreamSync", "DtoDAsync+EventSync", "MemcpyAsync default-stream-flags+StreamSync"};
        printf("  %-44s %6.2f / %6.2f (%6.2f)\n", names[v], e[N / 2], t[N / 2], t[N * 9 / 10]);
    }
    char buf[8]; CK(cuMemcpyDtoH(buf, dst, 8)); printf("  data %s\n", buf[0] == 5 ? "ok" : "BAD");
    CK(cuIpcCloseMemHandle(src));
    if (write(p2c[1], "x", 1) != 1) return 1;
    waitpid(pid, nullptr, 0);
    return 0;
}
