/*
 * Rucx extension test (rucx.h): tag schemes, the wrap-safe tag generator, and channels
 * between two forked processes. Built against Rucx's own headers by tests/headers.rs.
 * Prints "channels: OK" from the parent on success.
 *
 * Channels: 300 messages of mixed sizes (eager and rendezvous) on a channel whose counter
 * has 3 bits, so it wraps dozens of times; the receiver posts lazily (in bursts, after a
 * pause), so the sender runs into unmatched tags and must wait; every message is checked
 * in order, completions by callback. Then, in the parent, a receive on a second channel is
 * cancelled by closing it, and a receive on a third ends with an error when the child
 * exits.
 */
#include <rucx.h>
#include <ucp/api/ucp.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int rank;
#define CHECK(_call) do { ucs_status_t _s = (_call); if (_s != UCS_OK) { \
        fprintf(stderr, "rank %d: %s:%d %s: %s\n", rank, __FILE__, __LINE__, #_call, \
                ucpx_status_string(_s)); exit(1); } } while (0)
#define FAIL(...) do { fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

enum { N = 300 };
static const size_t sizes[] = {8, 4000, 1, 70000, 256, 300000, 16};

static ucp_worker_h w;
static int done_count;
static ucs_status_t last_status;

static void send_cb(void *req, ucs_status_t s, void *user)
{
    (void)req; (void)user;
    if (s != UCS_OK) last_status = s;
    done_count++;
}

static void recv_cb(void *req, ucs_status_t s, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req; (void)info; (void)user;
    last_status = s;
    done_count++;
}

static unsigned char byte(int msg, size_t i) { return (unsigned char)(msg * 131 + i * 7 + (i >> 9)); }

static void wait_done(int target)
{
    while (done_count < target) ucp_worker_progress(w);
}

static void scheme_checks(void)
{
    ucpx_tag_scheme_t s = UCPX_TAG_SCHEME_CHARM_DEVICE;
    ucp_tag_t t, m;
    uint64_t ty, id, c;
    CHECK(ucpx_tag_encode(&s, 5, 123456, (1u << 28) - 1, &t));
    CHECK(ucpx_tag_decode(&s, t, &ty, &id, &c));
    if (ty != 5 || id != 123456 || c != (1u << 28) - 1) FAIL("decode");
    if (ucpx_tag_encode(&s, 16, 0, 0, &t) != UCS_ERR_INVALID_PARAM) FAIL("type 16 fits 4 bits?");
    CHECK(ucpx_tag_mask(&s, UCPX_TAG_MATCH_TYPE_ID, &m));
    ucp_tag_t t2;
    CHECK(ucpx_tag_encode(&s, 5, 123456, 7, &t2));
    if ((t & m) != (t2 & m)) FAIL("type+id mask");
    ucpx_tag_scheme_t bad = {40, 20, 10};
    if (ucpx_tag_mask(&bad, UCPX_TAG_MATCH_ALL, &m) != UCS_ERR_INVALID_PARAM) FAIL("70 bits accepted");
    /* A 2-bit counter: four tags, then the fifth is refused until one is released. */
    ucpx_tag_scheme_t narrow = {4, 8, 2};
    ucpx_tag_gen_h g;
    CHECK(ucpx_tag_gen_create(&narrow, 1, 9, 0, &g));
    ucp_tag_t tags[4];
    for (int i = 0; i < 4; i++) CHECK(ucpx_tag_gen_next(g, NULL, &tags[i]));
    if (ucpx_tag_gen_next(g, NULL, &t) != UCS_ERR_BUSY) FAIL("wrapped onto an outstanding tag");
    CHECK(ucpx_tag_gen_release(g, tags[0]));
    if (ucpx_tag_gen_release(g, tags[0]) != UCS_ERR_INVALID_PARAM) FAIL("double release");
    CHECK(ucpx_tag_gen_next(g, NULL, &t));
    if (t != tags[0]) FAIL("released tag not handed out again");
    CHECK(ucpx_tag_gen_destroy(g));
    if (ucpx_tag_gen_next(NULL, NULL, &t) != UCS_ERR_INVALID_PARAM) FAIL("NULL generator");
}

