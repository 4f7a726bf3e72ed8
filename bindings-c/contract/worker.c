/* Worker wakeup: ucp_worker_signal from another thread. */
#include "contract.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ucp_worker_h wakeup_worker(ucp_context_h *ctx)
{
    *ctx = ct_context(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP);
    return ct_worker(*ctx);
}

/* Sleeps in ucp_worker_wait until something happens; returns the seconds it took. Gives
 * up (failing the test) after `limit` seconds of waits that return with nothing done. */
static double wait_once(ucp_worker_h w)
{
    double t0 = now();
    for (;;) {
        ucs_status_t s = ucp_worker_arm(w);
        if (s == UCS_ERR_BUSY) return now() - t0; /* work found: the signal, say */
        CT_CHECK(s == UCS_OK, "ucp_worker_arm: status %d", (int)s);
        CT_OK(ucp_worker_wait(w));
        return now() - t0;
    }
}

static void *signal_later(void *arg)
{
    usleep(200 * 1000);
    ucs_status_t s = ucp_worker_signal((ucp_worker_h)arg);
    return (void *)(intptr_t)s;
}

/* ucp_worker_signal, from another thread, wakes a worker sleeping in ucp_worker_wait; one
 * sent before the worker arms is not lost (arm reports UCS_ERR_BUSY, or the wait returns
 * at once). */
static void signal_wakes_a_waiting_worker(void)
{
    ucp_context_h ctx;
    ucp_worker_h w = wakeup_worker(&ctx);
    for (int i = 0; i < 100; i++) ucp_worker_progress(w);
    /* Drain what wire-up and creation left, so the next wait really sleeps. */
    while (ucp_worker_arm(w) == UCS_ERR_BUSY) ucp_worker_progress(w);

    pthread_t t;
    CT_CHECK(pthread_create(&t, NULL, signal_later, w) == 0, "pthread_create");
    double took = wait_once(w);
    void *r;
    pthread_join(t, &r);
    CT_CHECK((ucs_status_t)(intptr_t)r == UCS_OK, "ucp_worker_signal: status %d",
             (int)(intptr_t)r);
    CT_CHECK(took < 5, "the wait did not end on the signal (%.2f s)", took);

    /* Signalled first: the next arm and wait do not sleep. */
    CT_OK(ucp_worker_signal(w));
    took = wait_once(w);
    CT_CHECK(took < 1, "a signal before arming was lost (%.2f s)", took);

    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
}

/* Two workers of one context with stream and tag, connected both ways; ep[1] carries
 * `ud` as its user data. */
static void stream_pair(ucp_context_h *ctx, ucp_worker_h w[2], ucp_ep_h ep[2], void *ud)
{
    *ctx = ct_context(UCP_FEATURE_TAG | UCP_FEATURE_STREAM);
    ucp_address_t *a[2];
    size_t len[2];
    for (int i = 0; i < 2; i++) {
        w[i] = ct_worker(*ctx);
        CT_OK(ucp_worker_get_address(w[i], &a[i], &len[i]));
    }
    for (int i = 0; i < 2; i++) {
        ucp_ep_params_t p;
        memset(&p, 0, sizeof(p));
        p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_USER_DATA;
        p.address = a[1 - i];
        p.user_data = i == 1 ? ud : NULL;
        CT_OK(ucp_ep_create(w[i], &p, &ep[i]));
    }
    for (int i = 0; i < 2; i++) ucp_worker_release_address(w[i], a[i]);
}

static void progress2(ucp_worker_h w[2], int n)
{
    for (int i = 0; i < n; i++) {
        ucp_worker_progress(w[0]);
        ucp_worker_progress(w[1]);
    }
}

/* Polls w until it reports an endpoint or `secs` pass; returns the count. */
static ssize_t poll_ready(ucp_worker_h w[2], ucp_stream_poll_ep_t *out, size_t max, double secs)
{
    double t0 = now();
    for (;;) {
        progress2(w, 10);
        ssize_t n = ucp_stream_worker_poll(w[1], out, max, 0);
        if (n != 0 || now() - t0 > secs) return n;
    }
}

static void send_stream(ucp_worker_h w[2], ucp_ep_h ep, const char *s)
{
    ucp_request_param_t sp;
    memset(&sp, 0, sizeof(sp));
    void *r = ucp_stream_send_nbx(ep, s, strlen(s), &sp);
    CT_CHECK(!UCS_PTR_IS_ERR(r), "stream send");
    double t0 = now();
    while (r != NULL && ucp_request_check_status(r) == UCS_INPROGRESS) {
        progress2(w, 1);
        CT_CHECK(now() - t0 < 10, "stream send did not complete");
    }
    if (r != NULL) ucp_request_free(r);
}

