/* Endpoints: close modes (flush, force) and error handling (UCP_ERR_HANDLING_MODE_PEER)
 * with a peer process that dies or leaves. */
#include "contract.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *close_ep(ucp_ep_h ep, int force)
{
    ucp_request_param_t cp;
    memset(&cp, 0, sizeof(cp));
    if (force) {
        cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    return ucp_ep_close_nbx(ep, &cp);
}

/* Messages sent before a flush-mode close arrive, and the close completes with UCS_OK. */
static void close_flush_delivers(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    enum { N = 16 };
    char *src[N], dst[N][256];
    for (int i = 0; i < N; i++) {
        src[i] = ct_pattern(256, i);
        ucp_request_param_t sp = ct_send_param(NULL);
        void *s = ucp_tag_send_nbx(p.ep[0], src[i], 256, 0xd0, &sp);
        CT_CHECK(!UCS_PTR_IS_ERR(s), "send");
        if (s != NULL) ucp_request_free(s);
    }
    void *c = close_ep(p.ep[0], 0);
    p.ep[0] = NULL;
    CT_OK(ct_wait(&p, c));
    for (int i = 0; i < N; i++) {
        ucp_request_param_t rp = ct_recv_param(NULL);
        CT_OK(ct_wait(&p, ucp_tag_recv_nbx(p.w[1], dst[i], 256, 0xd0, ~0ull, &rp)));
        CT_CHECK(ct_pattern_ok(dst[i], 256, i), "message %d", i);
        free(src[i]);
    }
    ct_pair_fini(&p);
}

/* A force close completes at once, and operations still outstanding on the endpoint end
 * with UCS_ERR_CANCELED (endpoints in UCP_ERR_HANDLING_MODE_PEER, as the mode requires). */
static void close_force_cancels(void)
{
    struct ct_pair p;
    ct_pair_init(&p, CT_PEER_ERRORS);
    char *big = ct_pattern(CT_LARGE, 1);
    struct ct_rec s = {0};
    ucp_request_param_t sp = ct_send_param(&s);
    void *sr = ucp_tag_send_nbx(p.ep[0], big, CT_LARGE, 0xd1, &sp);
    CT_CHECK(sr != NULL && !UCS_PTR_IS_ERR(sr), "a rendezvous send completed at once");
    ct_progress_n(&p, 100);
    void *c = close_ep(p.ep[0], 1);
    p.ep[0] = NULL;
    CT_CHECK(!UCS_PTR_IS_ERR(c), "force close failed: %d", (int)UCS_PTR_STATUS(c));
    if (c != NULL) {
        for (int i = 0; i < 100 && ucp_request_check_status(c) == UCS_INPROGRESS; i++)
            ct_progress(&p);
        CT_CHECK(ucp_request_check_status(c) != UCS_INPROGRESS, "a force close waits");
        ucp_request_free(c);
    }
    for (int i = 0; i < 1000 && s.calls == 0; i++) ct_progress(&p);
    CT_CHECK(s.calls == 1 && s.status == UCS_ERR_CANCELED,
             "the outstanding send: %d callbacks, status %d", s.calls, (int)s.status);
    ucp_request_free(sr);
    free(big);
    ct_pair_fini(&p);
}

/* A child process with a worker connected to ours in UCP_ERR_HANDLING_MODE_PEER. */
struct peer {
    pid_t pid;
    int to_child, from_child;
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_ep_h ep;
    struct ct_rec err;
};

static void put_blob(int fd, const void *b, size_t n)
{
    if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(fd, b, n) != (ssize_t)n)
        CT_FAIL("pipe write");
}

static void *get_blob(int fd)
{
    size_t n;
    if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n)) CT_FAIL("pipe read");
    char *b = malloc(n);
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, b + got, n - got);
        if (k <= 0) CT_FAIL("pipe read");
        got += (size_t)k;
    }
    return b;
}

