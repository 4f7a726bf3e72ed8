/* Callbacks: their arguments, when they run, and immediate completion
 * (UCP_OP_ATTR_FLAG_NO_IMM_CMPL, UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL, RECV_INFO). */
#include "contract.h"

#include <string.h>

/* Until the receiving worker holds a message with `tag` unexpected. */
static void wait_unexpected(struct ct_pair *p, ucp_tag_t tag)
{
    ucp_tag_recv_info_t info;
    for (int i = 0; i < 1000000; i++) {
        if (ucp_tag_probe_nb(p->w[1], tag, ~0ull, 0, &info) != NULL) return;
        ct_progress(p);
    }
    CT_FAIL("message %#llx never arrived", (unsigned long long)tag);
}

/* Send and receive callbacks get their request, the status, the tag and length (receive)
 * and the user data, once. */
static void callback_arguments(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec s = {0}, r = {0};
    char *src = ct_pattern(CT_LARGE, 1), *dst = calloc(1, CT_LARGE);
    ucp_request_param_t sp = ct_send_param(&s), rp = ct_recv_param(&r);
    void *rr = ucp_tag_recv_nbx(p.w[1], dst, CT_LARGE, 0x1200, 0xff00, &rp);
    void *sr = ucp_tag_send_nbx(p.ep[0], src, CT_LARGE, 0x12ab, &sp);
    CT_CHECK(rr != NULL && sr != NULL && !UCS_PTR_IS_ERR(rr) && !UCS_PTR_IS_ERR(sr), "post");
    ct_wait_flag(&p, &s.calls);
    ct_wait_flag(&p, &r.calls);
    ct_progress_n(&p, 100);
    CT_CHECK(s.calls == 1 && s.req == sr && s.status == UCS_OK && s.user_data == &s,
             "send callback: %d calls, req %p (want %p), status %d", s.calls, s.req, sr,
             (int)s.status);
    CT_CHECK(r.calls == 1 && r.req == rr && r.status == UCS_OK && r.user_data == &r,
             "recv callback: %d calls, req %p (want %p), status %d", r.calls, r.req, rr,
             (int)r.status);
    CT_CHECK(r.tag == 0x12ab && r.length == CT_LARGE, "recv info: tag %#llx length %zu",
             (unsigned long long)r.tag, r.length);
    CT_CHECK(ct_pattern_ok(dst, CT_LARGE, 1), "data");
    ucp_request_free(sr);
    ucp_request_free(rr);
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

static struct ct_rec legacy_send, legacy_recv;
static void legacy_send_cb(void *req, ucs_status_t st)
{
    legacy_send.calls++;
    legacy_send.status = st;
    legacy_send.req = req;
}
static void legacy_recv_cb(void *req, ucs_status_t st, ucp_tag_recv_info_t *info)
{
    legacy_recv.calls++;
    legacy_recv.status = st;
    legacy_recv.req = req;
    legacy_recv.tag = info->sender_tag;
    legacy_recv.length = info->length;
}

/* The _nb calls' callbacks get the request, the status and (receive) the info. */
static void legacy_callbacks(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char *src = ct_pattern(CT_LARGE, 2), *dst = calloc(1, CT_LARGE);
    void *rr = ucp_tag_recv_nb(p.w[1], dst, CT_LARGE, ucp_dt_make_contig(1), 0x77, ~0ull,
                               legacy_recv_cb);
    void *sr = ucp_tag_send_nb(p.ep[0], src, CT_LARGE, ucp_dt_make_contig(1), 0x77,
                               legacy_send_cb);
    CT_CHECK(rr != NULL && sr != NULL && !UCS_PTR_IS_ERR(rr) && !UCS_PTR_IS_ERR(sr), "post");
    ct_wait_flag(&p, &legacy_send.calls);
    ct_wait_flag(&p, &legacy_recv.calls);
    CT_CHECK(legacy_send.req == sr && legacy_send.status == UCS_OK, "send callback");
    CT_CHECK(legacy_recv.req == rr && legacy_recv.status == UCS_OK &&
                 legacy_recv.tag == 0x77 && legacy_recv.length == CT_LARGE,
             "recv callback");
    CT_CHECK(ct_pattern_ok(dst, CT_LARGE, 2), "data");
    ucp_request_free(sr);
    ucp_request_free(rr);
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* A callback of an operation that did not complete at once runs inside
 * ucp_worker_progress of its worker, not before. */
static void callbacks_run_in_progress(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec r = {0};
    char src[8] = "1234567", dst[8];
    ucp_request_param_t rp = ct_recv_param(&r), sp = ct_send_param(NULL);
    void *rr = ucp_tag_recv_nbx(p.w[1], dst, 8, 0x31, ~0ull, &rp);
    CT_CHECK(rr != NULL, "nothing to match, yet complete");
    void *sr = ucp_tag_send_nbx(p.ep[0], src, 8, 0x31, &sp);
    for (int i = 0; i < 1000; i++) {
        ct_in_progress = 1;
        ucp_worker_progress(p.w[0]); /* the sender only */
        ct_in_progress = 0;
    }
    CT_CHECK(r.calls == 0, "the receive's callback ran without its worker's progress");
    ct_wait_flag(&p, &r.calls);
    CT_CHECK(r.inside_progress == 1, "the callback ran outside ucp_worker_progress");
    CT_OK(ct_wait(&p, sr));
    ucp_request_free(rr);
    ct_pair_fini(&p);
}

/* A send that completes at once returns NULL (UCS_OK) and its callback is not invoked. */
static void immediate_send_no_callback(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec s = {0};
    char src[8] = "abcdefg", dst[8];
    ucp_request_param_t sp = ct_send_param(&s);
    int immediate = 0;
    for (int i = 0; i < 10; i++) {
        void *sr = ucp_tag_send_nbx(p.ep[0], src, 8, 0x40 + i, &sp);
        CT_CHECK(!UCS_PTR_IS_ERR(sr), "send");
        if (sr == NULL) {
            immediate++;
            ct_progress_n(&p, 100);
            CT_CHECK(s.calls == 0, "callback of an immediately completed send ran");
        } else {
            CT_OK(ct_wait(&p, sr));
            s.calls = 0;
        }
        ucp_request_param_t rp = ct_recv_param(NULL);
        CT_OK(ct_wait(&p, ucp_tag_recv_nbx(p.w[1], dst, 8, 0x40 + i, ~0ull, &rp)));
    }
    CT_CHECK(immediate > 0, "no 8-byte send completed at once (nothing was tested)");
    ct_pair_fini(&p);
}

/* UCP_OP_ATTR_FLAG_NO_IMM_CMPL: a request is returned even when the operation could
 * complete at once, and its callback runs once with UCS_OK. */
static void no_imm_cmpl(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct ct_rec s = {0}, r = {0};
    char src[8] = "abcdefg", dst[8] = {0};
    ucp_request_param_t sp = ct_send_param(&s);
    sp.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    void *sr = ucp_tag_send_nbx(p.ep[0], src, 8, 0x50, &sp);
    CT_CHECK(sr != NULL && !UCS_PTR_IS_ERR(sr), "send with NO_IMM_CMPL returned %p", sr);
    ct_wait_flag(&p, &s.calls);
    CT_CHECK(s.calls == 1 && s.status == UCS_OK && s.req == sr, "send callback");
    ucp_request_free(sr);
    /* A receive of a message that is there already. */
    wait_unexpected(&p, 0x50);
    ucp_tag_recv_info_t info;
    ucp_request_param_t rp = ct_recv_param(&r);
    rp.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_RECV_INFO;
    rp.recv_info.tag_info = &info;
    void *rr = ucp_tag_recv_nbx(p.w[1], dst, 8, 0x50, ~0ull, &rp);
    CT_CHECK(rr != NULL && !UCS_PTR_IS_ERR(rr), "recv with NO_IMM_CMPL returned %p", rr);
    ct_wait_flag(&p, &r.calls);
    CT_CHECK(r.calls == 1 && r.status == UCS_OK && r.tag == 0x50 && r.length == 8,
             "recv callback");
    CT_CHECK(memcmp(src, dst, 8) == 0, "data");
    ucp_request_free(rr);
    ct_pair_fini(&p);
}

/* UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: an operation that can complete at once does (NULL);
 * one that cannot fails with UCS_ERR_NO_RESOURCE and sends nothing. */
static void force_imm_cmpl(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char src[8] = "abcdefg", dst[8];
    ucp_request_param_t sp = ct_send_param(NULL);
    sp.op_attr_mask |= UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    void *sr = ucp_tag_send_nbx(p.ep[0], src, 8, 0x60, &sp);
    CT_CHECK(sr == NULL, "an 8-byte send with FORCE_IMM_CMPL returned %p", sr);
    ucp_request_param_t rp = ct_recv_param(NULL);
    CT_OK(ct_wait(&p, ucp_tag_recv_nbx(p.w[1], dst, 8, 0x60, ~0ull, &rp)));
    char *big = ct_pattern(CT_LARGE, 3);
    sr = ucp_tag_send_nbx(p.ep[0], big, CT_LARGE, 0x61, &sp);
    CT_CHECK(UCS_PTR_IS_ERR(sr) && UCS_PTR_STATUS(sr) == UCS_ERR_NO_RESOURCE,
             "a rendezvous send with FORCE_IMM_CMPL returned %p", sr);
    ct_progress_n(&p, 2000);
    ucp_tag_recv_info_t info;
    CT_CHECK(ucp_tag_probe_nb(p.w[1], 0x61, ~0ull, 0, &info) == NULL,
             "the refused send reached the peer");
    free(big);
    ct_pair_fini(&p);
}

/* A receive of an eager message that arrived already completes at once: NULL, the data
 * in place, no callback; with RECV_INFO, the info is filled. */
static void immediate_receive(int with_info)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    for (int probe = 0; probe < 2; probe++) {
        struct ct_rec r = {0};
        ucp_tag_t tag = 0x70 + probe;
        char src[8] = "abcdefg", dst[8] = {0};
        ucp_request_param_t sp = ct_send_param(NULL);
        CT_OK(ct_wait(&p, ucp_tag_send_nbx(p.ep[0], src, 8, tag, &sp)));
        wait_unexpected(&p, tag);
        ucp_tag_recv_info_t info = {0};
        ucp_request_param_t rp = ct_recv_param(&r);
        if (with_info) {
            rp.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
            rp.recv_info.tag_info = &info;
        }
        void *rr;
        if (probe) {
            ucp_tag_message_h m = ucp_tag_probe_nb(p.w[1], tag, ~0ull, 1, &info);
            CT_CHECK(m != NULL, "probe");
            memset(&info, 0, sizeof(info));
            rr = ucp_tag_msg_recv_nbx(p.w[1], dst, 8, m, &rp);
        } else {
            rr = ucp_tag_recv_nbx(p.w[1], dst, 8, tag, ~0ull, &rp);
        }
        CT_CHECK(rr == NULL, "%s returned %p, not NULL (callback %d calls)",
                 probe ? "msg_recv_nbx" : "recv_nbx", rr, r.calls);
        if (with_info)
            CT_CHECK(info.sender_tag == tag && info.length == 8, "info: tag %#llx length %zu",
                     (unsigned long long)info.sender_tag, info.length);
        CT_CHECK(memcmp(src, dst, 8) == 0, "data");
        ct_progress_n(&p, 100);
        CT_CHECK(r.calls == 0, "callback ran for an immediate completion");
    }
    ct_pair_fini(&p);
}

static void immediate_receive_with_info(void) { immediate_receive(1); }
static void immediate_receive_without_info(void) { immediate_receive(0); }

const struct ct_test ct_callbacks[] = {
    {"callback_arguments", "nbx callbacks get their request, the status, the sender's tag and length (receive) and the user data, once", callback_arguments},
    {"legacy_callbacks", "the _nb calls' callbacks get the request, the status and the receive info", legacy_callbacks},
    {"callbacks_run_in_progress", "the callback of an operation that did not complete at once runs inside ucp_worker_progress of its worker", callbacks_run_in_progress},
    {"immediate_send_no_callback", "a send that completes at once returns NULL and its callback is not invoked", immediate_send_no_callback},
    {"no_imm_cmpl", "UCP_OP_ATTR_FLAG_NO_IMM_CMPL returns a request even when the operation could complete at once, and its callback runs once", no_imm_cmpl},
    {"force_imm_cmpl", "UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL completes at once or fails with UCS_ERR_NO_RESOURCE, sending nothing", force_imm_cmpl},
    {"immediate_receive_with_info", "recv_nbx/msg_recv_nbx of an arrived eager message with RECV_INFO return NULL with the info filled, the data in place and no callback", immediate_receive_with_info},
    {"immediate_receive_without_info", "recv_nbx/msg_recv_nbx of an arrived eager message return NULL with the data in place and no callback", immediate_receive_without_info},
    {0},
};
