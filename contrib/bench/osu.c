/*
 * Point-to-point patterns in the shapes the OSU micro-benchmarks use (there is no OSU
 * package here), for running OpenMPI over one libucp.so.0 and then another
 * (contrib/bench/osu.sh). Rank 0 prints one line per size: "<pattern> <bytes> <value>",
 * the value in microseconds (latency patterns) or MB/s (10^6 bytes, bandwidth patterns).
 *
 *   mpirun -np 2 ./osu lat|sendrecv|bw|bibw|put_lat|get_lat|put_bw|get_bw [SIZES]
 *   mpirun -np 4 ./osu mlat [SIZES]        (multi-pair latency: rank i with rank i + n/2)
 *
 * SIZES is a comma-separated list of bytes (default 1,8,64,512,4096,32768,262144,1048576,
 * 4194304). Every message is checked on its first iteration (a wrong byte aborts).
 * OSU_SCALE=k runs k times the iterations.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 64, MAX = 4 << 20 };

static int rank, nranks;

static void die(const char *what)
{
    fprintf(stderr, "rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* OSU_SCALE=k multiplies the iterations: the bandwidth loops of small messages run a few
 * milliseconds by default, short enough for the machine's start-up transients to show. */
static int scale(void)
{
    const char *s = getenv("OSU_SCALE");
    int k = s ? atoi(s) : 1;
    return k > 0 ? k : 1;
}

static int iters_for(size_t n)
{
    return scale() * (n <= 8192 ? 10000 : n <= (1 << 20) ? 1000 : 200);
}
static int warmup_for(size_t n) { return n <= 8192 ? 1000 : 50; }

static void fill(char *b, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++) b[i] = (char)(i * 31 + seed);
}

static void check(const char *b, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (char)(i * 31 + seed)) die("data check failed");
}