/* ucp_stream_worker_poll reports an endpoint whose stream has data no receive took, with
 * the endpoint's user data, once per arrival of data to an idle stream. */
static void stream_poll_reports_ready_endpoints(void)
{
    ucp_context_h ctx;
    ucp_worker_h w[2];
    ucp_ep_h ep[2];
    int marker;
    stream_pair(&ctx, w, ep, &marker);
    ucp_stream_poll_ep_t out[4];
    memset(out, 0, sizeof(out));
    CT_CHECK(ucp_stream_worker_poll(w[1], out, 4, 0) == 0, "nothing sent yet");
    send_stream(w, ep[0], "hello");
    ssize_t n = poll_ready(w, out, 4, 10);
    CT_CHECK(n == 1, "ucp_stream_worker_poll: %zd endpoints", n);
    CT_CHECK(out[0].ep == ep[1], "the endpoint reported is not the receiving one");
    CT_CHECK(out[0].user_data == &marker, "the endpoint's user data");
    progress2(w, 100);
    CT_CHECK(ucp_stream_worker_poll(w[1], out, 4, 0) == 0, "reported twice for one arrival");
    /* Take the bytes; new data makes the endpoint ready again. */
    char buf[16] = {0};
    size_t got = 0;
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_STREAM_RECV_FLAG_WAITALL;
    void *r = ucp_stream_recv_nbx(ep[1], buf, 5, &got, &rp);
    CT_CHECK(!UCS_PTR_IS_ERR(r), "stream receive");
    double t0 = now();
    while (r != NULL && ucp_request_check_status(r) == UCS_INPROGRESS) {
        progress2(w, 1);
        CT_CHECK(now() - t0 < 10, "stream receive did not complete");
    }
    if (r != NULL) ucp_request_free(r);
    CT_CHECK(memcmp(buf, "hello", 5) == 0, "stream bytes: '%s'", buf);
    send_stream(w, ep[0], "again");
    n = poll_ready(w, out, 4, 10);
    CT_CHECK(n == 1 && out[0].ep == ep[1], "not reported after new data: %zd", n);
    for (int i = 0; i < 2; i++) ucp_ep_destroy(ep[i]);
    for (int i = 0; i < 2; i++) ucp_worker_destroy(w[i]);
    ucp_cleanup(ctx);
}

/* A worker asleep on ucp_worker_get_efd's descriptor (poll(2) in another thread, after
 * progress until ucp_worker_arm says UCS_OK) wakes for each kind of event: a tag message
 * from another worker, a ucp_worker_signal, and a connection request to its listener.
 * Once woken, the thread progresses the worker until told to stop. Over the default
 * transports and over tcp alone. */
struct sleeper {
    ucp_worker_h w;
    volatile int woke, stop;
    double slept;
};

static void *sleep_on_efd(void *arg)
{
    struct sleeper *s = arg;
    int fd = -1;
    if (ucp_worker_get_efd(s->w, &fd) != UCS_OK) return (void *)1;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    double t0 = now();
    int r = poll(&pfd, 1, 8000);
    s->slept = now() - t0;
    s->woke = r > 0;
    while (!s->stop) ucp_worker_progress(s->w);
    return NULL;
}

/* Progresses w until arm says it may sleep, then starts a sleeper on it. */
static void put_to_sleep(struct sleeper *s, ucp_worker_h w, pthread_t *t)
{
    memset(s, 0, sizeof(*s));
    s->w = w;
    double t0 = now();
    ucs_status_t st;
    while ((st = ucp_worker_arm(w)) == UCS_ERR_BUSY) {
        ucp_worker_progress(w);
        CT_CHECK(now() - t0 < 10, "ucp_worker_arm said BUSY for 10 s");
    }
    CT_CHECK(st == UCS_OK, "ucp_worker_arm: status %d", (int)st);
    CT_CHECK(pthread_create(t, NULL, sleep_on_efd, s) == 0, "pthread_create");
    usleep(100 * 1000); /* let it reach poll() */
}

static void wake_check(struct sleeper *s, pthread_t t, const char *what)
{
    (void)t;
    if (getenv("CT_DEBUG")) fprintf(stderr, "    waiting for %s\n", what);
    double t0 = now();
    while (!s->woke && now() - t0 < 8) usleep(1000);
    CT_CHECK(s->woke, "%s did not wake the worker (slept %.2f s)", what, s->slept);
}

