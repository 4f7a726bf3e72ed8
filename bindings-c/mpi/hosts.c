/* Rucx C ABI test: 4 ranks on two "hosts" (network namespaces joined by a veth pair), ranks
 * 0 and 1 on the first, 2 and 3 on the second, as bindings-c/tests/two_hosts.rs launches
 * them.
 *
 * Without arguments: checks the placement (each host's ranks share a network namespace, the
 * two hosts' differ), then point-to-point within and across the hosts (0 B .. 4 MiB, both
 * directions, blocking and non-blocking, every byte checked), MPI_Allreduce and
 * MPI_Alltoall (eager and rendezvous sizes, checked), and RMA on an allocated window (put,
 * get and accumulate in fence epochs, put and fetch-and-op under passive locks, checked);
 * rank 0 prints "hosts: OK".
 *
 * With "cut": after a barrier every rank prints "hosts: rank R exchanging" and exchanges
 * messages with every other rank in a loop (eager and rendezvous sizes), with
 * MPI_ERRORS_RETURN, until a call fails: it prints "hosts: rank R error at T: <error>"
 * (T: CLOCK_REALTIME in ms) and exits with status 3 at once, without finalizing (the job
 * is broken). The test cuts one host's link meanwhile; a rank that exchanged for 120 s
 * without an error prints "hosts: rank R no error" and exits with status 4. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, nranks;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

static unsigned char pat8(int from, int to, long len, long i)
{
    return (unsigned char)(from * 31 + to * 7 + len * 13 + i * 11 + (i >> 9));
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The inode of this process's network namespace. */
static long long netns(void)
{
    char buf[64] = {0};
    ssize_t n = readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
    if (n <= 0) return -1;
    char *p = strchr(buf, '[');
    return p ? atoll(p + 1) : -1;
}

static void placement(void)
{
    long long mine = netns(), all[4];
    MPI_Allgather(&mine, 1, MPI_LONG_LONG, all, 1, MPI_LONG_LONG, MPI_COMM_WORLD);
    if (all[0] != all[1] || all[2] != all[3] || all[0] == all[2] || all[0] < 0)
        FAIL("ranks are not two per network namespace: %lld %lld %lld %lld",
             all[0], all[1], all[2], all[3]);
}

/* Sendrecv with `peer`, then the same sizes all at once with Isend/Irecv. */
static void p2p(int peer)
{
    static const long lens[] = {0, 1, 100, 8191, 65536, 300000, 1 << 20, 4 << 20};
    enum { NL = sizeof(lens) / sizeof(lens[0]) };
    unsigned char *s[NL], *r[NL];
    for (int k = 0; k < NL; k++) {
        long len = lens[k];
        s[k] = malloc(len + 1);
        r[k] = malloc(len + 1);
        for (long i = 0; i < len; i++) s[k][i] = pat8(rank, peer, len, i);
        memset(r[k], 0xee, len + 1);
        MPI_Status st;
        MPI_Sendrecv(s[k], (int)len, MPI_BYTE, peer, 10 + k, r[k], (int)len + 1, MPI_BYTE, peer,
                     10 + k, MPI_COMM_WORLD, &st);
        int got;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != len) FAIL("sendrecv %ld with %d: got %d bytes", len, peer, got);
        for (long i = 0; i < len; i++)
            if (r[k][i] != pat8(peer, rank, len, i))
                FAIL("sendrecv %ld from %d: [%ld] = %d", len, peer, i, r[k][i]);
    }
    MPI_Request rq[2 * NL];
    for (int k = 0; k < NL; k++) {
        memset(r[k], 0xee, lens[k] + 1);
        MPI_Irecv(r[k], (int)lens[k], MPI_BYTE, peer, 40 + k, MPI_COMM_WORLD, &rq[k]);
    }
    for (int k = 0; k < NL; k++)
        MPI_Isend(s[k], (int)lens[k], MPI_BYTE, peer, 40 + k, MPI_COMM_WORLD, &rq[NL + k]);
    MPI_Waitall(2 * NL, rq, MPI_STATUSES_IGNORE);
    for (int k = 0; k < NL; k++) {
        for (long i = 0; i < lens[k]; i++)
            if (r[k][i] != pat8(peer, rank, lens[k], i))
                FAIL("isend %ld from %d: [%ld] = %d", lens[k], peer, i, r[k][i]);
        if (r[k][lens[k]] != 0xee) FAIL("isend %ld from %d: wrote past the end", lens[k], peer);
        free(s[k]);
        free(r[k]);
    }
}

