/* Rucx C ABI test: one-sided operations whose result depends on the order in which the
 * library performs them, on every kind of window osc/ucx makes.
 *
 * - swap: MPI_Fetch_and_op and MPI_Get_accumulate with MPI_REPLACE return the old value
 *   (osc/ucx: a get of the old value, then a put of the new one, then a flush);
 * - the raw pattern: put 1, flush; get r and put 0 to the same place; flush: r is 1;
 * - dynamic windows (MPI_Win_create_dynamic + MPI_Win_attach): put, accumulate,
 *   get_accumulate and fetch_and_op, each checked;
 * - fetch_and_op of 1-, 2-, 4- and 8-byte integers with MPI_SUM: right values (skipped
 *   with the argument `no-small-atomics`: UCX refuses 1- and 2-byte atomics, and osc/ucx
 *   then returns whatever its result buffer held).
 *
 * Runs on 1 or more ranks; every rank targets the next one (itself with one rank). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

enum { N = 64, ROUNDS = 50 };

/* Checks the swap patterns on `win`, whose element 0..N-1 at `target` are int64 at
 * displacements disp0 + i (in bytes when `bytes`, else in elements). */
static void swaps(MPI_Win win, int target, MPI_Aint disp0, int bytes, const char *what)
{
    MPI_Aint unit = bytes ? (MPI_Aint)sizeof(int64_t) : 1;
    for (int round = 0; round < ROUNDS; round++) {
        MPI_Aint d = disp0 + (MPI_Aint)(round % N) * unit;
        int64_t one = 1000 + round, zero = 0, r = -1, old = -1;
        /* The raw pattern of osc/ucx's REPLACE. */
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target, 0, win);
        MPI_Put(&one, 1, MPI_INT64_T, target, d, 1, MPI_INT64_T, win);
        MPI_Win_flush(target, win);
        MPI_Get(&r, 1, MPI_INT64_T, target, d, 1, MPI_INT64_T, win);
        MPI_Put(&zero, 1, MPI_INT64_T, target, d, 1, MPI_INT64_T, win);
        MPI_Win_flush(target, win);
        MPI_Win_unlock(target, win);
        if (r != one) FAIL("%s: get then put read %lld, want %lld", what, (long long)r, (long long)one);
        /* Fetch_and_op REPLACE: a swap. */
        int64_t nv = 5000 + round;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target, 0, win);
        MPI_Fetch_and_op(&nv, &old, MPI_INT64_T, target, d, MPI_REPLACE, win);
        MPI_Win_unlock(target, win);
        if (old != 0) FAIL("%s: fetch_and_op(REPLACE) returned %lld, want 0", what, (long long)old);
        /* Get_accumulate REPLACE of two elements. */
        int64_t two[2] = {7, 8}, back[2] = {-1, -1};
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target, 0, win);
        MPI_Get_accumulate(two, 2, MPI_INT64_T, back, 2, MPI_INT64_T, target, d, 2,
                           MPI_INT64_T, MPI_REPLACE, win);
        MPI_Win_unlock(target, win);
        if (back[0] != nv) FAIL("%s: get_accumulate(REPLACE) returned %lld, want %lld", what,
                                (long long)back[0], (long long)nv);
        /* And the values are there. */
        int64_t chk[2] = {-1, -1};
        MPI_Win_lock(MPI_LOCK_SHARED, target, 0, win);
        MPI_Get(chk, 2, MPI_INT64_T, target, d, 2, MPI_INT64_T, win);
        MPI_Win_unlock(target, win);
        if (chk[0] != 7 || chk[1] != 8) FAIL("%s: after get_accumulate the target holds %lld %lld",
                                              what, (long long)chk[0], (long long)chk[1]);
    }
}

/* Fetch_and_op MPI_SUM on integers of every size osc/ucx may hand to ucp atomics. */
/* `win` has a displacement unit of 1 byte over `tbase`; each rank is the target of one
 * origin, which adds 1 ten times at each size. */
