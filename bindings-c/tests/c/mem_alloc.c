/*
 * Memory allocated by ucp_mem_map (UCP_MEM_MAP_ALLOCATE) between two processes (a fork),
 * as ucx_perftest and OpenMPI's osc/ucx allocate it: the peer puts into and gets from the
 * region through its remote key, and a rendezvous-sized tag message moves between two
 * allocated buffers. Every byte is checked. Built against Rucx's headers by
 * tests/headers.rs; prints "mem_alloc: OK" from the parent on success.
 */
#include <rucx.h>
#include <ucp/api/ucp.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(_call) do { ucs_status_t _s = (_call); if (_s != UCS_OK) { \
        fprintf(stderr, "%s %s:%d %s: %s\n", me, __FILE__, __LINE__, #_call, \
                ucpx_status_string(_s)); exit(1); } } while (0)
#define EXPECT(_c, ...) do { if (!(_c)) { fprintf(stderr, "%s FAIL %s:%d: ", me, __FILE__, \
        __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

enum { REGION = 1 << 20, PIECE = 64 << 10, MSG = 512 << 10 };

static const char *me = "parent";
static ucp_worker_h w;

static ucs_status_t wait_req(ucs_status_ptr_t r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    return s;
}

static void send_blob(int fd, const void *p, size_t n)
{
    if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(fd, p, n) != (ssize_t)n) {
        perror("write"); exit(1);
    }
}

static void *recv_blob(int fd)
{
    size_t n;
    if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n)) { perror("read"); exit(1); }
    char *p = malloc(n);
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, p + got, n - got);
        if (k <= 0) { perror("read"); exit(1); }
        got += (size_t)k;
    }
    return p;
}

/* Progresses the worker until the peer writes its one-byte signal. */
static void await_signal(int fd)
{
    char c;
    for (;;) {
        fd_set s;
        FD_ZERO(&s);
        FD_SET(fd, &s);
        struct timeval tv = {0, 0};
        if (select(fd + 1, &s, NULL, NULL, &tv) > 0) break;
        ucp_worker_progress(w);
    }
    if (read(fd, &c, 1) != 1) { perror("read"); exit(1); }
}

static void signal_peer(int fd)
{
    if (write(fd, "x", 1) != 1) { perror("write"); exit(1); }
}

static uint8_t pat(size_t i, unsigned seed) { return (uint8_t)(i * 7 + seed + (i >> 9)); }

static void *alloc_region(ucp_context_h ctx, size_t len, ucp_mem_h *memh)
{
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    CHECK(ucp_mem_map(ctx, &mp, memh));
    ucp_mem_attr_t a = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    CHECK(ucp_mem_query(*memh, &a));
    EXPECT(a.address != NULL && a.length >= len, "ucp_mem_query: %p %zu", a.address, a.length);
    const uint8_t *b = a.address;
    for (size_t i = 0; i < len; i++) EXPECT(b[i] == 0, "allocated memory not zeroed at %zu", i);
    return a.address;
}

