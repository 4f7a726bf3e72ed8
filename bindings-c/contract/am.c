/* Active messages: the deprecated ucp_worker_set_am_handler / ucp_am_send_nb pair (MPICH
 * 4.0's ch4 UCX netmod), and its coexistence with ucp_worker_set_am_recv_handler /
 * ucp_am_send_nbx on one worker. */
#include "contract.h"

#include <string.h>

/* What a deprecated handler saw. */
struct legacy_rec {
    int calls;
    size_t length;
    int data_ok;
    unsigned seed;
    ucp_ep_h reply_ep;
    unsigned flags;
    void *kept;          /* data kept by returning UCS_INPROGRESS */
    int keep;            /* whether to keep it */
    int in_progress;     /* called from inside ucp_worker_progress */
};

static ucs_status_t legacy_cb(void *arg, void *data, size_t length, ucp_ep_h reply_ep,
                              unsigned flags)
{
    struct legacy_rec *r = arg;
    r->calls++;
    r->length = length;
    r->data_ok = ct_pattern_ok(data, length, r->seed);
    r->reply_ep = reply_ep;
    r->flags = flags;
    r->in_progress = ct_in_progress;
    if (r->keep && (flags & UCP_CB_PARAM_FLAG_DATA)) {
        r->kept = data;
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

static void send_nb_cb(void *req, ucs_status_t status)
{
    (void)req;
    (void)status;
}

/* Sends `len` bytes of pattern `seed` from ep[0] with ucp_am_send_nb to id `id`. */
static void legacy_send(struct ct_pair *p, uint16_t id, size_t len, unsigned seed,
                        unsigned flags)
{
    char *b = ct_pattern(len, seed);
    void *r = ucp_am_send_nb(p->ep[0], id, b, len, ucp_dt_make_contig(1), send_nb_cb, flags);
    CT_OK(ct_wait(p, r));
    free(b);
}

/* The handler gets each message whole, small and large (a rendezvous size), once; a
 * reply endpoint only where the sender asked for one, and through it the handler's side
 * can answer. */
static void legacy_whole_messages(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct legacy_rec rec;
    memset(&rec, 0, sizeof(rec));
    CT_OK(ucp_worker_set_am_handler(p.w[1], 7, legacy_cb, &rec, UCP_AM_FLAG_WHOLE_MSG));
    size_t sizes[] = {0, CT_SMALL, 9000, CT_LARGE};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (int reply = 0; reply < 2; reply++) {
            memset(&rec, 0, sizeof(rec));
            rec.seed = 40 + (unsigned)k;
            legacy_send(&p, 7, sizes[k], rec.seed, reply ? UCP_AM_SEND_REPLY : 0);
            for (int i = 0; i < 1000000 && rec.calls == 0; i++) ct_progress(&p);
            CT_CHECK(rec.calls == 1, "%zu bytes: the handler ran %d times", sizes[k], rec.calls);
            CT_CHECK(rec.length == sizes[k] && rec.data_ok,
                     "%zu bytes: the handler got %zu bytes (data %s)", sizes[k], rec.length,
                     rec.data_ok ? "right" : "wrong");
            CT_CHECK(rec.in_progress, "the handler ran outside ucp_worker_progress");
            if (reply) {
                CT_CHECK(rec.reply_ep != NULL, "no reply endpoint where one was asked for");
                /* The reply endpoint reaches the sender's worker. */
                struct legacy_rec back;
                memset(&back, 0, sizeof(back));
                back.seed = 99;
                CT_OK(ucp_worker_set_am_handler(p.w[0], 8, legacy_cb, &back, 0));
                char *b = ct_pattern(16, 99);
                void *r = ucp_am_send_nb(rec.reply_ep, 8, b, 16, ucp_dt_make_contig(1),
                                         send_nb_cb, 0);
                CT_OK(ct_wait(&p, r));
                free(b);
                for (int i = 0; i < 1000000 && back.calls == 0; i++) ct_progress(&p);
                CT_CHECK(back.calls == 1 && back.data_ok, "the reply did not arrive whole");
                CT_OK(ucp_worker_set_am_handler(p.w[0], 8, NULL, NULL, 0));
            } else {
                CT_CHECK(rec.reply_ep == NULL, "a reply endpoint nobody asked for");
            }
        }
    }
    ct_pair_fini(&p);
}

/* Data the handler keeps (UCS_INPROGRESS, where UCP_CB_PARAM_FLAG_DATA allows it) stays
 * valid and unchanged until ucp_am_data_release, while more messages arrive. */
static void legacy_kept_data(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct legacy_rec rec;
    memset(&rec, 0, sizeof(rec));
    CT_OK(ucp_worker_set_am_handler(p.w[1], 3, legacy_cb, &rec,
                                    UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA));
    void *kept[4];
    size_t lens[4];
    int n = 0;
    for (int k = 0; k < 4; k++) {
        rec.calls = 0;
        rec.keep = 1;
        rec.kept = NULL;
        rec.seed = 70 + (unsigned)k;
        legacy_send(&p, 3, 100 + 1000 * (size_t)k, rec.seed, 0);
        for (int i = 0; i < 1000000 && rec.calls == 0; i++) ct_progress(&p);
        CT_CHECK(rec.calls == 1 && rec.data_ok, "message %d", k);
        if (rec.kept != NULL) {
            kept[n] = rec.kept;
            lens[n] = rec.length;
            n++;
        }
    }
    ct_progress_n(&p, 100);
    for (int k = 0; k < n; k++)
        CT_CHECK(ct_pattern_ok(kept[k], lens[k], 70 + (unsigned)k),
                 "kept message %d changed before its release", k);
    for (int k = 0; k < n; k++) ucp_am_data_release(p.w[1], kept[k]);
    ct_pair_fini(&p);
}

/* Removing a handler (NULL) stops its calls; setting it again brings them back. */
static void legacy_remove(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct legacy_rec rec;
    memset(&rec, 0, sizeof(rec));
    rec.seed = 5;
    CT_OK(ucp_worker_set_am_handler(p.w[1], 4, legacy_cb, &rec, 0));
    legacy_send(&p, 4, 64, 5, 0);
    for (int i = 0; i < 1000000 && rec.calls == 0; i++) ct_progress(&p);
    CT_CHECK(rec.calls == 1, "first message: %d calls", rec.calls);
    CT_OK(ucp_worker_set_am_handler(p.w[1], 4, NULL, NULL, 0));
    legacy_send(&p, 4, 64, 5, 0);
    ct_progress_n(&p, 2000);
    CT_CHECK(rec.calls == 1, "a removed handler was called");
    CT_OK(ucp_worker_set_am_handler(p.w[1], 4, legacy_cb, &rec, 0));
    legacy_send(&p, 4, 64, 5, 0);
    for (int i = 0; i < 1000000 && rec.calls == 1; i++) ct_progress(&p);
    CT_CHECK(rec.calls == 2, "the handler set again: %d calls", rec.calls);
    ct_pair_fini(&p);
}

struct nbx_rec {
    int calls;
    size_t length;
    int data_ok;
    unsigned seed;
};

static ucs_status_t nbx_cb(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    struct nbx_rec *r = arg;
    (void)header;
    (void)header_length;
    r->calls++;
    r->length = length;
    r->data_ok = !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
                 ct_pattern_ok(data, length, r->seed);
    return UCS_OK;
}

/* A deprecated handler and an nbx handler on one worker, under other ids: each gets its
 * own messages, sent by ucp_am_send_nb and ucp_am_send_nbx in turn. */
static void legacy_beside_nbx(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct legacy_rec old;
    struct nbx_rec nbx;
    memset(&old, 0, sizeof(old));
    memset(&nbx, 0, sizeof(nbx));
    old.seed = 11;
    nbx.seed = 12;
    CT_OK(ucp_worker_set_am_handler(p.w[1], 1, legacy_cb, &old, UCP_AM_FLAG_WHOLE_MSG));
    ucp_am_handler_param_t hp;
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = 2;
    hp.cb = nbx_cb;
    hp.arg = &nbx;
    CT_OK(ucp_worker_set_am_recv_handler(p.w[1], &hp));
    for (int round = 0; round < 10; round++) {
        legacy_send(&p, 1, 200, 11, 0);
        char *b = ct_pattern(300, 12);
        ucp_request_param_t sp = ct_send_param(NULL);
        CT_OK(ct_wait(&p, ucp_am_send_nbx(p.ep[0], 2, NULL, 0, b, 300, &sp)));
        free(b);
        for (int i = 0; i < 1000000 && (old.calls <= round || nbx.calls <= round); i++)
            ct_progress(&p);
        CT_CHECK(old.calls == round + 1 && old.length == 200 && old.data_ok,
                 "round %d: the deprecated handler: %d calls, %zu bytes", round, old.calls,
                 old.length);
        CT_CHECK(nbx.calls == round + 1 && nbx.length == 300 && nbx.data_ok,
                 "round %d: the nbx handler: %d calls, %zu bytes", round, nbx.calls, nbx.length);
    }
    ct_pair_fini(&p);
}

/* What UCXX does with a rendezvous active message: inside the receive callback it posts
 * ucp_am_recv_data_nbx (callback, user data, UCP_OP_ATTR_FLAG_NO_IMM_CMPL) into a buffer
 * of its own and returns UCS_INPROGRESS; the receive's callback later reports the whole
 * message, never from inside that call. Sizes around and well above the rendezvous
 * threshold. */
struct rndv_rec {
    int calls, done, rndv, hdr_ok, in_call, done_in_call;
    size_t length;
    ucs_status_t status;
    char *buf;
    ucp_worker_h w;
};

static void am_data_done(void *req, ucs_status_t status, size_t length, void *user_data)
{
    struct rndv_rec *r = user_data;
    r->done++;
    r->done_in_call += r->in_call;
    r->status = status;
    r->length = length;
    ucp_request_free(req);
}

static ucs_status_t rndv_cb(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    struct rndv_rec *r = arg;
    r->calls++;
    r->hdr_ok = header_length == 24 && header != NULL && ct_pattern_ok(header, 24, 3);
    r->length = length;
    r->buf = malloc(length ? length : 1);
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(r->buf, data, length);
        r->done++;
        r->status = UCS_OK;
        return UCS_OK;
    }
    r->rndv++;
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv_am = am_data_done;
    p.user_data = r;
    r->in_call = 1;
    void *q = ucp_am_recv_data_nbx(r->w, data, r->buf, length, &p);
    r->in_call = 0;
    if (UCS_PTR_IS_ERR(q)) {
        r->status = UCS_PTR_STATUS(q);
        r->done++;
        return r->status;
    }
    return UCS_INPROGRESS;
}

