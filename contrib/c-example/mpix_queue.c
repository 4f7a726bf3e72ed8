/*
 * How an MPI library could expose Rucx's stream-triggered queues as MPIX_Enqueue_* calls
 * (the interface of "Stream-triggered MPI"): a queue per communicator and stream, sends and
 * receives enqueued by rank, a start releasing them in a batch, a wait the stream honours.
 *
 * Here the "communicator" is four forked processes in a ring, each holding an endpoint
 * per rank, and the queue has no stream (NULL: start and wait are done by the host), so
 * the example runs anywhere. With a CUDA stream, the same calls put the start and the wait
 * on the stream, and the host only enqueues.
 *
 *   make mpix_queue && ./mpix_queue [iterations]
 */
#include <rucx.h>
#include <ucp/api/ucp.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(_call) do { ucs_status_t _s = (_call); if (_s != UCS_OK) { \
        fprintf(stderr, "rank %d: %s:%d %s: %s\n", my_rank, __FILE__, __LINE__, #_call, \
                ucpx_status_string(_s)); exit(1); } } while (0)

enum { NPROCS = 4, COUNT = 4096 };
static int my_rank = -1;

/* ---- what the MPI library would provide ------------------------------------------ */

typedef struct {
    ucp_worker_h worker;
    ucp_ep_h eps[NPROCS];
    int rank, size;
} MPIX_Comm;

typedef struct {
    MPIX_Comm *comm;
    ucpx_queue_h q;
} *MPIX_Queue;

/* MPI's tag space: the source rank in the high bits, so a receive matches one sender. */
static ucp_tag_t mpix_tag(int src, int tag) { return ((ucp_tag_t)src << 32) | (uint32_t)tag; }

static int MPIX_Create_queue(MPIX_Comm *comm, void *stream, MPIX_Queue *q)
{
    *q = malloc(sizeof(**q));
    (*q)->comm = comm;
    return ucpx_queue_create(comm->worker, stream, &(*q)->q) == UCS_OK ? 0 : 1;
}

static int MPIX_Enqueue_send(const double *buf, int count, int dest, int tag, MPIX_Queue q)
{
    return ucpx_enqueue_send(q->q, q->comm->eps[dest], buf, (size_t)count,
                             ucp_dt_make_contig(sizeof(double)),
                             mpix_tag(q->comm->rank, tag)) == UCS_OK ? 0 : 1;
}

static int MPIX_Enqueue_recv(double *buf, int count, int src, int tag, MPIX_Queue q)
{
    return ucpx_enqueue_recv(q->q, q->comm->eps[src], buf, (size_t)count,
                             ucp_dt_make_contig(sizeof(double)), mpix_tag(src, tag),
                             UINT64_MAX) == UCS_OK ? 0 : 1;
}

/* A receive posted at once, released with the next start: the data may land before the
 * stream gets there, so the application double-buffers. */
static int MPIX_Enqueue_recv_posted(double *buf, int count, int src, int tag, MPIX_Queue q)
{
    return ucpx_enqueue_recv_posted(q->q, q->comm->eps[src], buf, (size_t)count,
                                    ucp_dt_make_contig(sizeof(double)), mpix_tag(src, tag),
                                    UINT64_MAX) == UCS_OK ? 0 : 1;
}

static int MPIX_Enqueue_start(MPIX_Queue q) { return ucpx_enqueue_start(q->q) == UCS_OK ? 0 : 1; }
static int MPIX_Enqueue_wait(MPIX_Queue q) { return ucpx_enqueue_wait(q->q) == UCS_OK ? 0 : 1; }

static int MPIX_Free_queue(MPIX_Queue q)
{
    int rc = ucpx_queue_destroy(q->q) == UCS_OK ? 0 : 1;
    free(q);
    return rc;
}

/* ---- the application --------------------------------------------------------------- */

static double value(int rank, int iter, int i) { return rank * 1e6 + iter * 1e3 + i; }

