/* Tag matching: synchronous sends, probe with and without remove, msg_recv, ordering,
 * masks, truncation. */
#include "contract.h"

#include <string.h>
#include <unistd.h>

static void *send_tag(struct ct_pair *p, const void *b, size_t n, ucp_tag_t tag, int sync,
                      struct ct_rec *rec)
{
    ucp_request_param_t sp = ct_send_param(rec);
    void *r = sync ? ucp_tag_send_sync_nbx(p->ep[0], b, n, tag, &sp)
                   : ucp_tag_send_nbx(p->ep[0], b, n, tag, &sp);
    CT_CHECK(!UCS_PTR_IS_ERR(r), "send: %d", (int)UCS_PTR_STATUS(r));
    return r;
}

static void *recv_tag(struct ct_pair *p, void *b, size_t n, ucp_tag_t tag, ucp_tag_t mask,
                      struct ct_rec *rec)
{
    ucp_request_param_t rp = ct_recv_param(rec);
    void *r = ucp_tag_recv_nbx(p->w[1], b, n, tag, mask, &rp);
    CT_CHECK(!UCS_PTR_IS_ERR(r), "recv: %d", (int)UCS_PTR_STATUS(r));
    return r;
}

/* A synchronous send completes only once a receive matched it. */
static void sync_send_waits_for_match(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    size_t sizes[2] = {CT_SMALL, CT_LARGE};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        char *src = ct_pattern(n, k), *dst = calloc(1, n);
        struct ct_rec s = {0};
        void *sr = send_tag(&p, src, n, 0x80 + k, 1, &s);
        CT_CHECK(sr != NULL, "%zu B: a synchronous send completed before any receive", n);
        for (int i = 0; i < 200; i++) {
            ct_progress_n(&p, 50);
            usleep(100);
        }
        CT_CHECK(s.calls == 0 && ucp_request_check_status(sr) == UCS_INPROGRESS,
                 "%zu B: the synchronous send completed with no receive posted", n);
        void *rr = recv_tag(&p, dst, n, 0x80 + k, ~0ull, NULL);
        CT_OK(ct_wait(&p, sr));
        CT_OK(ct_wait(&p, rr));
        CT_CHECK(s.calls == 1 && s.status == UCS_OK, "%zu B: send callback", n);
        CT_CHECK(ct_pattern_ok(dst, n, k), "%zu B: data", n);
        free(src);
        free(dst);
    }
    ct_pair_fini(&p);
}

/* A synchronous send completes without further progress by the receiver once the
 * receiver's matching receive completed: an eager message's acknowledgement leaves inside
 * the call that posts the receive; a rendezvous one with the receive's completion. */
static void sync_ack_leaves_with_the_receive(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    size_t sizes[2] = {CT_SMALL, 100000};
    for (int k = 0; k < 2; k++) {
        for (int probe = 0; probe < 2; probe++) {
            size_t n = sizes[k];
            ucp_tag_t tag = 0x90 + 2 * k + probe;
            char *src = ct_pattern(n, k), *dst = calloc(1, n);
            void *sr = send_tag(&p, src, n, tag, 1, NULL);
            ucp_tag_recv_info_t info;
            ucp_tag_message_h m = NULL;
            for (int i = 0; i < 1000000 && m == NULL; i++) {
                m = ucp_tag_probe_nb(p.w[1], tag, ~0ull, probe, &info);
                if (m == NULL) ct_progress(&p);
            }
            CT_CHECK(m != NULL, "the message never arrived");
            ucp_request_param_t rp = ct_recv_param(NULL);
            void *rr = probe ? ucp_tag_msg_recv_nbx(p.w[1], dst, n, m, &rp)
                             : ucp_tag_recv_nbx(p.w[1], dst, n, tag, ~0ull, &rp);
            CT_CHECK(!UCS_PTR_IS_ERR(rr), "receive");
            /* The receiver progresses until its receive completes (an eager one has), and
             * from then on only the sender does. */
            while (rr != NULL && ucp_request_check_status(rr) == UCS_INPROGRESS)
                ucp_worker_progress(p.w[1]);
            for (int i = 0; i < 2000000 && sr != NULL &&
                            ucp_request_check_status(sr) == UCS_INPROGRESS; i++)
                ucp_worker_progress(p.w[0]);
            CT_CHECK(sr == NULL || ucp_request_check_status(sr) == UCS_OK,
                     "%zu B (%s): the synchronous send waits for the receiver's next progress",
                     n, probe ? "probe+msg_recv" : "recv");
            CT_OK(ct_wait(&p, sr));
            CT_OK(ct_wait(&p, rr));
            CT_CHECK(ct_pattern_ok(dst, n, k), "data");
            free(src);
            free(dst);
        }
    }
    ct_pair_fini(&p);
}