static void send_done(void *req, ucs_status_t status, void *user_data)
{
    (void)req;
    int *d = user_data;
    *d = status == UCS_OK ? 1 : -1;
}

/* Sends from `ep` (to `w`, possibly its own worker) and checks as below. */
static void rndv_to(struct ct_pair *p, ucp_ep_h ep, ucp_worker_h w)
{
    struct rndv_rec rec;
    memset(&rec, 0, sizeof(rec));
    rec.w = w;
    ucp_am_handler_param_t hp;
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = 5;
    hp.cb = rndv_cb;
    hp.arg = &rec;
    CT_OK(ucp_worker_set_am_recv_handler(w, &hp));
    size_t sizes[] = {4096, 65536, 1 << 20, CT_LARGE};
    int rndv_seen = 0;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        char *src = ct_pattern(n, 90 + (unsigned)k);
        /* As UCXX sends: a callback, and the request checked once the call returned. */
        int sent = 0;
        ucp_request_param_t sp;
        memset(&sp, 0, sizeof(sp));
        sp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
        sp.cb.send = send_done;
        sp.user_data = &sent;
        sp.flags = UCP_AM_SEND_FLAG_RNDV | UCP_AM_SEND_FLAG_REPLY;
        rec.calls = rec.done = rec.rndv = 0;
        char *hdr = ct_pattern(24, 3);
        void *sr = ucp_am_send_nbx(ep, 5, hdr, 24, src, n, &sp);
        CT_CHECK(!UCS_PTR_IS_ERR(sr), "am send");
        /* ucp.h: a request returned has not called its callback yet. */
        CT_CHECK(sr == NULL || sent == 0, "%zu bytes: the send's callback ran before the call "
                 "returned its request", n);
        for (int i = 0; i < 2000000 && (rec.done == 0 || (sr != NULL && ucp_request_check_status(sr) == UCS_INPROGRESS)); i++)
            ct_progress(p);
        CT_CHECK(rec.calls == 1 && rec.done == 1, "%zu bytes: %d calls, %d completions", n,
                 rec.calls, rec.done);
        CT_CHECK(rec.status == UCS_OK && rec.length == n, "%zu bytes: status %d, length %zu", n,
                 (int)rec.status, rec.length);
        CT_CHECK(ct_pattern_ok(rec.buf, n, 90 + (unsigned)k), "%zu bytes: data", n);
        CT_CHECK(rec.hdr_ok, "%zu bytes: the header", n);
        /* With NO_IMM_CMPL the request comes back and calls back later, from progress:
         * UCXX files the request it got as in flight (and a callback that frees it, as
         * here, would leave the caller a freed request). */
        CT_CHECK(rec.done_in_call == 0, "%zu bytes: the receive's callback ran inside "
                 "ucp_am_recv_data_nbx", n);
        free(hdr);
        rndv_seen += rec.rndv;
        CT_OK(ct_wait(p, sr));
        free(rec.buf);
        free(src);
    }
    CT_CHECK(rndv_seen > 0, "no message came as a rendezvous (UCP_AM_SEND_FLAG_RNDV)");
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    hp.cb = NULL;
    CT_OK(ucp_worker_set_am_recv_handler(w, &hp));
}