/* Forks; the child runs `child` with its own worker and endpoint to us, then exits. */
static void peer_start(struct peer *pr, void (*child)(struct peer *))
{
    int a[2], b[2];
    if (pipe(a) || pipe(b)) CT_FAIL("pipe");
    memset(pr, 0, sizeof(*pr));
    pr->pid = fork();
    CT_CHECK(pr->pid >= 0, "fork");
    pr->to_child = pr->pid == 0 ? b[1] : a[1];
    pr->from_child = pr->pid == 0 ? a[0] : b[0];
    pr->ctx = ct_context(UCP_FEATURE_TAG);
    pr->w = ct_worker(pr->ctx);
    ucp_address_t *addr;
    size_t len;
    CT_OK(ucp_worker_get_address(pr->w, &addr, &len));
    put_blob(pr->to_child, addr, len);
    ucp_worker_release_address(pr->w, addr);
    void *theirs = get_blob(pr->from_child);
    pr->ep = ct_ep(pr->w, theirs, CT_PEER_ERRORS, &pr->err);
    free(theirs);
    if (pr->pid == 0) {
        child(pr);
        _exit(0);
    }
}

static void progress_one(ucp_worker_h w)
{
    ct_in_progress = 1;
    ucp_worker_progress(w);
    ct_in_progress = 0;
}

static void child_receives_one_then_hangs(struct peer *pr)
{
    char b[8];
    ucp_request_param_t rp = ct_recv_param(NULL);
    void *r = ucp_tag_recv_nbx(pr->w, b, 8, 1, ~0ull, &rp);
    while (r != NULL && ucp_request_check_status(r) == UCS_INPROGRESS) progress_one(pr->w);
    char ok = 'k';
    if (write(pr->to_child, &ok, 1) != 1) _exit(1);
    for (;;) pause(); /* killed by the parent */
}

/* UCP_ERR_HANDLING_MODE_PEER: when the peer process dies, an outstanding send completes
 * with an error, and the error handler is called once, with the endpoint, inside
 * progress. */
static void dead_peer_fails_outstanding_sends(void)
{
    setenv("UCX_KEEPALIVE_INTERVAL", "200ms", 1); /* UCX's detection period */
    struct peer pr;
    peer_start(&pr, child_receives_one_then_hangs);
    char small[8] = "hello!!";
    ucp_request_param_t sp = ct_send_param(NULL);
    void *s0 = ucp_tag_send_nbx(pr.ep, small, 8, 1, &sp);
    while (s0 != NULL && ucp_request_check_status(s0) == UCS_INPROGRESS) progress_one(pr.w);
    if (s0 != NULL) ucp_request_free(s0);
    char ok;
    CT_CHECK(read(pr.from_child, &ok, 1) == 1, "child");
    /* A rendezvous send and a synchronous send nobody will receive. */
    char *big = ct_pattern(CT_LARGE, 1);
    struct ct_rec s1 = {0}, s2 = {0};
    ucp_request_param_t p1 = ct_send_param(&s1), p2 = ct_send_param(&s2);
    void *r1 = ucp_tag_send_nbx(pr.ep, big, CT_LARGE, 2, &p1);
    void *r2 = ucp_tag_send_sync_nbx(pr.ep, small, 8, 3, &p2);
    CT_CHECK(!UCS_PTR_IS_ERR(r1) && !UCS_PTR_IS_ERR(r2) && r1 != NULL && r2 != NULL, "posts");
    for (int i = 0; i < 1000; i++) progress_one(pr.w);
    kill(pr.pid, SIGKILL);
    waitpid(pr.pid, NULL, 0);
    double t0 = now();
    while ((s1.calls == 0 || s2.calls == 0 || pr.err.calls == 0) && now() - t0 < 20)
        progress_one(pr.w);
    CT_CHECK(s1.calls == 1 && s1.status != UCS_OK, "rendezvous send: %d calls, status %d",
             s1.calls, (int)s1.status);
    CT_CHECK(s2.calls == 1 && s2.status != UCS_OK, "synchronous send: %d calls, status %d",
             s2.calls, (int)s2.status);
    CT_CHECK(pr.err.calls == 1 && pr.err.req == pr.ep && pr.err.status != UCS_OK &&
                 pr.err.inside_progress == 1,
             "error handler: %d calls, ep %p (want %p), status %d", pr.err.calls, pr.err.req,
             (void *)pr.ep, (int)pr.err.status);
    if (getenv("CT_VERBOSE"))
        fprintf(stderr, "    dead peer: send %d, sync send %d, error handler %d after %.3f s\n",
                (int)s1.status, (int)s2.status, (int)pr.err.status, now() - t0);
    ucp_request_free(r1);
    ucp_request_free(r2);
    void *c = close_ep(pr.ep, 1);
    while (c != NULL && !UCS_PTR_IS_ERR(c) && ucp_request_check_status(c) == UCS_INPROGRESS)
        progress_one(pr.w);
    ucp_worker_destroy(pr.w);
    ucp_cleanup(pr.ctx);
    free(big);
}