/* Ping-pong between `me` and `peer`; returns the one-way latency in us (on the initiator). */
static double pingpong(char *s, char *r, size_t n, int peer, int initiator, MPI_Comm c)
{
    int iters = iters_for(n), warm = warmup_for(n);
    double t0 = 0;
    for (int i = 0; i < iters + warm; i++) {
        if (i == warm) t0 = MPI_Wtime();
        if (initiator) {
            MPI_Send(s, (int)n, MPI_CHAR, peer, 1, c);
            MPI_Recv(r, (int)n, MPI_CHAR, peer, 1, c, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(r, (int)n, MPI_CHAR, peer, 1, c, MPI_STATUS_IGNORE);
            MPI_Send(s, (int)n, MPI_CHAR, peer, 1, c);
        }
        if (i == 0) check(r, n, 1);
    }
    return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
}

static double sendrecv(char *s, char *r, size_t n)
{
    int iters = iters_for(n), warm = warmup_for(n), peer = 1 - rank;
    double t0 = 0;
    for (int i = 0; i < iters + warm; i++) {
        if (i == warm) t0 = MPI_Wtime();
        MPI_Sendrecv(s, (int)n, MPI_CHAR, peer, 2, r, (int)n, MPI_CHAR, peer, 2, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        if (i == 0) check(r, n, 1);
    }
    return (MPI_Wtime() - t0) * 1e6 / iters;
}

/* A window of WINDOW non-blocking sends (and, bidirectional, receives both ways). */
static double bandwidth(char *s, char *r, size_t n, int bidir)
{
    int iters = iters_for(n) / 10 + 10, warm = 5, peer = 1 - rank;
    MPI_Request req[2 * WINDOW];
    char ack;
    double t0 = 0;
    for (int i = 0; i < iters + warm; i++) {
        if (i == warm) t0 = MPI_Wtime();
        int k = 0;
        if (rank == 0 || bidir)
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(s, (int)n, MPI_CHAR, peer, 3, MPI_COMM_WORLD, &req[k++]);
        if (rank == 1 || bidir)
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(r, (int)n, MPI_CHAR, peer, 3, MPI_COMM_WORLD, &req[k++]);
        MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
        if (rank == 1 || bidir) {
            if (i == 0) check(r, n, 1);
        }
        if (!bidir) {
            if (rank == 1) MPI_Send(&ack, 1, MPI_CHAR, 0, 4, MPI_COMM_WORLD);
            else MPI_Recv(&ack, 1, MPI_CHAR, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
    double t = MPI_Wtime() - t0;
    return (double)n * WINDOW * iters * (bidir ? 2 : 1) / t / 1e6;
}

/* One-sided: latency of one put/get completed by a flush, or a window of them. Puts come
 * from `s` into the target's window, gets land in `r`; both are checked (the target zeroes
 * its window first, the origin its `r`). */
static double rma(char *s, char *r, size_t n, int get, int bw, MPI_Win win, char *base)
{
    int iters = bw ? iters_for(n) / 10 + 10 : iters_for(n), warm = bw ? 5 : warmup_for(n);
    double t0 = 0;
    if (rank == 1 && !get) memset(base, 0, n);
    if (rank == 0) memset(r, 0, n);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (int i = 0; i < iters + warm; i++) {
            if (i == warm) t0 = MPI_Wtime();
            for (int w = 0; w < (bw ? WINDOW : 1); w++) {
                if (get) MPI_Get(r, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
                else MPI_Put(s, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
            }
            MPI_Win_flush(1, win);
            if (i == 0 && get) check(r, n, 1);
        }
        MPI_Win_unlock(1, win);
    }
    double t = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1 && !get) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        MPI_Win_sync(win);
        check(base, n, 1);
        MPI_Win_unlock(1, win);
    }
    if (bw) return (double)n * WINDOW * iters / t / 1e6;
    return t * 1e6 / iters;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 2) die("usage: osu PATTERN [SIZES]");
    const char *pat = argv[1];
    char list[512] = "1,8,64,512,4096,32768,262144,1048576,4194304";
    if (argc > 2) snprintf(list, sizeof(list), "%s", argv[2]);
    int mlat = strcmp(pat, "mlat") == 0;
    if (mlat ? (nranks < 2 || nranks % 2) : nranks != 2) die("wrong number of ranks");
    char *s = malloc(MAX), *r = malloc(MAX);
    fill(s, MAX, 1);
    memset(r, 0, MAX);
    MPI_Win win = MPI_WIN_NULL;
    int is_rma = strncmp(pat, "put", 3) == 0 || strncmp(pat, "get", 3) == 0;
    char *base = NULL;
    if (is_rma) {
        MPI_Win_allocate(MAX, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        fill(base, MAX, 1);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t n = strtoul(tok, NULL, 10);
        if (n == 0 || n > MAX) die("sizes are 1..4194304");
        MPI_Barrier(MPI_COMM_WORLD);
        double v = 0;
        if (strcmp(pat, "lat") == 0) v = pingpong(s, r, n, 1 - rank, rank == 0, MPI_COMM_WORLD);
        else if (mlat) {
            int half = nranks / 2, peer = rank < half ? rank + half : rank - half;
            double mine = pingpong(s, r, n, peer, rank < half, MPI_COMM_WORLD), sum = 0;
            if (rank >= half) mine = 0;
            MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            v = sum / half; /* the initiators' average (the others add 0) */
        } else if (strcmp(pat, "sendrecv") == 0) v = sendrecv(s, r, n);
        else if (strcmp(pat, "bw") == 0) v = bandwidth(s, r, n, 0);
        else if (strcmp(pat, "bibw") == 0) v = bandwidth(s, r, n, 1);
        else if (strcmp(pat, "put_lat") == 0) v = rma(s, r, n, 0, 0, win, base);
        else if (strcmp(pat, "get_lat") == 0) v = rma(s, r, n, 1, 0, win, base);
        else if (strcmp(pat, "put_bw") == 0) v = rma(s, r, n, 0, 1, win, base);
        else if (strcmp(pat, "get_bw") == 0) v = rma(s, r, n, 1, 1, win, base);
        else die("unknown pattern");
        if (rank == 0) printf("%s %zu %.3f\n", pat, n, v);
        fflush(stdout);
    }
    if (is_rma) MPI_Win_free(&win);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
