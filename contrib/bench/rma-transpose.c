/*
 * The one-sided pattern of MPICH's rma/transpose tests: a matrix moved by one MPI_Put (or
 * MPI_Get) whose target datatype is a column-major view of it (a vector of vectors of one
 * int). OpenMPI's osc/ucx breaks such an operation into one 4-byte ucp_put_nbi (get_nbi)
 * per element, so the time is that of N x N small one-sided operations and a flush.
 * Prints one line per operation: "case rma-transpose-put <us per element>".
 *
 *   mpirun -np 2 --mca osc ucx ./rma-transpose [N]     (N: matrix side, default 250)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, n = argc > 1 ? atoi(argv[1]) : 250;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int *a = malloc(sizeof(int) * (size_t)n * (size_t)n);
    MPI_Datatype column, xpose;
    MPI_Type_vector(n, 1, n, MPI_INT, &column);
    MPI_Type_create_hvector(n, 1, sizeof(int), column, &xpose);
    MPI_Type_commit(&xpose);
    MPI_Win win;
    MPI_Win_create(a, sizeof(int) * (size_t)n * (size_t)n, sizeof(int), MPI_INFO_NULL,
                   MPI_COMM_WORLD, &win);
    for (int op = 0; op < 2; op++) {
        for (int i = 0; i < n * n; i++) a[i] = rank == 0 ? i : -1;
        MPI_Win_fence(0, win);
        double t0 = MPI_Wtime();
        if (rank == 0) {
            if (op == 0)
                MPI_Put(a, n * n, MPI_INT, 1, 0, 1, xpose, win);
            else
                MPI_Get(a, n * n, MPI_INT, 1, 0, 1, xpose, win);
        }
        MPI_Win_fence(0, win);
        double us = (MPI_Wtime() - t0) * 1e6 / ((double)n * n);
        /* Put: rank 1 holds the transpose of rank 0's matrix. Get: rank 0 reads back
         * rank 1's (the transpose), transposed again: its own original order. */
        int errs = 0;
        if (op == 0 && rank == 1) {
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    if (a[j * n + i] != i * n + j) errs++;
        }
        if (op == 1 && rank == 0) {
            for (int i = 0; i < n * n; i++)
                if (a[i] != -1) errs++;
        }
        int all = 0;
        MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (all != 0) {
            if (rank == 0) fprintf(stderr, "rma-transpose: %d wrong elements\n", all);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (rank == 0)
            printf("case rma-transpose-%s %10.3f us  (%d elements)\n", op == 0 ? "put" : "get",
                   us, n * n);
    }
    MPI_Win_free(&win);
    MPI_Type_free(&column);
    MPI_Type_free(&xpose);
    free(a);
    MPI_Finalize();
    return 0;
}