static void collectives(void)
{
    /* Allreduce: small (eager) and 2 MiB (rendezvous) */
    for (long len = 1000; len <= (1 << 18); len *= 262) {
        double *v = malloc(sizeof(double) * len), *sum = malloc(sizeof(double) * len);
        for (long i = 0; i < len; i++) v[i] = rank * (double)i + 1;
        MPI_Allreduce(v, sum, (int)len, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (long i = 0; i < len; i++)
            if (sum[i] != 6.0 * i + 4) FAIL("allreduce %ld: [%ld] = %g", len, i, sum[i]);
        free(v);
        free(sum);
    }
    int mx = 0, me = rank * 10 + 1;
    MPI_Allreduce(&me, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (mx != 31) FAIL("allreduce max: %d", mx);
    /* Alltoall: 16 and 100000 ints per peer */
    for (long len = 16; len <= 100000; len *= 6250) {
        int *s = malloc(sizeof(int) * len * 4), *r = malloc(sizeof(int) * len * 4);
        for (int p = 0; p < 4; p++)
            for (long i = 0; i < len; i++) s[p * len + i] = rank * 1000003 + p * 10007 + (int)i;
        memset(r, 0xff, sizeof(int) * len * 4);
        MPI_Alltoall(s, (int)len, MPI_INT, r, (int)len, MPI_INT, MPI_COMM_WORLD);
        for (int p = 0; p < 4; p++)
            for (long i = 0; i < len; i++)
                if (r[p * len + i] != p * 1000003 + rank * 10007 + (int)i)
                    FAIL("alltoall %ld: from %d [%ld] = %d", len, p, i, r[p * len + i]);
        free(s);
        free(r);
    }
}

enum { WN = 1 << 17 }; /* 1 MiB window of int64 per rank */

static int64_t wpat(int r, long i) { return (int64_t)r * 1000000007LL + i * 3; }

static void rma(void)
{
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate(sizeof(int64_t) * WN, sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                     &win);
    for (long i = 0; i < WN; i++) base[i] = wpat(rank, i);
    int64_t *loc = malloc(sizeof(int64_t) * WN);
    int across = (rank + 2) % 4, next = (rank + 1) % 4;

    /* Get the whole window of the rank across and one element of the next */
    MPI_Win_fence(0, win);
    int64_t one = 0;
    MPI_Get(loc, WN, MPI_INT64_T, across, 0, WN, MPI_INT64_T, win);
    MPI_Get(&one, 1, MPI_INT64_T, next, 7, 1, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    if (one != wpat(next, 7)) FAIL("get one from %d: %lld", next, (long long)one);
    for (long i = 0; i < WN; i++)
        if (loc[i] != wpat(across, i)) FAIL("get from %d [%ld] = %lld", across, i, (long long)loc[i]);

    /* Put: each rank writes its quarter of the window of the rank across (256 KiB) */
    long q = WN / 4;
    for (long i = 0; i < q; i++) loc[i] = -wpat(rank, i);
    MPI_Win_fence(0, win);
    MPI_Put(loc, (int)q, MPI_INT64_T, across, rank * q, (int)q, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (long i = 0; i < WN; i++) {
        int owner = (int)(i / q);
        int64_t want = owner == (rank + 2) % 4 ? -wpat(owner, i - owner * q) : wpat(rank, i);
        if (base[i] != want) FAIL("put into me [%ld] = %lld", i, (long long)base[i]);
    }

    /* Accumulate: every rank adds rank+1 to elements 0..999 of every window */
    for (long i = 0; i < 1000; i++) loc[i] = rank + 1;
    MPI_Win_fence(0, win);
    for (long i = 0; i < 1000; i++) base[i] = i;
    MPI_Win_fence(0, win);
    for (int p = 0; p < 4; p++)
        MPI_Accumulate(loc, 1000, MPI_INT64_T, p, 0, 1000, MPI_INT64_T, MPI_SUM, win);
    MPI_Win_fence(0, win);
    for (long i = 0; i < 1000; i++)
        if (base[i] != i + 10) FAIL("accumulate [%ld] = %lld", i, (long long)base[i]);

    /* Passive target: put under a lock and fetch-and-op on a counter at rank 0 */
    MPI_Barrier(MPI_COMM_WORLD);
    base[WN - 1] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t val = wpat(rank, 99), add = 1, old = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, across, 0, win);
    MPI_Put(&val, 1, MPI_INT64_T, across, 2000 + rank, 1, MPI_INT64_T, win);
    MPI_Win_unlock(across, win);
    for (int k = 0; k < 50; k++) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&add, &old, MPI_INT64_T, 0, WN - 1, MPI_SUM, win);
        MPI_Win_unlock(0, win);
        if (old < 0 || old >= 200) FAIL("fetch_and_op: old %lld", (long long)old);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
    if (base[2000 + across] != wpat(across, 99))
        FAIL("locked put from %d: %lld", across, (long long)base[2000 + across]);
    if (rank == 0 && base[WN - 1] != 200) FAIL("fetch_and_op total %lld", (long long)base[WN - 1]);
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    free(loc);
}

/* Exchange with everyone until a call fails; never returns. */
static void cut(void)
{
    enum { SMALL = 4096, LARGE = 1 << 20 };
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    char *s = malloc(LARGE), *r = malloc(3 * (size_t)LARGE);
    memset(s, rank, LARGE);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("hosts: rank %d exchanging\n", rank);
    fflush(stdout);
    long long start = now_ms();
    for (long it = 0; now_ms() - start < 120000; it++) {
        int len = it % 4 == 3 ? LARGE : SMALL, k = 0, rc = MPI_SUCCESS;
        MPI_Request rq[6];
        for (int p = 0; p < nranks; p++) {
            if (p == rank) continue;
            MPI_Irecv(r + (size_t)k * LARGE, len, MPI_BYTE, p, 5, MPI_COMM_WORLD, &rq[k]);
            k++;
        }
        for (int p = 0; p < nranks && rc == MPI_SUCCESS; p++)
            if (p != rank) rc = MPI_Isend(s, len, MPI_BYTE, p, 5, MPI_COMM_WORLD, &rq[k++]);
        if (rc == MPI_SUCCESS) rc = MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING] = "";
            int n = 0;
            MPI_Error_string(rc, msg, &n);
            printf("hosts: rank %d error at %lld after %ld rounds: %s\n", rank, now_ms(), it, msg);
            fflush(stdout);
            _exit(3);
        }
    }
    printf("hosts: rank %d no error\n", rank);
    fflush(stdout);
    _exit(4);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 4) {
        if (!rank) fprintf(stderr, "needs 4 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    placement();
    if (argc > 1 && !strcmp(argv[1], "cut")) cut();
    p2p((rank + 2) % 4);     /* across the hosts */
    p2p(rank ^ 1);           /* within a host */
    collectives();
    rma();
    MPI_Barrier(MPI_COMM_WORLD);
    if (!rank) printf("hosts: OK\n");
    MPI_Finalize();
    return 0;
}