static void stop_sleeper(struct sleeper *s, pthread_t t)
{
    s->stop = 1;
    pthread_join(t, NULL);
}

static struct ct_rec conn_rec;
static ucp_conn_request_h conn_req;
static void on_conn(ucp_conn_request_h req, void *arg)
{
    (void)arg;
    conn_req = req;
    conn_rec.calls++;
}

static void efd_wakes_for(const char *tls)
{
    if (tls != NULL) setenv("UCX_TLS", tls, 1);
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP | UCP_FEATURE_STREAM);
    ucp_worker_h w[3];
    for (int i = 0; i < 3; i++) w[i] = ct_worker(ctx);
    ucp_address_t *a;
    size_t alen;
    CT_OK(ucp_worker_get_address(w[1], &a, &alen));
    ucp_ep_h ep = ct_ep(w[0], a, 0, NULL);
    ucp_worker_release_address(w[1], a);
    /* One message first, so that the connection is made before the worker sleeps (a
     * first message over tcp makes its connection on the way). */
    {
        char x = 'x', y = 0;
        ucp_request_param_t p1 = ct_recv_param(NULL), p2 = ct_send_param(NULL);
        void *r1 = ucp_tag_recv_nbx(w[1], &y, 1, 1, ~0ull, &p1);
        void *r2 = ucp_tag_send_nbx(ep, &x, 1, 1, &p2);
        double t1 = now();
        while ((r1 != NULL && ucp_request_check_status(r1) == UCS_INPROGRESS) ||
               (r2 != NULL && ucp_request_check_status(r2) == UCS_INPROGRESS)) {
            ucp_worker_progress(w[0]);
            ucp_worker_progress(w[1]);
            CT_CHECK(now() - t1 < 10, "the first message did not arrive");
        }
        if (r1 != NULL) ucp_request_free(r1);
        if (r2 != NULL) ucp_request_free(r2);
    }

    /* A tag message. */
    struct sleeper s;
    pthread_t t;
    char msg[64] = "wake up", got[64] = {0};
    ucp_request_param_t rp = ct_recv_param(NULL), sp = ct_send_param(NULL);
    void *rr = ucp_tag_recv_nbx(w[1], got, sizeof(got), 7, ~0ull, &rp);
    CT_CHECK(!UCS_PTR_IS_ERR(rr), "tag recv");
    put_to_sleep(&s, w[1], &t);
    void *sr = ucp_tag_send_nbx(ep, msg, sizeof(msg), 7, &sp);
    CT_CHECK(!UCS_PTR_IS_ERR(sr), "tag send");
    double t0 = now();
    while (!s.woke && now() - t0 < 8) ucp_worker_progress(w[0]);
    wake_check(&s, t, "a tag message");
    while (sr != NULL && ucp_request_check_status(sr) == UCS_INPROGRESS) ucp_worker_progress(w[0]);
    if (sr != NULL) ucp_request_free(sr);
    while (ucp_request_check_status(rr) == UCS_INPROGRESS) usleep(1000);
    ucp_request_free(rr);
    stop_sleeper(&s, t);
    CT_CHECK(strcmp(got, "wake up") == 0, "the message: '%s'", got);

    /* A signal. */
    put_to_sleep(&s, w[1], &t);
    CT_OK(ucp_worker_signal(w[1]));
    wake_check(&s, t, "ucp_worker_signal");
    stop_sleeper(&s, t);

    /* A connection request to w[1]'s listener from w[2]. */
    struct sockaddr_in at;
    ucp_listener_h l = ct_listen(w[1], on_conn, NULL, &at);
    put_to_sleep(&s, w[1], &t);
    ucp_ep_params_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    cp.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    cp.sockaddr.addr = (const struct sockaddr *)&at;
    cp.sockaddr.addrlen = sizeof(struct sockaddr_in);
    ucp_ep_h client;
    CT_OK(ucp_ep_create(w[2], &cp, &client));
    t0 = now();
    while (!s.woke && now() - t0 < 8) ucp_worker_progress(w[2]);
    wake_check(&s, t, "a connection request");
    t0 = now();
    while (conn_rec.calls == 0 && now() - t0 < 8) ucp_worker_progress(w[2]);
    CT_CHECK(conn_rec.calls == 1, "no connection request reached the handler");
    if (getenv("CT_DEBUG")) fprintf(stderr, "    connection request handled\n");
    stop_sleeper(&s, t);

    /* Accepted, and connected: the server side answers, the client side progresses. */
    ucp_ep_params_t ap;
    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ap.conn_request = conn_req;
    ucp_ep_h server_ep;
    CT_OK(ucp_ep_create(w[1], &ap, &server_ep));
    if (getenv("CT_DEBUG")) fprintf(stderr, "    accepted\n");

    /* The client's first message reaches the server (the connection is whole). */
    {
        char x = 'c', y = 0;
        ucp_request_param_t p1 = ct_recv_param(NULL), p2 = ct_send_param(NULL);
        void *r1 = ucp_tag_recv_nbx(w[1], &y, 1, 2, ~0ull, &p1);
        void *r2 = ucp_tag_send_nbx(client, &x, 1, 2, &p2);
        double t1 = now();
        while ((r1 != NULL && ucp_request_check_status(r1) == UCS_INPROGRESS) ||
               (r2 != NULL && ucp_request_check_status(r2) == UCS_INPROGRESS)) {
            for (int i = 0; i < 3; i++) ucp_worker_progress(w[i]);
            CT_CHECK(now() - t1 < 10, "the client's message did not arrive");
        }
        if (r1 != NULL) ucp_request_free(r1);
        if (r2 != NULL) ucp_request_free(r2);
        CT_CHECK(y == 'c', "the client's message");
    }
    ucp_listener_destroy(l);
    ucp_ep_h eps[3] = {server_ep, client, ep};
    for (int k = 0; k < 3; k++) {
        ucp_request_param_t cp2;
        memset(&cp2, 0, sizeof(cp2));
        cp2.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        cp2.flags = UCP_EP_CLOSE_FLAG_FORCE;
        void *r = ucp_ep_close_nbx(eps[k], &cp2);
        double t1 = now();
        while (r != NULL && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS) {
            for (int i = 0; i < 3; i++) ucp_worker_progress(w[i]);
            CT_CHECK(now() - t1 < 10, "closing an endpoint took 10 s");
        }
        if (r != NULL && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
    }
    for (int i = 0; i < 3; i++) ucp_worker_destroy(w[i]);
    ucp_cleanup(ctx);
}

