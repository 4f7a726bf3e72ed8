/* Rucx C ABI test over oshmem (spml ucx): distributed locks and point-to-point
 * synchronization. A counter on PE 0 read and written with plain g/p under shmem_set_lock
 * (and under shmem_test_lock), with an owner word that shows any overlap; a token passed
 * round the ring with shmem_TYPE_wait_until on int, long, long long, int32, int64, uint64
 * and size_t and every comparison; shmem_TYPE_test before and after a store; shmem_long_wait; arrivals
 * counted with atomic increments and awaited. */
#include "check.h"

#include <stdint.h>

enum { K = 25 };

static long lock1, lock2;
static long counter, counter2;
static int owner = -1;

static int t_int;
static long t_long;
static long long t_ll;
static int32_t t_i32;
static int64_t t_i64;
static uint64_t t_u64 = UINT64_MAX;
static size_t t_size;
static int t_test;
static long t_wait;
static long arrivals;

static void critical(long *ctr)
{
    int was = shmem_int_atomic_swap(&owner, me, 0);
    if (was != -1) FAIL("lock held by pe %d as well", was);
    long v = shmem_long_g(ctr, 0);
    shmem_long_p(ctr, v + 1, 0);
    was = shmem_int_atomic_swap(&owner, -1, 0);
    if (was != me) FAIL("lock owner changed to %d while held", was);
}

int main(void)
{
    start();
    const int right = (me + 1) % npes;

    for (int k = 0; k < K; k++) {
        shmem_set_lock(&lock1);
        critical(&counter);
        shmem_clear_lock(&lock1);
    }
    shmem_barrier_all();
    if (me == 0 && counter != (long)K * npes) FAIL("set_lock: counter %ld, want %ld", counter, (long)K * npes);

    /* shmem_test_lock: on a free lock it takes it, on a held one it fails. It is never
     * raced here against a clear_lock: in OpenMPI 4.1.4, over UCX 1.13 as over Rucx, a
     * clear_lock that overlaps another PE's failing test_lock waits for a successor that
     * never comes (the holder spins in _shmem_clear_lock, the other PE in its next
     * test_lock). So: PE 0 takes it, the others fail to, then after a barrier PE 0 clears
     * it, and each PE in turn takes it with test_lock. */
    if (me == 0 && shmem_test_lock(&lock2) != 0) FAIL("test_lock on a free lock failed");
    shmem_barrier_all();
    if (me != 0 && shmem_test_lock(&lock2) == 0) FAIL("test_lock took a lock pe 0 holds");
    shmem_barrier_all();
    if (me == 0) {
        critical(&counter2);
        shmem_clear_lock(&lock2);
    }
    for (int p = 1; p < npes; p++) {
        shmem_barrier_all();
        if (me == p) {
            if (shmem_test_lock(&lock2) != 0) FAIL("test_lock on a free lock failed");
            critical(&counter2);
            shmem_clear_lock(&lock2);
        }
    }
    shmem_barrier_all();
    if (me == 0 && counter2 != npes) FAIL("test_lock: counter %ld, want %d", counter2, npes);

    /* the token: PE 0 starts each round, every PE waits for it and passes it on, and PE 0
     * waits for it to come back */
    for (int round = 1; round <= 2; round++) {
        const int first = me == 0;
        /* int, ==  */
        if (!first) shmem_int_wait_until(&t_int, SHMEM_CMP_EQ, round);
        shmem_int_p(&t_int, round, right);
        if (first) shmem_int_wait_until(&t_int, SHMEM_CMP_EQ, round);
        /* long, >= */
        if (!first) shmem_long_wait_until(&t_long, SHMEM_CMP_GE, 10L * round);
        shmem_long_p(&t_long, 10L * round, right);
        if (first) shmem_long_wait_until(&t_long, SHMEM_CMP_GE, 10L * round);
        /* long long, > (values beyond 32 bits) */
        if (!first) shmem_longlong_wait_until(&t_ll, SHMEM_CMP_GT, (1LL << 33) * round - 1);
        shmem_longlong_p(&t_ll, (1LL << 33) * round, right);
        if (first) shmem_longlong_wait_until(&t_ll, SHMEM_CMP_GT, (1LL << 33) * round - 1);
        /* int32, != */
        if (!first) shmem_int32_wait_until(&t_i32, SHMEM_CMP_NE, round - 1);
        shmem_int32_p(&t_i32, round, right);
        if (first) shmem_int32_wait_until(&t_i32, SHMEM_CMP_NE, round - 1);
        /* int64, < (negative values) */
        if (!first) shmem_int64_wait_until(&t_i64, SHMEM_CMP_LT, -(int64_t)round + 1);
        shmem_int64_p(&t_i64, -(int64_t)round, right);
        if (first) shmem_int64_wait_until(&t_i64, SHMEM_CMP_LT, -(int64_t)round + 1);
        /* uint64, <= (from the top of the range down) */
        if (!first) shmem_uint64_wait_until(&t_u64, SHMEM_CMP_LE, UINT64_MAX - round);
        shmem_uint64_p(&t_u64, UINT64_MAX - round, right);
        if (first) shmem_uint64_wait_until(&t_u64, SHMEM_CMP_LE, UINT64_MAX - round);
        /* size_t, == */
        if (!first) shmem_size_wait_until(&t_size, SHMEM_CMP_EQ, (size_t)round * 3);
        shmem_size_p(&t_size, (size_t)round * 3, right);
        if (first) shmem_size_wait_until(&t_size, SHMEM_CMP_EQ, (size_t)round * 3);

        if (t_int != round || t_long != 10L * round || t_ll != (1LL << 33) * round || t_i32 != round ||
            t_i64 != -(int64_t)round || t_u64 != UINT64_MAX - round || t_size != (size_t)round * 3)
            FAIL("token round %d: %d %ld %lld %d %lld %llu %zu", round, t_int, t_long, t_ll, t_i32,
                 (long long)t_i64, (unsigned long long)t_u64, t_size);
        shmem_barrier_all();
    }

    /* shmem_int_test: false before the left neighbour's store, true once a barrier has
     * made it complete. Not polled for a store in flight: OpenMPI 4.1.4's shmem_TYPE_test
     * only reads memory and progresses nothing, so a PE polling it while its neighbour
     * waits in shmem_quiet for that very PE's progress waits forever (over UCX 1.13 as
     * over Rucx). shmem_long_wait (while equal), which progresses, for the next store. */
    if (shmem_int_test(&t_test, SHMEM_CMP_EQ, 1)) FAIL("shmem_int_test true before the store");
    shmem_barrier_all();
    shmem_int_p(&t_test, 1, right);
    shmem_barrier_all();
    if (!shmem_int_test(&t_test, SHMEM_CMP_EQ, 1) || !shmem_int_test(&t_test, SHMEM_CMP_GT, 0) ||
        shmem_int_test(&t_test, SHMEM_CMP_NE, 1) || shmem_int_test(&t_test, SHMEM_CMP_LT, 1))
        FAIL("shmem_int_test after the store");
    shmem_long_p(&t_wait, 5, right);
    shmem_long_wait(&t_wait, 0);
    if (t_test != 1 || t_wait != 5) FAIL("test/wait: %d %ld", t_test, t_wait);
    shmem_barrier_all();

    /* arrivals: everyone increments a counter on PE 0, which waits for all of them */
    shmem_long_atomic_inc(&arrivals, 0);
    if (me == 0) {
        shmem_long_wait_until(&arrivals, SHMEM_CMP_GE, npes);
        if (arrivals != npes) FAIL("arrivals %ld", arrivals);
    }
    return finish("lock");
}
