// An all-to-all of GPU buffers through MPI point-to-point (every pair exchanges a block
// of SIZE bytes with Isend/Irecv from and into device memory), one process per GPU, every
// byte checked. MPI does not need to know GPUs: the UCX library under `pml ucx` (Rucx's,
// or UCX built with CUDA) detects device memory itself.
//
//   nvcc -O2 -o alltoall contrib/gpu/alltoall.cu -I$MPI_INC -L$MPI_LIB -lmpi
//   mpirun -np 8 --mca pml ucx ... ./alltoall [MAXSIZE]
//
// Prints, from rank 0, one line per size:
//   alltoall SIZE us_per_iteration aggregate_GB/s
// where the aggregate is the bytes all processes received per second (np x (np-1) x SIZE
// per iteration).
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                               \
        }                                                                               \
    } while (0)

// The byte at offset i of the block that `src` sends to `dst` in round `it`.
__device__ __host__ static inline uint8_t pat(int src, int dst, int it, size_t i)
{
    return (uint8_t)(src * 131 + dst * 17 + it * 7 + i * 2654435761u);
}

__global__ void fill(uint8_t *buf, size_t size, int np, int me, int it)
{
    size_t n = size * (size_t)np;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        int dst = (int)(k / size);
        buf[k] = pat(me, dst, it, k % size);
    }
}

__global__ void check(const uint8_t *buf, size_t size, int np, int me, int it,
                      unsigned long long *bad)
{
    size_t n = size * (size_t)np;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        int src = (int)(k / size);
        if (src != me && buf[k] != pat(src, me, it, k % size)) atomicAdd(bad, 1ull);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int ngpu = 0;
    CHECK(cudaGetDeviceCount(&ngpu));
    CHECK(cudaSetDevice(me % ngpu));
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (64u << 20);
    uint8_t *sbuf, *rbuf;
    CHECK(cudaMalloc(&sbuf, max * np));
    CHECK(cudaMalloc(&rbuf, max * np));
    unsigned long long *bad;
    CHECK(cudaMalloc(&bad, sizeof(*bad)));
    MPI_Request *rq = (MPI_Request *)malloc(sizeof(MPI_Request) * 2 * np);
    for (size_t size = 8; size <= max; size *= 2) {
        int iters = size <= (64u << 10) ? 100 : size <= (4u << 20) ? 20 : 5;
        double t = 0;
        for (int it = -2; it < iters; it++) {
            fill<<<256, 256>>>(sbuf, size, np, me, it);
            CHECK(cudaMemset(rbuf, 0, size * np));
            CHECK(cudaMemset(bad, 0, sizeof(*bad)));
            CHECK(cudaDeviceSynchronize());
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            int n = 0;
            for (int k = 1; k < np; k++) {
                int from = (me - k + np) % np;
                MPI_Irecv(rbuf + from * size, (int)size, MPI_BYTE, from, it & 0x7fff,
                          MPI_COMM_WORLD, &rq[n++]);
            }
            for (int k = 1; k < np; k++) {
                int to = (me + k) % np;
                MPI_Isend(sbuf + to * size, (int)size, MPI_BYTE, to, it & 0x7fff,
                          MPI_COMM_WORLD, &rq[n++]);
            }
            MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
            MPI_Barrier(MPI_COMM_WORLD);
            if (it >= 0) t += MPI_Wtime() - t0;
            check<<<256, 256>>>(rbuf, size, np, me, it, bad);
            unsigned long long b = 0;
            CHECK(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
            if (b != 0) {
                fprintf(stderr, "rank %d: %llu wrong bytes at size %zu, round %d\n", me, b,
                        size, it);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        if (me == 0) {
            double us = t / iters * 1e6;
            double gbs = (double)np * (np - 1) * size / (t / iters) / 1e9;
            printf("alltoall %zu %.2f %.2f\n", size, us, gbs);
            fflush(stdout);
        }
    }
    if (me == 0) printf("alltoall: OK (%d processes, %d GPUs)\n", np, ngpu);
    MPI_Finalize();
    return 0;
}