static int run(int rank, int iters, int to[NPROCS][2], int from[NPROCS][2])
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features   = UCP_FEATURE_TAG,
    };
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_worker_params_t wp = {0};
    MPIX_Comm comm = {.rank = rank, .size = NPROCS};
    CHECK(ucp_worker_create(ctx, &wp, &comm.worker));

    /* Addresses: each rank writes its own to every other rank's pipe, as one record in
     * one write (atomic below PIPE_BUF, so records from several writers never mix). */
    ucp_address_t *addr;
    size_t len;
    CHECK(ucp_worker_get_address(comm.worker, &addr, &len));
    size_t rec_len = sizeof(rank) + sizeof(len) + len;
    char *rec = malloc(rec_len);
    memcpy(rec, &rank, sizeof(rank));
    memcpy(rec + sizeof(rank), &len, sizeof(len));
    memcpy(rec + sizeof(rank) + sizeof(len), addr, len);
    if (rec_len > 4096) { fprintf(stderr, "address too long for one pipe write\n"); return 1; }
    for (int r = 0; r < NPROCS; r++)
        if (r != rank && write(to[r][1], rec, rec_len) != (ssize_t)rec_len) { perror("write"); return 1; }
    free(rec);
    for (int k = 0; k < NPROCS - 1; k++) {
        int r;
        size_t n;
        if (read(from[rank][0], &r, sizeof(r)) != sizeof(r) ||
            read(from[rank][0], &n, sizeof(n)) != sizeof(n)) { perror("read"); return 1; }
        void *peer = malloc(n);
        for (size_t got = 0; got < n;) {
            ssize_t g = read(from[rank][0], (char *)peer + got, n - got);
            if (g <= 0) { perror("read"); return 1; }
            got += (size_t)g;
        }
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
            .address    = peer,
        };
        CHECK(ucp_ep_create(comm.worker, &ep, &comm.eps[r]));
        free(peer);
    }
    ucp_worker_release_address(comm.worker, addr);

    /* Each iteration: send to both ring neighbours, receive from both, all in one batch.
     * The first half enqueues its receives with the sends; the second half posts each
     * iteration's receives during the one before (after its start), into the other of
     * two buffers. */
    int left = (rank + NPROCS - 1) % NPROCS, right = (rank + 1) % NPROCS;
    double *out = malloc(sizeof(double) * COUNT);
    double *in_l[2], *in_r[2];
    for (int b = 0; b < 2; b++) {
        in_l[b] = malloc(sizeof(double) * COUNT);
        in_r[b] = malloc(sizeof(double) * COUNT);
    }
    int half = iters / 2;
    MPIX_Queue q;
    if (MPIX_Create_queue(&comm, NULL /* no stream */, &q)) { fprintf(stderr, "create\n"); return 1; }
    for (int it = 0; it < iters; it++) {
        double *l = in_l[it % 2], *r = in_r[it % 2];
        for (int i = 0; i < COUNT; i++) out[i] = value(rank, it, i);
        int rc = 0;
        if (it < half)
            rc = MPIX_Enqueue_recv(l, COUNT, left, it, q) || MPIX_Enqueue_recv(r, COUNT, right, it, q);
        else if (it == half)
            rc = MPIX_Enqueue_recv_posted(l, COUNT, left, it, q) ||
                 MPIX_Enqueue_recv_posted(r, COUNT, right, it, q);
        if (rc || MPIX_Enqueue_send(out, COUNT, left, it, q) ||
            MPIX_Enqueue_send(out, COUNT, right, it, q)) { fprintf(stderr, "enqueue\n"); return 1; }
        if (MPIX_Enqueue_start(q)) { fprintf(stderr, "start\n"); return 1; }
        int next = it + 1;
        if (it >= half && next < iters &&
            (MPIX_Enqueue_recv_posted(in_l[next % 2], COUNT, left, next, q) ||
             MPIX_Enqueue_recv_posted(in_r[next % 2], COUNT, right, next, q))) {
            fprintf(stderr, "post\n");
            return 1;
        }
        if (MPIX_Enqueue_wait(q)) {
            fprintf(stderr, "rank %d: iteration %d failed\n", rank, it);
            return 1;
        }
        for (int i = 0; i < COUNT; i++)
            if (l[i] != value(left, it, i) || r[i] != value(right, it, i)) {
                fprintf(stderr, "rank %d: iteration %d: element %d wrong\n", rank, it, i);
                return 1;
            }
    }
    size_t pending, running;
    uint32_t done;
    ucs_status_t err;
    uint64_t failed;
    CHECK(ucpx_queue_query(q->q, &pending, &running, &done, &err, &failed));
    if (pending || running || done != (uint32_t)(4 * iters) || err != UCS_OK || failed) {
        fprintf(stderr, "rank %d: query: %zu pending, %zu running, %u done, %s, %lu failed\n",
                rank, pending, running, done, ucpx_status_string(err), (unsigned long)failed);
        return 1;
    }
    if (MPIX_Free_queue(q)) { fprintf(stderr, "free\n"); return 1; }

    /* Bad input is refused, not followed. */
    if (ucpx_enqueue_start(NULL) != UCS_ERR_INVALID_PARAM ||
        ucpx_queue_create(NULL, NULL, NULL) != UCS_ERR_INVALID_PARAM) {
        fprintf(stderr, "rank %d: bad arguments accepted\n", rank);
        return 1;
    }

    /* Everyone done before anyone closes. */
    for (int r = 0; r < NPROCS; r++)
        if (r != rank && write(to[r][1], &rank, sizeof(rank)) != sizeof(rank)) return 1;
    for (int k = 0; k < NPROCS - 1; k++) {
        int r;
        if (read(from[rank][0], &r, sizeof(r)) != sizeof(r)) return 1;
    }
    for (int r = 0; r < NPROCS; r++) {
        if (r == rank) continue;
        ucp_request_param_t cp = {0};
        ucs_status_ptr_t c = ucp_ep_close_nbx(comm.eps[r], &cp);
        if (UCS_PTR_IS_PTR(c)) {
            while (ucp_request_check_status(c) == UCS_INPROGRESS) ucp_worker_progress(comm.worker);
            ucp_request_free(c);
        }
    }
    free(out);
    for (int b = 0; b < 2; b++) { free(in_l[b]); free(in_r[b]); }
    ucp_worker_destroy(comm.worker);
    ucp_cleanup(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 50;
    /* from[r]: the pipe rank r reads; to[r] is the same pipe, written by the others. */
    int pipes[NPROCS][2];
    for (int r = 0; r < NPROCS; r++)
        if (pipe(pipes[r])) { perror("pipe"); return 1; }
    pid_t pids[NPROCS];
    for (int r = 0; r < NPROCS; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            my_rank = r;
            exit(run(r, iters, pipes, pipes));
        }
    }
    int bad = 0;
    for (int r = 0; r < NPROCS; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
    }
    if (bad) {
        printf("mpix_queue: %d of %d ranks FAILED\n", bad, NPROCS);
        return 1;
    }
    printf("mpix_queue: OK (%d ranks, %d iterations of a ring exchange through enqueued "
           "operations)\n", NPROCS, iters);
    return 0;
}