static int run(int rd, int wr, int target)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA,
    };
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *addr;
    size_t alen;
    CHECK(ucp_worker_get_address(w, &addr, &alen));
    send_blob(wr, addr, alen);
    ucp_worker_release_address(w, addr);
    void *peer = recv_blob(rd);
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address = peer};
    ucp_ep_h ep;
    CHECK(ucp_ep_create(w, &ep_params, &ep));
    free(peer);

    /* The message buffers of the tag exchange, allocated on both sides. */
    ucp_mem_h msg_memh;
    uint8_t *msg = alloc_region(ctx, MSG, &msg_memh);

    if (target) {
        ucp_mem_h memh;
        uint8_t *region = alloc_region(ctx, REGION, &memh);
        for (size_t i = 0; i < REGION; i++) region[i] = pat(i, 1);
        void *rkey;
        size_t rlen;
        CHECK(ucp_rkey_pack(ctx, memh, &rkey, &rlen));
        uint64_t at = (uint64_t)(uintptr_t)region;
        send_blob(wr, &at, sizeof(at));
        send_blob(wr, rkey, rlen);
        ucp_rkey_buffer_release(rkey);
        /* The origin puts and gets, then says so; an emulated RMA would need progress. */
        await_signal(rd);
        for (size_t i = 0; i < PIECE; i++)
            EXPECT(region[i] == pat(i, 2), "put: byte %zu is %u, not %u", i, region[i], pat(i, 2));
        for (size_t i = PIECE; i < REGION; i++)
            EXPECT(region[i] == pat(i, 1), "byte %zu outside the put changed", i);
        /* A rendezvous-sized message into allocated memory. */
        ucp_request_param_t rp = {0};
        CHECK(wait_req(ucp_tag_recv_nbx(w, msg, MSG, 9, UINT64_MAX, &rp)));
        for (size_t i = 0; i < MSG; i++)
            EXPECT(msg[i] == pat(i, 3), "tag: byte %zu is %u, not %u", i, msg[i], pat(i, 3));
        signal_peer(wr);
        CHECK(ucp_mem_unmap(ctx, memh));
    } else {
        uint64_t *at = recv_blob(rd);
        void *rkey_buf = recv_blob(rd);
        ucp_rkey_h rkey;
        CHECK(ucp_ep_rkey_unpack(ep, rkey_buf, &rkey));
        free(rkey_buf);
        uint8_t *local = malloc(PIECE);
        for (size_t i = 0; i < PIECE; i++) local[i] = pat(i, 2);
        ucp_request_param_t pp = {0};
        CHECK(wait_req(ucp_put_nbx(ep, local, PIECE, *at, rkey, &pp)));
        CHECK(wait_req(ucp_ep_flush_nbx(ep, &pp)));
        memset(local, 0, PIECE);
        CHECK(wait_req(ucp_get_nbx(ep, local, PIECE, *at + REGION - PIECE, rkey, &pp)));
        CHECK(wait_req(ucp_ep_flush_nbx(ep, &pp)));
        for (size_t i = 0; i < PIECE; i++) {
            size_t j = REGION - PIECE + i;
            EXPECT(local[i] == pat(j, 1), "get: byte %zu is %u, not %u", i, local[i], pat(j, 1));
        }
        /* An access past the region is refused and performs nothing. */
        ucs_status_ptr_t bad = ucp_put_nbx(ep, local, PIECE, *at + REGION - 8, rkey, &pp);
        EXPECT(UCS_PTR_IS_ERR(bad) || wait_req(bad) != UCS_OK, "a put past the region succeeded");
        /* The same through the _nbi calls (OpenMPI's osc: a copy done in the call when the
         * region is mapped here): the first piece again, read back. */
        for (size_t i = 0; i < PIECE; i++) local[i] = pat(i, 2);
        ucs_status_t s = ucp_put_nbi(ep, local, PIECE, *at, rkey);
        EXPECT(s == UCS_OK || s == UCS_INPROGRESS, "put_nbi: %s", ucs_status_string(s));
        CHECK(wait_req(ucp_ep_flush_nbx(ep, &pp)));
        memset(local, 0, PIECE);
        s = ucp_get_nbi(ep, local, PIECE, *at, rkey);
        EXPECT(s == UCS_OK || s == UCS_INPROGRESS, "get_nbi: %s", ucs_status_string(s));
        CHECK(wait_req(ucp_ep_flush_nbx(ep, &pp)));
        for (size_t i = 0; i < PIECE; i++)
            EXPECT(local[i] == pat(i, 2), "get_nbi: byte %zu is %u, not %u", i, local[i], pat(i, 2));
        EXPECT(UCS_STATUS_IS_ERR(ucp_put_nbi(ep, local, PIECE, *at + REGION - 8, rkey)),
               "a put_nbi past the region succeeded");
        EXPECT(UCS_STATUS_IS_ERR(ucp_get_nbi(ep, local, PIECE, *at - 1, rkey)),
               "a get_nbi before the region succeeded");
        EXPECT(ucp_put_nbi(ep, local, PIECE, *at, NULL) == UCS_ERR_INVALID_PARAM,
               "a put_nbi without a key was taken");
        signal_peer(wr);
        for (size_t i = 0; i < MSG; i++) msg[i] = pat(i, 3);
        ucp_request_param_t sp = {0};
        CHECK(wait_req(ucp_tag_send_nbx(ep, msg, MSG, 9, &sp)));
        await_signal(rd);
        ucp_rkey_destroy(rkey);
        free(local);
        free(at);
    }
    CHECK(ucp_mem_unmap(ctx, msg_memh));
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    wait_req(ucp_ep_close_nbx(ep, &cp));
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    return 0;
}

int main(void)
{
    /* The tag message goes by rendezvous, whatever same-host tuning would pick for it. */
    setenv("UCX_RNDV_THRESH", "16384", 0);
    int a[2], b[2];
    if (pipe(a) || pipe(b)) { perror("pipe"); return 1; }
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        me = "child";
        close(a[1]);
        close(b[0]);
        return run(a[0], b[1], 1);
    }
    close(a[0]);
    close(b[1]);
    int rc = run(b[0], a[1], 0);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child failed\n");
        return 1;
    }
    if (rc == 0) printf("mem_alloc: OK\n");
    return rc;
}
