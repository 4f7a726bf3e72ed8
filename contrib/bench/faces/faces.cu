// Kernels of the Faces benchmark (contrib/bench/faces.sh, tests/src/bin/rucx-faces.rs):
// pack a box of the local n*n*n block into a contiguous buffer, add a received buffer
// into a box, and the interior work. Values are 32-bit unsigned integers, so every
// variant's result equals the CPU reference bit for bit whatever the order of additions.
// Compiled to PTX on the GPU machine: nvcc -ptx -arch=sm_80 faces.cu -o faces.ptx

extern "C" __global__ void faces_pack(const unsigned *u, unsigned *buf, int n, int x0, int y0,
                                      int z0, int ex, int ey, int ez)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ex * ey * ez) return;
    int x = x0 + i % ex, y = y0 + (i / ex) % ey, z = z0 + i / (ex * ey);
    buf[i] = u[((size_t)z * n + y) * n + x];
}

extern "C" __global__ void faces_unpack(unsigned *u, const unsigned *buf, int n, int x0,
                                        int y0, int z0, int ex, int ey, int ez)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ex * ey * ez) return;
    int x = x0 + i % ex, y = y0 + (i / ex) % ey, z = z0 + i / (ex * ey);
    u[((size_t)z * n + y) * n + x] += buf[i];
}

// The "interior sum": `work` rounds of a linear congruential step on every point.
extern "C" __global__ void faces_interior(unsigned *u, int total, int work)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    unsigned v = u[i];
    for (int k = 0; k < work; k++) v = v * 1664525u + 1013904223u;
    u[i] = v;
}