static void efd_wakes_for_every_event(void)
{
    efd_wakes_for(NULL);
}

static void efd_wakes_for_every_event_over_tcp(void)
{
    efd_wakes_for("tcp");
}

/* Two workers of UCS_THREAD_MODE_MULTI, each driven by its own thread as UCXX drives
 * one (progress until nothing moves, ucp_worker_arm, then sleep on ucp_worker_get_efd's
 * descriptor), while the main thread posts a 16 MiB stream send and its receive: work
 * that a call from another thread leaves behind (a send larger than the transport takes
 * at once) wakes the sleeping thread, and the bytes arrive whole. */
struct driver {
    ucp_worker_h w;
    volatile int stop;
};

static void *drive(void *arg)
{
    struct driver *d = arg;
    int fd = -1;
    if (ucp_worker_get_efd(d->w, &fd) != UCS_OK) return (void *)1;
    while (!d->stop) {
        while (ucp_worker_progress(d->w) != 0) {
        }
        if (ucp_worker_arm(d->w) != UCS_OK) continue;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        /* Longer than the test waits: a missed wakeup fails it. Stopped by a signal. */
        poll(&pfd, 1, 30000);
    }
    return NULL;
}

static void sleeping_progress_threads_move_a_large_stream(void)
{
    ucp_context_h ctx = ct_context(UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP);
    ucp_worker_h w[2];
    ucp_address_t *a[2];
    size_t alen[2];
    for (int i = 0; i < 2; i++) {
        ucp_worker_params_t wp;
        memset(&wp, 0, sizeof(wp));
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_MULTI;
        CT_OK(ucp_worker_create(ctx, &wp, &w[i]));
        CT_OK(ucp_worker_get_address(w[i], &a[i], &alen[i]));
    }
    ucp_ep_h ep = ct_ep(w[0], a[1], 0, NULL);
    ucp_ep_h back = ct_ep(w[1], a[0], 0, NULL);
    for (int i = 0; i < 2; i++) ucp_worker_release_address(w[i], a[i]);
    struct driver d[2] = {{.w = w[0]}, {.w = w[1]}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CT_CHECK(pthread_create(&t[i], NULL, drive, &d[i]) == 0, "pthread_create");
    usleep(100 * 1000); /* both asleep */
    const size_t n = 16u << 20;
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    CT_CHECK(src != NULL && dst != NULL, "malloc");
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 31 + 7);
    ucp_request_param_t rp, sp;
    memset(&rp, 0, sizeof(rp));
    memset(&sp, 0, sizeof(sp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_STREAM_RECV_FLAG_WAITALL;
    size_t got = 0;
    void *rr = ucp_stream_recv_nbx(back, dst, n, &got, &rp);
    CT_CHECK(!UCS_PTR_IS_ERR(rr), "stream recv");
    void *sr = ucp_stream_send_nbx(ep, src, n, &sp);
    CT_CHECK(!UCS_PTR_IS_ERR(sr), "stream send");
    double t0 = now();
    while ((sr != NULL && ucp_request_check_status(sr) == UCS_INPROGRESS) ||
           (rr != NULL && ucp_request_check_status(rr) == UCS_INPROGRESS)) {
        CT_CHECK(now() - t0 < 20, "16 MiB took more than 20 s: send %s, receive %s",
                 sr != NULL && ucp_request_check_status(sr) == UCS_INPROGRESS ? "pending" : "done",
                 rr != NULL && ucp_request_check_status(rr) == UCS_INPROGRESS ? "pending" : "done");
        usleep(1000);
    }
    if (sr != NULL) {
        CT_CHECK(ucp_request_check_status(sr) == UCS_OK, "send status");
        ucp_request_free(sr);
    }
    if (rr != NULL) {
        CT_CHECK(ucp_request_check_status(rr) == UCS_OK, "receive status");
        ucp_request_free(rr);
    }
    CT_CHECK(memcmp(src, dst, n) == 0, "the stream's bytes changed on the way");
    for (int i = 0; i < 2; i++) {
        d[i].stop = 1;
        CT_OK(ucp_worker_signal(w[i]));
        pthread_join(t[i], NULL);
    }
    ucp_ep_h eps[2] = {ep, back};
    for (int k = 0; k < 2; k++) {
        ucp_request_param_t cp;
        memset(&cp, 0, sizeof(cp));
        cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        void *r = ucp_ep_close_nbx(eps[k], &cp);
        double t1 = now();
        while (r != NULL && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS) {
            ucp_worker_progress(w[0]);
            ucp_worker_progress(w[1]);
            CT_CHECK(now() - t1 < 10, "closing an endpoint took 10 s");
        }
        if (r != NULL && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
    }
    free(src);
    free(dst);
    for (int i = 0; i < 2; i++) ucp_worker_destroy(w[i]);
    ucp_cleanup(ctx);
}

/* With UCX_TLS=self alone a worker still has a wakeup descriptor: ucp_worker_get_efd
 * succeeds, arm says UCS_OK when idle, and a signal wakes a sleeper on it. */
static void efd_with_self_only(void)
{
    setenv("UCX_TLS", "self", 1);
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP);
    ucp_worker_h w = ct_worker(ctx);
    int fd = -1;
    CT_OK(ucp_worker_get_efd(w, &fd));
    CT_CHECK(fd >= 0, "no descriptor");
    struct sleeper s;
    pthread_t t;
    put_to_sleep(&s, w, &t);
    CT_OK(ucp_worker_signal(w));
    wake_check(&s, t, "ucp_worker_signal");
    stop_sleeper(&s, t);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
}

const struct ct_test ct_worker_tests[] = {
    {"stream_poll_reports_ready_endpoints", "ucp_stream_worker_poll reports an endpoint with stream data waiting, with its user data, once per arrival to an idle stream", stream_poll_reports_ready_endpoints},
    {"signal_wakes_a_waiting_worker", "ucp_worker_signal from another thread ends a ucp_worker_wait; one sent before arming is not lost", signal_wakes_a_waiting_worker},
    {"efd_wakes_for_every_event", "a worker asleep on ucp_worker_get_efd's descriptor after ucp_worker_arm wakes for a tag message, a signal and a connection request to its listener", efd_wakes_for_every_event},
    {"sleeping_progress_threads_move_a_large_stream", "a 16 MiB stream send and receive posted by the main thread complete while each worker's own thread sleeps on its descriptor whenever ucp_worker_arm lets it", sleeping_progress_threads_move_a_large_stream},
    {"efd_wakes_for_every_event_over_tcp", "the same with UCX_TLS=tcp", efd_wakes_for_every_event_over_tcp},
    {"efd_with_self_only", "with UCX_TLS=self a worker has a wakeup descriptor, and a signal wakes a sleeper on it", efd_with_self_only},
    {0},
};