/* Probe without remove leaves the message for a later receive; with remove it takes it
 * (a second probe finds nothing) and ucp_tag_msg_recv_nbx receives it. */
static void probe_and_msg_recv(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    size_t sizes[2] = {1000, CT_LARGE};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        char *src = ct_pattern(n, 9 + k), *dst = calloc(1, n);
        ucp_tag_t tag = 0xa0 + k;
        void *sr = send_tag(&p, src, n, tag, 0, NULL);
        ucp_tag_recv_info_t info = {0};
        ucp_tag_message_h m = NULL;
        for (int i = 0; i < 1000000 && m == NULL; i++) {
            m = ucp_tag_probe_nb(p.w[1], tag, ~0ull, 0, &info);
            if (m == NULL) ct_progress(&p);
        }
        CT_CHECK(m != NULL, "%zu B: never arrived", n);
        CT_CHECK(info.sender_tag == tag && info.length == n, "probe info");
        CT_CHECK(ucp_tag_probe_nb(p.w[1], tag, ~0ull, 0, &info) != NULL,
                 "%zu B: probe without remove took the message", n);
        m = ucp_tag_probe_nb(p.w[1], tag, ~0ull, 1, &info);
        CT_CHECK(m != NULL, "probe with remove");
        CT_CHECK(ucp_tag_probe_nb(p.w[1], tag, ~0ull, 0, &info) == NULL,
                 "%zu B: the removed message is still there", n);
        struct ct_rec r = {0};
        ucp_request_param_t rp = ct_recv_param(&r);
        void *rr = ucp_tag_msg_recv_nbx(p.w[1], dst, n, m, &rp);
        CT_CHECK(!UCS_PTR_IS_ERR(rr), "msg_recv");
        CT_OK(ct_wait(&p, rr));
        CT_OK(ct_wait(&p, sr));
        CT_CHECK(rr == NULL || (r.calls == 1 && r.tag == tag && r.length == n), "callback info");
        CT_CHECK(ct_pattern_ok(dst, n, 9 + k), "%zu B: data", n);
        free(src);
        free(dst);
    }
    ct_pair_fini(&p);
}

/* Messages from one sender with one tag match receives in the order they were sent,
 * eager and rendezvous mixed, whether the receives come first or the messages. */
