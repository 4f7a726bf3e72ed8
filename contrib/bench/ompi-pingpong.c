/*
 * OpenMPI ping-pong between two ranks: one-way latency (half the round trip, µs) of
 * contiguous messages (8 B, 128 KiB, 2 MiB) and vector datatypes (128 blocks of 1 KiB and
 * 16384 blocks of 128 B, each block every other block-size). Data is checked once per case.
 * Run by contrib/bench/ompi-pingpong.sh over UCX's libucp and over Rucx's.
 *
 *   mpirun -np 2 --mca pml ucx ./ompi-pingpong [SCALE]   (SCALE multiplies iterations)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

static double pingpong(const char *name, void *buf, int count, MPI_Datatype t, int iters)
{
    int peer = 1 - rank, warm = iters / 10 + 1;
    double t0 = 0;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        if (rank == 0) {
            MPI_Send(buf, count, t, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, count, t, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, count, t, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, count, t, peer, 1, MPI_COMM_WORLD);
        }
    }
    double us = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
    if (rank == 0) printf("case %-22s %10.2f us  (%d iterations)\n", name, us, iters);
    return us;
}

/* One exchange with distinct data, checked on both sides. */
static void verify(const char *name, unsigned char *buf, size_t span, int count, MPI_Datatype t,
                   size_t bl, size_t stride)
{
    unsigned char *ref = malloc(span);
    for (size_t i = 0; i < span; i++) ref[i] = (unsigned char)(i * 7 + 3);
    if (rank == 0) {
        memcpy(buf, ref, span);
        MPI_Send(buf, count, t, 1, 2, MPI_COMM_WORLD);
    } else {
        memset(buf, 0, span);
        MPI_Recv(buf, count, t, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < span; i++) {
            int in = stride == 0 || (i % stride) < bl;
            if (buf[i] != (in ? ref[i] : 0)) {
                fprintf(stderr, "%s: byte %zu wrong\n", name, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    free(ref);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    unsigned char *buf = malloc(4u << 20);
    struct { const char *name; size_t n; int iters; } contig[] = {
        {"contig-8B", 8, 20000}, {"contig-128KiB", 128u << 10, 2000}, {"contig-2MiB", 2u << 20, 300},
    };
    for (int k = 0; k < 3; k++) {
        verify(contig[k].name, buf, contig[k].n, (int)contig[k].n, MPI_BYTE, 0, 0);
        pingpong(contig[k].name, buf, (int)contig[k].n, MPI_BYTE, (int)(contig[k].iters * scale) + 1);
    }
    struct { const char *name; int blocks, bl, iters; } vec[] = {
        {"vector-128x1KiB", 128, 1024, 2000}, {"vector-16384x128B", 16384, 128, 300},
    };
    for (int k = 0; k < 2; k++) {
        MPI_Datatype t;
        MPI_Type_vector(vec[k].blocks, vec[k].bl, 2 * vec[k].bl, MPI_BYTE, &t);
        MPI_Type_commit(&t);
        size_t span = (size_t)(vec[k].blocks - 1) * 2 * vec[k].bl + vec[k].bl;
        verify(vec[k].name, buf, span, 1, t, vec[k].bl, 2 * vec[k].bl);
        pingpong(vec[k].name, buf, 1, t, (int)(vec[k].iters * scale) + 1);
        MPI_Type_free(&t);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