static void sums(MPI_Win win, int target, char *tbase, const char *what)
{
    MPI_Datatype types[] = {MPI_INT8_T, MPI_INT16_T, MPI_INT32_T, MPI_INT64_T};
    int sizes[] = {1, 2, 4, 8};
    for (int k = 0; k < 4; k++) {
        MPI_Aint d = 16 * k;
        /* Zero the target word (8 bytes covers every size), then everyone adds. */
        MPI_Barrier(MPI_COMM_WORLD);
        memset(tbase + 16 * k, 0, 16);
        MPI_Barrier(MPI_COMM_WORLD);
        unsigned char one[8] = {0}, old[8];
        one[0] = 1; /* little endian: the value 1 at every size */
        for (int i = 0; i < 10; i++) {
            memset(old, 0xa5, sizeof(old));
            MPI_Win_lock(MPI_LOCK_SHARED, target, 0, win);
            MPI_Fetch_and_op(one, old, types[k], target, d, MPI_SUM, win);
            MPI_Win_unlock(target, win);
            for (int b = 1; b < sizes[k]; b++)
                if (old[b] != 0) FAIL("%s: %d-byte fetch_and_op returned byte %d = %u", what,
                                      sizes[k], b, old[b]);
            if (old[0] != i) FAIL("%s: %d-byte fetch_and_op returned %u, want %d", what, sizes[k], old[0], i);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if ((unsigned char)tbase[16 * k] != 10)
            FAIL("%s: %d-byte sums left %u, want 10", what, sizes[k], (unsigned char)tbase[16 * k]);
        for (int b = 1; b < 16; b++)
            if (tbase[16 * k + b] != 0) FAIL("%s: %d-byte sums wrote byte %d", what, sizes[k], b);
    }
}

int main(int argc, char **argv)
{
    int n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int target = (rank + 1) % n;

    /* MPI_Win_create over user memory. */
    int64_t *mem = calloc(N + 2, sizeof(int64_t));
    MPI_Win win;
    MPI_Win_create(mem, (N + 2) * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    swaps(win, target, 0, 0, "Win_create");
    MPI_Win_free(&win);

    /* MPI_Win_allocate. */
    int64_t *abase;
    MPI_Win_allocate((N + 2) * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &abase, &win);
    memset(abase, 0, (N + 2) * sizeof(int64_t));
    MPI_Barrier(MPI_COMM_WORLD);
    swaps(win, target, 0, 0, "Win_allocate");
    MPI_Win_free(&win);

    /* Dynamic windows: each rank attaches a region and publishes its address. */
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    int64_t *dyn = calloc(N + 2, sizeof(int64_t));
    MPI_Win_attach(win, dyn, (N + 2) * sizeof(int64_t));
    MPI_Aint mine, theirs;
    MPI_Get_address(dyn, &mine);
    MPI_Sendrecv(&mine, 1, MPI_AINT, (rank + n - 1) % n, 0, &theirs, 1, MPI_AINT, target, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    /* A put and an accumulate first. */
    int64_t v = 42 + rank, add = 3;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target, 0, win);
    MPI_Put(&v, 1, MPI_INT64_T, target, theirs + 8 * N, 1, MPI_INT64_T, win);
    MPI_Win_flush(target, win);
    MPI_Accumulate(&add, 1, MPI_INT64_T, target, theirs + 8 * N, 1, MPI_INT64_T, MPI_SUM, win);
    MPI_Win_unlock(target, win);
    MPI_Barrier(MPI_COMM_WORLD);
    int src = (rank + n - 1) % n;
    if (dyn[N] != 42 + src + 3) FAIL("dynamic: put + accumulate left %lld, want %d", (long long)dyn[N], 42 + src + 3);
    MPI_Barrier(MPI_COMM_WORLD);
    swaps(win, target, theirs, 1, "dynamic");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_detach(win, dyn);
    MPI_Win_free(&win);

    /* Atomics of every integer size, over user memory. */
    char *small = calloc(64, 1);
    if (argc < 2 || strcmp(argv[1], "no-small-atomics") != 0) {
        MPI_Win_create(small, 64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        sums(win, target, small, "Win_create sums");
        MPI_Win_free(&win);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("rma_order: OK\n");
    free(mem);
    free(dyn);
    free(small);
    MPI_Finalize();
    return 0;
}
