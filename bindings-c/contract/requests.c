/* Request lifetime: free before and after completion, free inside the callback, status
 * queries, cancel, application-allocated requests, request_init. */
#include "contract.h"

#include <string.h>

/* Posts a receive for `tag` into buf with a callback recording into rec. */
static void *post_recv(struct ct_pair *p, void *buf, size_t n, ucp_tag_t tag, struct ct_rec *rec)
{
    ucp_request_param_t rp = ct_recv_param(rec);
    void *r = ucp_tag_recv_nbx(p->w[1], buf, n, tag, ~0ull, &rp);
    CT_CHECK(!UCS_PTR_IS_ERR(r), "recv_nbx failed: %d", (int)UCS_PTR_STATUS(r));
    return r;
}

static void *post_send(struct ct_pair *p, const void *buf, size_t n, ucp_tag_t tag,
                       struct ct_rec *rec)
{
    ucp_request_param_t sp = ct_send_param(rec);
    void *r = ucp_tag_send_nbx(p->ep[0], buf, n, tag, &sp);
    CT_CHECK(!UCS_PTR_IS_ERR(r), "send_nbx failed: %d", (int)UCS_PTR_STATUS(r));
    return r;
}

/* A receive freed before it completes still receives, and its callback never runs. */
static void free_before_completion_recv(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    size_t sizes[2] = {CT_SMALL, CT_LARGE};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        struct ct_rec rec = {0};
        char *src = ct_pattern(n, k + 1), *dst = calloc(1, n);
        void *r = post_recv(&p, dst, n, 100 + k, &rec);
        CT_CHECK(r != NULL, "a receive with nothing to match completed at once");
        ucp_request_free(r);
        CT_OK(ct_wait(&p, post_send(&p, src, n, 100 + k, NULL)));
        for (int i = 0; i < 100000 && !ct_pattern_ok(dst, n, k + 1); i++) ct_progress(&p);
        CT_CHECK(ct_pattern_ok(dst, n, k + 1), "%zu B: the freed receive lost its data", n);
        ct_progress_n(&p, 1000);
        CT_CHECK(rec.calls == 0, "%zu B: the callback of a freed receive ran", n);
        free(src);
        free(dst);
    }
    ct_pair_fini(&p);
}