static void child_closes_and_exits(struct peer *pr)
{
    char b[8];
    ucp_request_param_t rp = ct_recv_param(NULL);
    void *r = ucp_tag_recv_nbx(pr->w, b, 8, 1, ~0ull, &rp);
    while (r != NULL && ucp_request_check_status(r) == UCS_INPROGRESS) progress_one(pr->w);
    void *c = close_ep(pr->ep, 0);
    while (c != NULL && !UCS_PTR_IS_ERR(c) && ucp_request_check_status(c) == UCS_INPROGRESS)
        progress_one(pr->w);
    ucp_worker_destroy(pr->w);
    ucp_cleanup(pr->ctx);
}

/* A peer that closes its endpoint and exits does not hang ours: a flush-mode close of our
 * endpoint completes (UCP_ERR_HANDLING_MODE_PEER). */
static void close_after_the_peer_left(void)
{
    setenv("UCX_KEEPALIVE_INTERVAL", "200ms", 1);
    struct peer pr;
    peer_start(&pr, child_closes_and_exits);
    char small[8] = "bye-bye";
    ucp_request_param_t sp = ct_send_param(NULL);
    void *s0 = ucp_tag_send_nbx(pr.ep, small, 8, 1, &sp);
    while (s0 != NULL && ucp_request_check_status(s0) == UCS_INPROGRESS) progress_one(pr.w);
    if (s0 != NULL) ucp_request_free(s0);
    waitpid(pr.pid, NULL, 0);
    double t0 = now();
    while (now() - t0 < 1) progress_one(pr.w);
    void *c = close_ep(pr.ep, 0);
    CT_CHECK(!UCS_PTR_IS_ERR(c) || UCS_PTR_STATUS(c) != UCS_OK, "close");
    t0 = now();
    while (c != NULL && !UCS_PTR_IS_ERR(c) && ucp_request_check_status(c) == UCS_INPROGRESS) {
        progress_one(pr.w);
        CT_CHECK(now() - t0 < 10, "closing an endpoint whose peer left hangs");
    }
    if (c != NULL && !UCS_PTR_IS_ERR(c)) ucp_request_free(c);
    ucp_worker_destroy(pr.w);
    ucp_cleanup(pr.ctx);
}

/* ucp_ep_modify_nb changes the error handler and user data and completes; the peer and
 * the error mode cannot change (UCS_ERR_INVALID_PARAM). ucp_ep_evaluate_perf estimates a
 * time that grows with the message size. */