static void order_is_kept(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    enum { N = 24 };
    size_t sizes[3] = {8, 70000, CT_LARGE};
    for (int receives_first = 0; receives_first < 2; receives_first++) {
        char *src[N], *dst[N];
        void *sr[N], *rr[N];
        for (int i = 0; i < N; i++) {
            src[i] = ct_pattern(sizes[i % 3], i);
            dst[i] = calloc(1, CT_LARGE);
        }
        if (receives_first)
            for (int i = 0; i < N; i++) rr[i] = recv_tag(&p, dst[i], CT_LARGE, 0xb0, ~0ull, NULL);
        for (int i = 0; i < N; i++) sr[i] = send_tag(&p, src[i], sizes[i % 3], 0xb0, 0, NULL);
        if (!receives_first) {
            ct_progress_n(&p, 1000);
            for (int i = 0; i < N; i++) rr[i] = recv_tag(&p, dst[i], CT_LARGE, 0xb0, ~0ull, NULL);
        }
        for (int i = 0; i < N; i++) {
            CT_OK(ct_wait(&p, rr[i]));
            CT_CHECK(ct_pattern_ok(dst[i], sizes[i % 3], i),
                     "receive %d (%s) got another message", i,
                     receives_first ? "posted first" : "posted after");
        }
        for (int i = 0; i < N; i++) {
            CT_OK(ct_wait(&p, sr[i]));
            free(src[i]);
            free(dst[i]);
        }
    }
    ct_pair_fini(&p);
}

/* A receive matches when (sender tag & mask) == (tag & mask); mask 0 matches anything. */
static void masks(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char a[8] = "aaaaaaa", b[8] = "bbbbbbb", d1[8], d2[8];
    struct ct_rec r1 = {0}, r2 = {0};
    void *q1 = recv_tag(&p, d1, 8, 0x1234000000000000ull, 0xffff000000000000ull, &r1);
    void *q2 = recv_tag(&p, d2, 8, 0, 0, &r2);
    CT_OK(ct_wait(&p, send_tag(&p, a, 8, 0x99, 0, NULL)));          /* only q2 */
    CT_OK(ct_wait(&p, send_tag(&p, b, 8, 0x1234567800000001ull, 0, NULL))); /* q1 */
    CT_OK(ct_wait(&p, q1));
    CT_OK(ct_wait(&p, q2));
    CT_CHECK(memcmp(d1, b, 8) == 0 && r1.tag == 0x1234567800000001ull, "masked receive");
    CT_CHECK(memcmp(d2, a, 8) == 0 && r2.tag == 0x99, "wildcard receive");
    ct_pair_fini(&p);
}

/* A message longer than the receive buffer completes the receive with
 * UCS_ERR_MESSAGE_TRUNCATED. */
static void truncation(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    size_t sizes[2] = {64, CT_LARGE};
    for (int k = 0; k < 2; k++) {
        char *src = ct_pattern(sizes[k], 1), *dst = calloc(1, sizes[k]);
        struct ct_rec r = {0};
        void *rr = recv_tag(&p, dst, sizes[k] / 2, 0xc0 + k, ~0ull, &r);
        void *sr = send_tag(&p, src, sizes[k], 0xc0 + k, 0, NULL);
        ucs_status_t s = ct_wait(&p, rr);
        CT_CHECK(s == UCS_ERR_MESSAGE_TRUNCATED, "%zu B into %zu: status %d", sizes[k],
                 sizes[k] / 2, (int)s);
        ucs_status_t ss = ct_wait(&p, sr);
        (void)ss; /* the sender's status is not specified */
        free(src);
        free(dst);
    }
    ct_pair_fini(&p);
}

const struct ct_test ct_tag[] = {
    {"sync_send_waits_for_match", "a synchronous send completes only after a receive matched it (eager and rendezvous)", sync_send_waits_for_match},
    {"sync_ack_leaves_with_the_receive", "once the receive matching an arrived synchronous message completed (an eager one inside the posting call), the sender completes without further progress by the receiver", sync_ack_leaves_with_the_receive},
    {"probe_and_msg_recv", "probe without remove leaves the message; with remove it takes it and ucp_tag_msg_recv_nbx receives it", probe_and_msg_recv},
    {"order_is_kept", "messages of one sender and tag match receives in send order, eager and rendezvous mixed, receives posted before or after", order_is_kept},
    {"masks", "a receive matches when sender tag and its tag agree under its mask; mask 0 matches any tag", masks},
    {"truncation", "a message longer than the receive buffer ends the receive with UCS_ERR_MESSAGE_TRUNCATED", truncation},
    {0},
};