static void rndv_data_received_in_callback(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    rndv_to(&p, p.ep[0], p.w[1]);
    /* To the sender's own worker (UCXX's client and server share one). */
    ucp_address_t *a;
    size_t alen;
    CT_OK(ucp_worker_get_address(p.w[0], &a, &alen));
    ucp_ep_h self_ep = ct_ep(p.w[0], a, 0, NULL);
    ucp_worker_release_address(p.w[0], a);
    rndv_to(&p, self_ep, p.w[0]);
    ucp_request_param_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *r = ucp_ep_close_nbx(self_ep, &cp);
    if (!UCS_PTR_IS_ERR(r)) ct_wait(&p, r);
    ct_pair_fini(&p);
}

const struct ct_test ct_am[] = {
    {"legacy_whole_messages", "a ucp_worker_set_am_handler handler gets each ucp_am_send_nb message whole, small and large, with a working reply endpoint only where the sender asked for one", legacy_whole_messages},
    {"legacy_kept_data", "data a deprecated AM handler keeps (UCS_INPROGRESS) stays valid until ucp_am_data_release", legacy_kept_data},
    {"legacy_remove", "a NULL handler removes it; setting it again restores it", legacy_remove},
    {"legacy_beside_nbx", "a deprecated AM handler and an nbx one on one worker each get their own messages", legacy_beside_nbx},
    {"rndv_data_received_in_callback", "a rendezvous AM received with ucp_am_recv_data_nbx (NO_IMM_CMPL) from inside its callback, which returns UCS_INPROGRESS, completes with the whole message, calling back from progress, not inside the call", rndv_data_received_in_callback},
    {0},
};