static void modify_and_evaluate(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    ucp_ep_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_EP_PARAM_FIELD_USER_DATA;
    mp.user_data = &mp;
    void *r = ucp_ep_modify_nb(p.ep[0], &mp);
    CT_OK(ct_wait(&p, r));
    mp.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    mp.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    r = ucp_ep_modify_nb(p.ep[0], &mp);
    CT_CHECK(UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM,
             "changing the error mode must be refused");

    double t[2];
    size_t sizes[2] = {8, 64 << 20};
    for (int i = 0; i < 2; i++) {
        ucp_ep_evaluate_perf_param_t ep;
        ucp_ep_evaluate_perf_attr_t ea;
        memset(&ep, 0, sizeof(ep));
        memset(&ea, 0, sizeof(ea));
        ep.field_mask = UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE;
        ep.message_size = sizes[i];
        ea.field_mask = UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME;
        CT_OK(ucp_ep_evaluate_perf(p.ep[0], &ep, &ea));
        t[i] = ea.estimated_time;
        CT_CHECK(t[i] > 0 && t[i] < 10, "estimate for %zu bytes: %g s", sizes[i], t[i]);
    }
    CT_CHECK(t[1] > t[0], "64 MiB estimated no slower than 8 B (%g, %g)", t[1], t[0]);
    ct_pair_fini(&p);
}

/* Client and server: a listener on one worker, and its connection handler. */
static ucp_conn_request_h sa_req;
static int sa_calls;
static void sa_on_conn(ucp_conn_request_h req, void *arg)
{
    (void)arg;
    sa_req = req;
    sa_calls++;
}

static ucs_status_t sa_connect(ucp_worker_h w, const struct sockaddr_in *at, struct ct_rec *err,
                               ucp_ep_h *ep)
{
    ucp_ep_params_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    cp.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    cp.sockaddr.addr = (const struct sockaddr *)at;
    cp.sockaddr.addrlen = sizeof(*at);
    cp.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    cp.err_handler.cb = ct_err_cb;
    cp.err_handler.arg = err;
    return ucp_ep_create(w, &cp, ep);
}

/* ucp_ep_create with a socket address returns at once, though the server's worker does
 * not progress; messages sent before the server accepts wait, and arrive in order once it
 * has. */
static void sockaddr_connect_returns_at_once(void)
{
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG);
    ucp_worker_h srv = ct_worker(ctx), cli = ct_worker(ctx);
    struct sockaddr_in at;
    ucp_listener_h l = ct_listen(srv, sa_on_conn, NULL, &at);
    struct ct_rec err;
    memset(&err, 0, sizeof(err));
    ucp_ep_h ep;
    double t0 = now();
    CT_OK(sa_connect(cli, &at, &err, &ep));
    double took = now() - t0;
    CT_CHECK(took < 0.5, "ucp_ep_create took %.2f s while the server did not progress", took);
    /* Sent before the server has seen the connection: a small and a large message. */
    static char big[200000], got_big[200000];
    for (size_t i = 0; i < sizeof(big); i++) big[i] = (char)(i * 7 + 1);
    char small[16] = "first", got_small[16] = {0};
    ucp_request_param_t sp = ct_send_param(NULL), sp2 = ct_send_param(NULL);
    void *s1 = ucp_tag_send_nbx(ep, small, sizeof(small), 5, &sp);
    void *s2 = ucp_tag_send_nbx(ep, big, sizeof(big), 6, &sp2);
    CT_CHECK(!UCS_PTR_IS_ERR(s1) && !UCS_PTR_IS_ERR(s2), "sends before the connection");
    for (int i = 0; i < 100; i++) ucp_worker_progress(cli);
    t0 = now();
    while (sa_calls == 0) {
        ucp_worker_progress(srv);
        ucp_worker_progress(cli);
        CT_CHECK(now() - t0 < 10, "no connection request");
    }
    ucp_ep_params_t ap;
    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ap.conn_request = sa_req;
    ucp_ep_h sep;
    CT_OK(ucp_ep_create(srv, &ap, &sep));
    ucp_request_param_t rp = ct_recv_param(NULL), rp2 = ct_recv_param(NULL);
    void *r1 = ucp_tag_recv_nbx(srv, got_small, sizeof(got_small), 5, ~0ull, &rp);
    void *r2 = ucp_tag_recv_nbx(srv, got_big, sizeof(got_big), 6, ~0ull, &rp2);
    void *reqs[4] = {s1, s2, r1, r2};
    t0 = now();
    for (int k = 0; k < 4; k++) {
        while (reqs[k] != NULL && ucp_request_check_status(reqs[k]) == UCS_INPROGRESS) {
            ucp_worker_progress(srv);
            ucp_worker_progress(cli);
            CT_CHECK(now() - t0 < 10, "operation %d did not complete", k);
        }
        if (reqs[k] != NULL) {
            CT_CHECK(ucp_request_check_status(reqs[k]) == UCS_OK, "operation %d", k);
            ucp_request_free(reqs[k]);
        }
    }
    CT_CHECK(strcmp(got_small, "first") == 0, "the small message: '%s'", got_small);
    CT_CHECK(memcmp(big, got_big, sizeof(big)) == 0, "the large message");
    CT_CHECK(err.calls == 0, "the error handler was called (status %d)", (int)err.status);
    ucp_listener_destroy(l);
    void *c1 = close_ep(ep, 1), *c2 = close_ep(sep, 1);
    (void)c1;
    (void)c2;
    ucp_worker_destroy(cli);
    ucp_worker_destroy(srv);
    ucp_cleanup(ctx);
}

