/* Rucx C ABI test: blocking, non-blocking and synchronous sends, 0 B .. 64 MiB. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
}

static void check(const unsigned char *b, size_t n, unsigned seed, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char want = (unsigned char)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
        if (b[i] != want) {
            fprintf(stderr, "rank %d: %s size %zu: byte %zu is %u, want %u\n", rank, what, n,
                    i, b[i], want);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int peer = 1 - rank;
    const size_t max = 64u << 20;
    unsigned char *sbuf = malloc(max), *rbuf = malloc(max);
    size_t sizes[64];
    int ns = 0;
    sizes[ns++] = 0;
    for (size_t s = 1; s <= max; s *= 4) sizes[ns++] = s;
    sizes[ns++] = 1000;         /* odd sizes */
    sizes[ns++] = 65537;
    sizes[ns++] = 3u << 20;
    sizes[ns++] = max;
    for (int k = 0; k < ns; k++) {
        size_t n = sizes[k];
        for (int mode = 0; mode < 3; mode++) {
            unsigned seed = (unsigned)(k * 3 + mode);
            memset(rbuf, 0xee, n);
            if (rank == 0) {
                fill(sbuf, n, seed);
                if (mode == 0) {
                    MPI_Send(sbuf, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD);
                } else if (mode == 1) {
                    MPI_Request r;
                    MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &r);
                    MPI_Wait(&r, MPI_STATUS_IGNORE);
                } else {
                    MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD);
                }
                MPI_Status st;
                MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, k + 1000, MPI_COMM_WORLD, &st);
                int cnt;
                MPI_Get_count(&st, MPI_BYTE, &cnt);
                if ((size_t)cnt != n) { fprintf(stderr, "count %d != %zu\n", cnt, n); MPI_Abort(MPI_COMM_WORLD, 1); }
                check(rbuf, n, seed + 100, "echo");
            } else {
                MPI_Status st;
                if (mode == 1) {
                    MPI_Request r;
                    MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &r);
                    MPI_Wait(&r, &st);
                } else {
                    MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &st);
                }
                int cnt;
                MPI_Get_count(&st, MPI_BYTE, &cnt);
                if ((size_t)cnt != n) { fprintf(stderr, "count %d != %zu\n", cnt, n); MPI_Abort(MPI_COMM_WORLD, 1); }
                check(rbuf, n, seed, "send");
                fill(sbuf, n, seed + 100);
                if (mode == 2) MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, k + 1000, MPI_COMM_WORLD);
                else MPI_Send(sbuf, (int)n, MPI_BYTE, peer, k + 1000, MPI_COMM_WORLD);
            }
        }
    }
    /* many outstanding non-blocking messages, both directions at once */
    enum { N = 64, SZ = 4096 };
    MPI_Request rq[2 * N];
    for (int i = 0; i < N; i++) {
        fill(sbuf + (size_t)i * SZ, SZ, 500 + i + rank);
        MPI_Irecv(rbuf + (size_t)i * SZ, SZ, MPI_BYTE, peer, 7000 + i, MPI_COMM_WORLD, &rq[i]);
    }
    for (int i = 0; i < N; i++)
        MPI_Isend(sbuf + (size_t)i * SZ, SZ, MPI_BYTE, peer, 7000 + i, MPI_COMM_WORLD, &rq[N + i]);
    MPI_Waitall(2 * N, rq, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; i++) check(rbuf + (size_t)i * SZ, SZ, 500 + i + peer, "isend-many");
    MPI_Barrier(MPI_COMM_WORLD);
    free(sbuf);
    free(rbuf);
    if (rank == 0) printf("p2p: OK (%d sizes 0..%zu B, 3 modes)\n", ns, max);
    MPI_Finalize();
    return 0;
}
