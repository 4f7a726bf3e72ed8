/* Rucx C ABI test: one-sided communication through osc/ucx (ucp put/get/atomics). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

enum { WN = 1 << 18 }; /* 2 MiB window of int64 */

static int64_t pat(int r, long i) { return (int64_t)r * 1000000007LL + i * 3; }

int main(int argc, char **argv)
{
    int n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) MPI_Abort(MPI_COMM_WORLD, 2);
    int peer = 1 - rank;
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate(sizeof(int64_t) * WN, sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (long i = 0; i < WN; i++) base[i] = pat(rank, i);
    int64_t *loc = malloc(sizeof(int64_t) * WN);

    /* Get: fence epoch, small and whole window */
    MPI_Win_fence(0, win);
    int64_t one = 0;
    MPI_Get(&one, 1, MPI_INT64_T, peer, 5, 1, MPI_INT64_T, win);
    MPI_Get(loc, WN, MPI_INT64_T, peer, 0, WN, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    if (one != pat(peer, 5)) FAIL("get one: %lld", (long long)one);
    for (long i = 0; i < WN; i++) if (loc[i] != pat(peer, i)) FAIL("get [%ld] = %lld", i, (long long)loc[i]);

    /* Put: each rank writes the peer's second half (large) and element 1 (small) */
    for (long i = 0; i < WN / 2; i++) loc[i] = -pat(rank, i);
    int64_t small = 4242 + rank;
    MPI_Put(loc, WN / 2, MPI_INT64_T, peer, WN / 2, WN / 2, MPI_INT64_T, win);
    MPI_Put(&small, 1, MPI_INT64_T, peer, 1, 1, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    if (base[1] != 4242 + peer) FAIL("put small: %lld", (long long)base[1]);
    for (long i = 0; i < WN / 2; i++)
        if (base[WN / 2 + i] != -pat(peer, i)) FAIL("put [%ld] = %lld", WN / 2 + i, (long long)base[WN / 2 + i]);
    if (base[2] != pat(rank, 2)) FAIL("put wrote outside its target");

    /* Accumulate: both ranks add into rank 0's elements 10..19, 100 times; MPI_MAX and MPI_REPLACE too */
    MPI_Win_fence(0, win);
    if (rank == 0) for (int i = 10; i < 20; i++) base[i] = 0;
    if (rank == 1) base[30] = 0;
    MPI_Win_fence(0, win);
    int64_t add[10];
    for (int i = 0; i < 10; i++) add[i] = i + 1 + rank * 100;
    for (int k = 0; k < 100; k++) MPI_Accumulate(add, 10, MPI_INT64_T, 0, 10, 10, MPI_INT64_T, MPI_SUM, win);
    int64_t mx = 1000 + rank;
    MPI_Accumulate(&mx, 1, MPI_INT64_T, 1, 30, 1, MPI_INT64_T, MPI_MAX, win);
    MPI_Win_fence(0, win);
    if (rank == 0)
        for (int i = 0; i < 10; i++) {
            int64_t want = 100 * ((i + 1) + (i + 1 + 100));
            if (base[10 + i] != want) FAIL("accumulate [%d] = %lld, want %lld", i, (long long)base[10 + i], (long long)want);
        }
    if (rank == 1 && base[30] != 1001) FAIL("accumulate max: %lld", (long long)base[30]);

    /* Fetch_and_op: a shared counter on rank 1, incremented 500 times by each rank under a
     * passive-target lock; the fetched values must be distinct and the final count exact */
    MPI_Win_fence(0, win);
    if (rank == 1) base[40] = 0;
    MPI_Win_fence(0, win);
    int64_t inc = 1, got, seen_max = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
    for (int k = 0; k < 500; k++) {
        MPI_Fetch_and_op(&inc, &got, MPI_INT64_T, 1, 40, MPI_SUM, win);
        MPI_Win_flush(1, win);
        if (got <= seen_max || got < 0 || got >= 1000) FAIL("fetch_and_op returned %lld after %lld", (long long)got, (long long)seen_max);
        seen_max = got;
    }
    MPI_Win_unlock(1, win);
    /* Compare_and_swap and NO_OP fetch */
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t total;
    MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
    MPI_Fetch_and_op(NULL, &total, MPI_INT64_T, 1, 40, MPI_NO_OP, win);
    MPI_Win_unlock(1, win);
    if (total != 1000) FAIL("counter %lld, want 1000", (long long)total);
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t cmp = 1000, swp = 7 + rank, old;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
    MPI_Compare_and_swap(&swp, &cmp, &old, MPI_INT64_T, 1, 40, win);
    MPI_Win_unlock(1, win);
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t olds[2];
    MPI_Allgather(&old, 1, MPI_INT64_T, olds, 1, MPI_INT64_T, MPI_COMM_WORLD);
    int winners = (olds[0] == 1000) + (olds[1] == 1000);
    if (winners != 1) FAIL("compare_and_swap: %d winners (%lld, %lld)", winners, (long long)olds[0], (long long)olds[1]);

    MPI_Win_free(&win);
    free(loc);
    if (rank == 0) printf("rma: OK (get, put, accumulate sum/max, fetch_and_op, compare_and_swap)\n");
    MPI_Finalize();
    return 0;
}
