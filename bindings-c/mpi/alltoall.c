/* Rucx C ABI test: 4 ranks, every pair exchanging (MPI_Alltoall, MPI_Alltoallv, and a
 * hand-written all-to-all of non-blocking point-to-point messages, eager and rendezvous). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

static int v(int from, int to, long i) { return from * 1000003 + to * 10007 + (int)(i % 100000); }

int main(int argc, char **argv)
{
    int n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 4) { if (!rank) fprintf(stderr, "needs 4 ranks\n"); MPI_Abort(MPI_COMM_WORLD, 2); }

    long lens[3] = {16, 4096, 400000}; /* ints per peer: eager, medium, rendezvous */
    for (int c = 0; c < 3; c++) {
        long len = lens[c];
        int *s = malloc(sizeof(int) * len * n), *r = malloc(sizeof(int) * len * n);
        for (int p = 0; p < n; p++) for (long i = 0; i < len; i++) s[p * len + i] = v(rank, p, i + c);
        memset(r, 0xff, sizeof(int) * len * n);
        MPI_Alltoall(s, (int)len, MPI_INT, r, (int)len, MPI_INT, MPI_COMM_WORLD);
        for (int p = 0; p < n; p++) for (long i = 0; i < len; i++)
            if (r[p * len + i] != v(p, rank, i + c)) FAIL("alltoall %ld: from %d [%ld] = %d", len, p, i, r[p * len + i]);

        /* the same by hand: Irecv from everyone, Isend to everyone, Waitall */
        MPI_Request rq[8];
        memset(r, 0xff, sizeof(int) * len * n);
        for (int p = 0; p < n; p++) MPI_Irecv(r + p * len, (int)len, MPI_INT, p, 77 + c, MPI_COMM_WORLD, &rq[p]);
        for (int k = 0; k < n; k++) {
            int p = (rank + k) % n;
            MPI_Isend(s + p * len, (int)len, MPI_INT, p, 77 + c, MPI_COMM_WORLD, &rq[n + p]);
        }
        MPI_Waitall(2 * n, rq, MPI_STATUSES_IGNORE);
        for (int p = 0; p < n; p++) for (long i = 0; i < len; i++)
            if (r[p * len + i] != v(p, rank, i + c)) FAIL("isend a2a %ld: from %d [%ld] = %d", len, p, i, r[p * len + i]);
        free(s);
        free(r);
    }
    /* alltoallv: rank p sends (p + q + 1) * 1000 ints to q */
    {
        int sc[4], sd[4], rc[4], rd[4], st = 0, rt = 0;
        for (int q = 0; q < n; q++) {
            sc[q] = (rank + q + 1) * 1000; sd[q] = st; st += sc[q];
            rc[q] = (q + rank + 1) * 1000; rd[q] = rt; rt += rc[q];
        }
        int *s = malloc(sizeof(int) * st), *r = malloc(sizeof(int) * rt);
        for (int q = 0; q < n; q++) for (int i = 0; i < sc[q]; i++) s[sd[q] + i] = v(rank, q, i);
        MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, MPI_COMM_WORLD);
        for (int q = 0; q < n; q++) for (int i = 0; i < rc[q]; i++)
            if (r[rd[q] + i] != v(q, rank, i)) FAIL("alltoallv from %d [%d] = %d", q, i, r[rd[q] + i]);
        free(s);
        free(r);
    }
    /* and a reduction over everyone */
    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != 10) FAIL("allreduce %ld", sum);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("alltoall: OK (4 ranks, alltoall/alltoallv/isend-irecv, 64 B..1.6 MB per pair)\n");
    MPI_Finalize();
    return 0;
}