/* A client whose server is gone (nobody listens on the port) learns it through its
 * error handler with an error status, or from ucp_ep_create itself; never a hang. */
static void sockaddr_refused_is_an_error(void)
{
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG);
    ucp_worker_h srv = ct_worker(ctx), cli = ct_worker(ctx);
    struct sockaddr_in at;
    ucp_listener_h l = ct_listen(srv, sa_on_conn, NULL, &at);
    ucp_listener_destroy(l);
    ucp_worker_destroy(srv);
    struct ct_rec err;
    memset(&err, 0, sizeof(err));
    ucp_ep_h ep;
    ucs_status_t st = sa_connect(cli, &at, &err, &ep);
    if (st == UCS_OK) {
        double t0 = now();
        while (err.calls == 0) {
            ucp_worker_progress(cli);
            CT_CHECK(now() - t0 < 10, "no error 10 s after connecting to a closed port");
        }
        CT_CHECK(err.status != UCS_OK, "the handler's status");
        if (getenv("CT_DEBUG")) fprintf(stderr, "    handler: status %d\n", (int)err.status);
        void *c = close_ep(ep, 1);
        (void)c;
    } else if (getenv("CT_DEBUG")) {
        fprintf(stderr, "    ucp_ep_create: status %d\n", (int)st);
    }
    ucp_worker_destroy(cli);
    ucp_cleanup(ctx);
}

const struct ct_test ct_endpoints[] = {
    {"sockaddr_connect_returns_at_once", "ucp_ep_create with a socket address returns at once while the server does not progress; messages sent before the server accepts arrive once it has", sockaddr_connect_returns_at_once},
    {"sockaddr_refused_is_an_error", "connecting to a port nobody listens on ends in an error: from ucp_ep_create, or through the error handler, within 10 s", sockaddr_refused_is_an_error},
    {"close_flush_delivers", "messages sent before a flush-mode ucp_ep_close_nbx arrive, and the close completes with UCS_OK", close_flush_delivers},
    {"close_force_cancels", "a force close completes at once and ends outstanding operations with UCS_ERR_CANCELED (PEER error mode)", close_force_cancels},
    {"dead_peer_fails_outstanding_sends", "PEER error mode: a dead peer ends outstanding sends with an error and calls the error handler once, inside progress", dead_peer_fails_outstanding_sends},
    {"modify_and_evaluate", "ucp_ep_modify_nb changes user data and refuses a new error mode; ucp_ep_evaluate_perf grows with the size", modify_and_evaluate},
    {"close_after_the_peer_left", "PEER error mode: closing an endpoint whose peer closed and exited completes", close_after_the_peer_left},
    {0},
};