/* A send freed before it completes is still delivered, and its callback never runs. */
static void free_before_completion_send(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec rec = {0}, rrec = {0};
    char *src = ct_pattern(CT_LARGE, 3), *dst = calloc(1, CT_LARGE);
    void *s = post_send(&p, src, CT_LARGE, 7, &rec);
    CT_CHECK(s != NULL, "a rendezvous send completed at once");
    ucp_request_free(s);
    void *r = post_recv(&p, dst, CT_LARGE, 7, &rrec);
    CT_OK(ct_wait(&p, r));
    ct_progress_n(&p, 1000);
    CT_CHECK(ct_pattern_ok(dst, CT_LARGE, 3), "data");
    CT_CHECK(rec.calls == 0, "the callback of a freed send ran");
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* The deprecated ucp_request_release, unlike ucp_request_free, keeps the callback: a
 * request released before it completes still reports its completion once. */
static void release_keeps_the_callback(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec rec = {0};
    char *src = ct_pattern(CT_LARGE, 9), *dst = calloc(1, CT_LARGE);
    void *r = post_recv(&p, dst, CT_LARGE, 10, &rec);
    CT_CHECK(r != NULL, "nothing to match, yet complete");
    ucp_request_release(r);
    CT_OK(ct_wait(&p, post_send(&p, src, CT_LARGE, 10, NULL)));
    for (int i = 0; i < 100000 && rec.calls == 0; i++) ct_progress(&p);
    ct_progress_n(&p, 100);
    CT_CHECK(rec.calls == 1 && rec.status == UCS_OK, "callback ran %d times, status %d",
             rec.calls, (int)rec.status);
    CT_CHECK(ct_pattern_ok(dst, CT_LARGE, 9), "data");
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* A callback may free its own request. */
static void free_inside_callback(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec srec = {.free_in_cb = 1}, rrec = {.free_in_cb = 1};
    char *src = ct_pattern(CT_LARGE, 4), *dst = calloc(1, CT_LARGE);
    void *s = post_send(&p, src, CT_LARGE, 8, &srec);
    void *r = post_recv(&p, dst, CT_LARGE, 8, &rrec);
    CT_CHECK(s != NULL && r != NULL, "a rendezvous completed at once");
    ct_wait_flag(&p, &srec.calls);
    ct_wait_flag(&p, &rrec.calls);
    ct_progress_n(&p, 100);
    CT_CHECK(srec.calls == 1 && rrec.calls == 1, "callbacks ran %d and %d times", srec.calls,
             rrec.calls);
    CT_CHECK(srec.status == UCS_OK && rrec.status == UCS_OK, "statuses %d %d", srec.status,
             rrec.status);
    CT_CHECK(ct_pattern_ok(dst, CT_LARGE, 4), "data");
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* Status queries: in progress until done, then the final status; is_completed agrees;
 * ucp_tag_recv_request_test reports the sender's tag and the length. */
static void status_queries(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char *src = ct_pattern(1000, 5), *dst = calloc(1, 4096);
    ucp_request_param_t rp = ct_recv_param(NULL);
    void *r = ucp_tag_recv_nbx(p.w[1], dst, 4096, 0x500, 0xff00, &rp);
    CT_CHECK(r != NULL && !UCS_PTR_IS_ERR(r), "recv_nbx");
    CT_CHECK(ucp_request_check_status(r) == UCS_INPROGRESS, "status before a message came");
    CT_CHECK(ucp_request_is_completed(r) == 0, "is_completed before a message came");
    ucp_tag_recv_info_t info;
    CT_CHECK(ucp_tag_recv_request_test(r, &info) == UCS_INPROGRESS, "recv_request_test");
    CT_OK(ct_wait(&p, post_send(&p, src, 1000, 0x5a7, NULL)));
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ct_progress(&p);
    CT_CHECK(ucp_request_check_status(r) == UCS_OK, "final status");
    CT_CHECK(ucp_request_is_completed(r) != 0, "is_completed after completion");
    memset(&info, 0, sizeof(info));
    CT_OK(ucp_tag_recv_request_test(r, &info));
    CT_CHECK(info.sender_tag == 0x5a7 && info.length == 1000, "info: tag %#llx length %zu",
             (unsigned long long)info.sender_tag, info.length);
    CT_CHECK(ct_pattern_ok(dst, 1000, 5), "data");
    ucp_request_free(r);
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* Freeing a completed request is allowed, and its callback ran exactly once. */
static void free_after_completion(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec rec = {0};
    char *src = ct_pattern(CT_LARGE, 6), *dst = calloc(1, CT_LARGE);
    void *r = post_recv(&p, dst, CT_LARGE, 9, &rec);
    void *s = post_send(&p, src, CT_LARGE, 9, NULL);
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ct_progress(&p);
    CT_CHECK(rec.calls == 1, "callback ran %d times before free", rec.calls);
    ucp_request_free(r);
    CT_OK(ct_wait(&p, s));
    ct_progress_n(&p, 100);
    CT_CHECK(rec.calls == 1, "callback ran %d times", rec.calls);
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* Cancelling a posted receive completes it with UCS_ERR_CANCELED through its callback;
 * it then matches nothing. */
static void cancel_posted_receive(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec rec = {0};
    char dst[16];
    void *r = post_recv(&p, dst, sizeof(dst), 11, &rec);
    CT_CHECK(r != NULL, "nothing to match, yet complete");
    ucp_request_cancel(p.w[1], r);
    for (int i = 0; i < 1000 && rec.calls == 0; i++) ct_progress(&p);
    CT_CHECK(rec.calls == 1, "callback ran %d times after cancel", rec.calls);
    CT_CHECK(rec.status == UCS_ERR_CANCELED, "status %d", (int)rec.status);
    CT_CHECK(ucp_request_check_status(r) == UCS_ERR_CANCELED, "check_status %d",
             (int)ucp_request_check_status(r));
    ucp_request_free(r);
    /* The cancelled receive took nothing: a new one gets the message. */
    char src[16] = "cancel-test-123";
    struct ct_rec rec2 = {0};
    void *s = post_send(&p, src, sizeof(src), 11, NULL);
    void *r2 = post_recv(&p, dst, sizeof(dst), 11, &rec2);
    CT_OK(ct_wait(&p, s));
    CT_OK(ct_wait(&p, r2));
    CT_CHECK(memcmp(dst, src, sizeof(src)) == 0, "data");
    ct_pair_fini(&p);
}

/* Cancelling a request that completed already changes nothing. */
static void cancel_after_completion(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec rec = {0};
    char src[8] = "abcdefg", dst[8];
    void *r = post_recv(&p, dst, sizeof(dst), 12, &rec);
    CT_OK(ct_wait(&p, post_send(&p, src, sizeof(src), 12, NULL)));
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ct_progress(&p);
    ucp_request_cancel(p.w[1], r);
    ct_progress_n(&p, 100);
    CT_CHECK(ucp_request_check_status(r) == UCS_OK, "status after a late cancel: %d",
             (int)ucp_request_check_status(r));
    CT_CHECK(rec.calls == 1 && rec.status == UCS_OK, "callback %d times, status %d", rec.calls,
             (int)rec.status);
    ucp_request_free(r);
    ct_pair_fini(&p);
}

/* Every request handed out went through request_init (its application area carries what
 * the init callback wrote), and request_size bytes of it are the application's. */
static void request_init_and_area(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char *dst = calloc(1, CT_LARGE), *src = ct_pattern(CT_LARGE, 7);
    for (int i = 0; i < 50; i++) {
        void *r = post_recv(&p, dst, CT_LARGE, 13, NULL);
        void *s = post_send(&p, src, CT_LARGE, 13, NULL);
        CT_CHECK(r != NULL && s != NULL, "rendezvous completed at once");
        struct ct_req_area *a = r, *b = s;
        CT_CHECK(a->magic == CT_REQ_MAGIC && b->magic == CT_REQ_MAGIC,
                 "round %d: request_init did not run on a request handed out", i);
        memset((char *)r + sizeof(*a), 0x5c, CT_REQ_AREA - sizeof(*a)); /* ours to write */
        CT_OK(ct_wait(&p, s));
        CT_OK(ct_wait(&p, r));
    }
    CT_CHECK(ct_pattern_ok(dst, CT_LARGE, 7), "data");
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* A request in application memory (UCP_OP_ATTR_FIELD_REQUEST, with
 * ucp_context_attr_t::request_size bytes for the library in front of it): an operation
 * that does not complete at once returns that pointer, and reports through it. */
static void application_allocated_request(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    ucp_context_attr_t ca;
    memset(&ca, 0, sizeof(ca));
    ca.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
    CT_OK(ucp_context_query(p.ctx, &ca));
    CT_CHECK(ca.request_size > 0 && ca.request_size < (1 << 20), "request_size %zu",
             ca.request_size);
    char *mem = aligned_alloc(64, (ca.request_size + 64 + 63) / 64 * 64 + 64);
    void *mine = mem + ca.request_size;
    char *dst = calloc(1, CT_LARGE), *src = ct_pattern(CT_LARGE, 8);
    struct ct_rec rec = {0};
    ucp_request_param_t rp = ct_recv_param(&rec);
    rp.op_attr_mask |= UCP_OP_ATTR_FIELD_REQUEST;
    rp.request = mine;
    void *r = ucp_tag_recv_nbx(p.w[1], dst, CT_LARGE, 14, ~0ull, &rp);
    CT_CHECK(r == mine, "returned %p, not the application's request %p", r, mine);
    void *s = post_send(&p, src, CT_LARGE, 14, NULL);
    ct_wait_flag(&p, &rec.calls);
    CT_CHECK(rec.req == mine && rec.status == UCS_OK, "callback: request %p status %d", rec.req,
             (int)rec.status);
    CT_CHECK(ucp_request_check_status(mine) == UCS_OK, "check_status on the application's request");
    CT_OK(ct_wait(&p, s));
    CT_CHECK(ct_pattern_ok(dst, CT_LARGE, 8), "data");
    free(mem);
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

const struct ct_test ct_requests[] = {
    {"free_before_completion_recv", "a receive freed before it completes still receives its data, and its callback is not invoked", free_before_completion_recv},
    {"free_before_completion_send", "a send freed before it completes is still delivered, and its callback is not invoked", free_before_completion_send},
    {"release_keeps_the_callback", "ucp_request_release (deprecated), unlike ucp_request_free, still invokes the callback of a request released before it completes", release_keeps_the_callback},
    {"free_inside_callback", "a completion callback may free its own request", free_inside_callback},
    {"free_after_completion", "a completed request is freed with ucp_request_free; its callback ran exactly once", free_after_completion},
    {"status_queries", "ucp_request_check_status/is_completed/tag_recv_request_test report in-progress until completion, then the final status, tag and length", status_queries},
    {"cancel_posted_receive", "ucp_request_cancel of an unmatched receive completes it with UCS_ERR_CANCELED through its callback, and it matches nothing after", cancel_posted_receive},
    {"cancel_after_completion", "ucp_request_cancel of a completed request changes neither its status nor its callback count", cancel_after_completion},
    {"request_init_and_area", "every request handed out went through request_init, and its request_size bytes belong to the application", request_init_and_area},
    {"application_allocated_request", "with UCP_OP_ATTR_FIELD_REQUEST an operation that does not complete at once returns the application's request and reports through it", application_allocated_request},
    {0},
};