static int run(int me, int to[2], int from[2])
{
    rank = me;
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_worker_params_t wp = {0};
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *addr;
    size_t len;
    CHECK(ucp_worker_get_address(w, &addr, &len));
    if (write(to[1], &len, sizeof(len)) != sizeof(len) || write(to[1], addr, len) != (ssize_t)len) FAIL("write");
    size_t plen;
    if (read(from[0], &plen, sizeof(plen)) != sizeof(plen)) FAIL("read");
    void *peer = malloc(plen);
    for (size_t got = 0; got < plen;) {
        ssize_t g = read(from[0], (char *)peer + got, plen - got);
        if (g <= 0) FAIL("read");
        got += (size_t)g;
    }
    ucp_ep_params_t epp = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    ucp_ep_h ep;
    CHECK(ucp_ep_create(w, &epp, &ep));
    ucp_worker_release_address(w, addr);
    free(peer);

    ucpx_channel_params_t cp = {
        .field_mask = UCPX_CHANNEL_PARAM_FIELD_SCHEME | UCPX_CHANNEL_PARAM_FIELD_WAIT,
        .scheme = {4, 12, 3},
        .wait = 1,
    };
    ucpx_channel_h ch;
    CHECK(ucpx_channel_open(ep, 42, &cp, &ch));
    ucpx_channel_h dup;
    if (ucpx_channel_open(ep, 42, &cp, &dup) != UCS_ERR_INVALID_PARAM) FAIL("opened twice");

    unsigned char *bufs[N];
    for (int i = 0; i < N; i++) bufs[i] = malloc(sizes[i % 7]);
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = recv_cb};
    int expect = 0;
    if (me == 0) {
        for (int i = 0; i < N; i++) {
            for (size_t k = 0; k < sizes[i % 7]; k++) bufs[i][k] = byte(i, k);
            ucs_status_ptr_t r = ucpx_channel_send_nbx(ch, bufs[i], sizes[i % 7], &sp);
            if (UCS_PTR_IS_ERR(r)) FAIL("send %d: %s", i, ucpx_status_string(UCS_PTR_STATUS(r)));
            if (r != NULL) expect++;
        }
        wait_done(expect);
        if (last_status != UCS_OK) FAIL("a send failed: %s", ucpx_status_string(last_status));
    } else {
        /* Post in bursts of 20 with pauses: the sender, 8 tags wide, waits for us. */
        for (int i = 0; i < N; i++) {
            if (i % 20 == 0) usleep(20000);
            memset(bufs[i], 0, sizes[i % 7]);
            ucs_status_ptr_t r = ucpx_channel_recv_nbx(ch, bufs[i], sizes[i % 7], &rp);
            if (UCS_PTR_IS_ERR(r)) FAIL("recv %d: %s", i, ucpx_status_string(UCS_PTR_STATUS(r)));
            if (r != NULL) expect++;
            ucp_worker_progress(w);
        }
        wait_done(expect);
        if (last_status != UCS_OK) FAIL("a receive failed: %s", ucpx_status_string(last_status));
        for (int i = 0; i < N; i++)
            for (size_t k = 0; k < sizes[i % 7]; k++)
                if (bufs[i][k] != byte(i, k)) FAIL("message %d byte %zu: %u", i, k, bufs[i][k]);
    }
    CHECK(ucpx_channel_close(ch));

    /* Both done with the first channel before the second part. */
    char token = 1;
    if (write(to[1], &token, 1) != 1 || read(from[0], &token, 1) != 1) FAIL("sync");

    if (me == 0) {
        /* Closing cancels a pending receive. */
        ucpx_channel_h c2, c3;
        CHECK(ucpx_channel_open(ep, 2, NULL, &c2));
        unsigned char b[64];
        done_count = 0;
        ucs_status_ptr_t r = ucpx_channel_recv_nbx(c2, b, sizeof(b), &rp);
        if (r == NULL || UCS_PTR_IS_ERR(r)) FAIL("pending receive expected");
        CHECK(ucpx_channel_close(c2));
        wait_done(1);
        if (last_status != UCS_ERR_CANCELED) FAIL("closed channel's receive: %s", ucpx_status_string(last_status));
        ucp_request_free(r);
        /* The peer exits: a receive on a third channel ends with an error. */
        CHECK(ucpx_channel_open(ep, 3, NULL, &c3));
        done_count = 0;
        r = ucpx_channel_recv_nbx(c3, b, sizeof(b), &rp);
        if (write(to[1], &token, 1) != 1) FAIL("sync");
        if (r != NULL && !UCS_PTR_IS_ERR(r)) {
            wait_done(1);
            ucp_request_free(r);
        } else {
            last_status = UCS_PTR_STATUS(r);
        }
        if (last_status == UCS_OK || last_status == UCS_ERR_CANCELED)
            FAIL("receive from a dead peer ended with %s", ucpx_status_string(last_status));
        CHECK(ucpx_channel_close(c3));
        if (ucpx_channel_close(NULL) != UCS_ERR_INVALID_PARAM) FAIL("NULL channel");
        ucp_ep_close_nbx(ep, &(ucp_request_param_t){.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                                     .flags = UCP_EP_CLOSE_FLAG_FORCE});
    } else {
        /* Wait until the peer posted its last receive, then leave without closing. */
        if (read(from[0], &token, 1) != 1) FAIL("sync");
        _exit(0);
    }
    for (int i = 0; i < N; i++) free(bufs[i]);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    return 0;
}

int main(void)
{
    rank = -1;
    scheme_checks();
    int a2b[2], b2a[2];
    if (pipe(a2b) || pipe(b2a)) { perror("pipe"); return 1; }
    pid_t pid = fork();
    if (pid == 0) return run(1, b2a, a2b);
    int rc = run(0, a2b, b2a);
    int st;
    waitpid(pid, &st, 0);
    if (rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        printf("channels: OK\n");
        return 0;
    }
    fprintf(stderr, "channels: child status %d, parent %d\n", st, rc);
    return 1;
}
