/* Rucx C ABI test: derived datatypes (OpenMPI hands them to ucp as generic datatypes). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

static double val(long i) { return (double)i * 1.5 + 3.0; }

/* rank 0 sends `type` x count from an array holding val(i) at index i; rank 1 receives it as
 * contiguous doubles and checks them against `idx` (the element indices the type selects),
 * then receives the same message again into `type` and checks that selected elements got
 * their values and the others stayed untouched. */
static void run(const char *name, MPI_Datatype type, int count, long span, const long *idx, long nsel)
{
    double *a = malloc(sizeof(double) * span), *c = malloc(sizeof(double) * nsel);
    if (rank == 0) {
        for (long i = 0; i < span; i++) a[i] = val(i);
        MPI_Send(a, count, type, 1, 1, MPI_COMM_WORLD);
        MPI_Send(a, count, type, 1, 2, MPI_COMM_WORLD);
        /* and contiguous into the type */
        for (long k = 0; k < nsel; k++) c[k] = val(idx[k]) + 0.25;
        MPI_Send(c, (int)nsel, MPI_DOUBLE, 1, 3, MPI_COMM_WORLD);
    } else {
        MPI_Status st;
        int cnt;
        MPI_Recv(c, (int)nsel, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &cnt);
        if (cnt != nsel) FAIL("%s: got %d doubles, want %ld", name, cnt, nsel);
        for (long k = 0; k < nsel; k++)
            if (c[k] != val(idx[k])) FAIL("%s type->contig: [%ld] = %g, want %g", name, k, c[k], val(idx[k]));
        for (int pass = 0; pass < 2; pass++) {
            for (long i = 0; i < span; i++) a[i] = -1.0;
            MPI_Recv(a, count, type, 0, 2 + pass, MPI_COMM_WORLD, &st);
            char *sel = calloc(span, 1);
            for (long k = 0; k < nsel; k++) {
                sel[idx[k]] = 1;
                double want = val(idx[k]) + (pass ? 0.25 : 0.0);
                if (a[idx[k]] != want) FAIL("%s pass %d: a[%ld] = %g, want %g", name, pass, idx[k], a[idx[k]], want);
            }
            for (long i = 0; i < span; i++)
                if (!sel[i] && a[i] != -1.0) FAIL("%s pass %d: gap a[%ld] written (%g)", name, pass, i, a[i]);
            free(sel);
        }
    }
    free(a);
    free(c);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) MPI_Abort(MPI_COMM_WORLD, 2);

    /* vector: small (eager) and large (rendezvous) */
    int vcase[2][3] = {{8, 3, 5}, {4096, 64, 100}}; /* count, blocklen, stride */
    for (int v = 0; v < 2; v++) {
        int n = vcase[v][0], bl = vcase[v][1], str = vcase[v][2];
        MPI_Datatype t;
        MPI_Type_vector(n, bl, str, MPI_DOUBLE, &t);
        MPI_Type_commit(&t);
        long nsel = (long)n * bl, span = (long)(n - 1) * str + bl;
        long *idx = malloc(sizeof(long) * nsel), k = 0;
        for (int i = 0; i < n; i++) for (int j = 0; j < bl; j++) idx[k++] = (long)i * str + j;
        run(v ? "vector-large" : "vector-small", t, 1, span, idx, nsel);
        free(idx);
        MPI_Type_free(&t);
    }
    /* vector, count 3 of the type (extent = span) */
    {
        MPI_Datatype t;
        MPI_Type_vector(10, 2, 4, MPI_DOUBLE, &t); /* extent 38 doubles */
        MPI_Type_commit(&t);
        long ext = 9 * 4 + 2, nsel = 3 * 20, k = 0, *idx = malloc(sizeof(long) * nsel);
        for (int c = 0; c < 3; c++) for (int i = 0; i < 10; i++) for (int j = 0; j < 2; j++) idx[k++] = c * ext + i * 4 + j;
        run("vector-x3", t, 3, 3 * ext, idx, nsel);
        free(idx);
        MPI_Type_free(&t);
    }
    /* indexed: uneven blocks, not in address order */
    {
        int bl[4] = {3, 1, 7, 2}, disp[4] = {20, 0, 5, 40};
        MPI_Datatype t;
        MPI_Type_indexed(4, bl, disp, MPI_DOUBLE, &t);
        MPI_Type_commit(&t);
        long nsel = 13, k = 0, idx[13];
        for (int b = 0; b < 4; b++) for (int j = 0; j < bl[b]; j++) idx[k++] = disp[b] + j;
        run("indexed", t, 1, 42, idx, nsel);
        MPI_Type_free(&t);
    }
    /* indexed, large: 20000 blocks of 10 every 16 */
    {
        enum { NB = 20000 };
        int *bl = malloc(sizeof(int) * NB), *disp = malloc(sizeof(int) * NB);
        for (int b = 0; b < NB; b++) { bl[b] = 10; disp[b] = b * 16 + (b % 3); }
        MPI_Datatype t;
        MPI_Type_indexed(NB, bl, disp, MPI_DOUBLE, &t);
        MPI_Type_commit(&t);
        long nsel = (long)NB * 10, k = 0, *idx = malloc(sizeof(long) * nsel);
        for (int b = 0; b < NB; b++) for (int j = 0; j < 10; j++) idx[k++] = disp[b] + j;
        run("indexed-large", t, 1, (long)(NB - 1) * 16 + 2 + 10, idx, nsel);
        free(idx); free(bl); free(disp);
        MPI_Type_free(&t);
    }
    /* subarray: 3-d, C and Fortran order */
    for (int order = 0; order < 2; order++) {
        int sizes[3] = {20, 30, 40}, sub[3] = {5, 10, 7}, start[3] = {2, 11, 30};
        MPI_Datatype t;
        MPI_Type_create_subarray(3, sizes, sub, start, order ? MPI_ORDER_FORTRAN : MPI_ORDER_C, MPI_DOUBLE, &t);
        MPI_Type_commit(&t);
        long nsel = 5 * 10 * 7, k = 0, *idx = malloc(sizeof(long) * nsel);
        /* message order: last dimension fastest for C, first for Fortran */
        if (!order) {
            for (int i = 0; i < 5; i++) for (int j = 0; j < 10; j++) for (int l = 0; l < 7; l++)
                idx[k++] = ((long)(start[0] + i) * 30 + start[1] + j) * 40 + start[2] + l;
        } else {
            for (int l = 0; l < 7; l++) for (int j = 0; j < 10; j++) for (int i = 0; i < 5; i++)
                idx[k++] = ((long)(start[2] + l) * 30 + start[1] + j) * 20 + start[0] + i;
        }
        run(order ? "subarray-fortran" : "subarray-c", t, 1, 20 * 30 * 40, idx, nsel);
        free(idx);
        MPI_Type_free(&t);
    }
    /* big subarray (rendezvous): 512x512 doubles, inner 300x200 */
    {
        int sizes[2] = {512, 512}, sub[2] = {300, 200}, start[2] = {100, 211};
        MPI_Datatype t;
        MPI_Type_create_subarray(2, sizes, sub, start, MPI_ORDER_C, MPI_DOUBLE, &t);
        MPI_Type_commit(&t);
        long nsel = 300 * 200, k = 0, *idx = malloc(sizeof(long) * nsel);
        for (int i = 0; i < 300; i++) for (int j = 0; j < 200; j++) idx[k++] = (long)(start[0] + i) * 512 + start[1] + j;
        run("subarray-large", t, 1, 512 * 512, idx, nsel);
        free(idx);
        MPI_Type_free(&t);
    }
    if (rank == 0) printf("dtypes: OK (vector, indexed, subarray C/Fortran, eager and rendezvous)\n");
    MPI_Finalize();
    return 0;
}
