/* Worker wakeup: ucp_worker_signal from another thread. */
#include "contract.h"

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

const struct ct_test ct_worker_tests[] = {
    {"stream_poll_reports_ready_endpoints", "ucp_stream_worker_poll reports an endpoint with stream data waiting, with its user data, once per arrival to an idle stream", stream_poll_reports_ready_endpoints},
    {"signal_wakes_a_waiting_worker", "ucp_worker_signal from another thread ends a ucp_worker_wait; one sent before arming is not lost", signal_wakes_a_waiting_worker},
    {0},
};
