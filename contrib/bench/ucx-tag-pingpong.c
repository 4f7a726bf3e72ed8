/* Two UCX workers in one process, one thread, ping-ponging 8-byte tag messages over
 * shared memory: the software cost of UCX's tag path per round trip, with no cross-core
 * wait in it. The loop is the one of Rucx's ucp/examples/tag_pingpong.rs, step for step.
 * Built and run by contrib/bench/inproc-pingpong.sh against UCX 1.22's headers. */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req; (void)st; (void)info; (void)user;
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_config_t *cfg; ucp_context_h ctx;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK || ucp_init(&p, cfg, &ctx) != UCS_OK) {
        fprintf(stderr, "ucp_init failed\n");
        return 1;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h a, b;
    if (ucp_worker_create(ctx, &wp, &a) != UCS_OK || ucp_worker_create(ctx, &wp, &b) != UCS_OK) {
        fprintf(stderr, "ucp_worker_create failed\n");
        return 1;
    }
    ucp_address_t *aa, *ba; size_t al, bl;
    ucp_worker_get_address(a, &aa, &al); ucp_worker_get_address(b, &ba, &bl);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS};
    ucp_ep_h ea, eb;
    ep.address = ba;
    if (ucp_ep_create(a, &ep, &ea) != UCS_OK) return 1;
    ep.address = aa;
    if (ucp_ep_create(b, &ep, &eb) != UCS_OK) return 1;
    char sa[8] = {1}, ra[8], sb[8] = {2}, rb[8];
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = recv_cb};
    ucp_request_param_t sp = {.op_attr_mask = 0};
    double t0 = 0;
    for (long n = 0; n < iters + 10000; n++) {
        if (n == 10000) t0 = now();
        void *r = ucp_tag_recv_nbx(b, rb, 8, 1, ~0ull, &rp);
        void *s = ucp_tag_send_nbx(ea, sa, 8, 1, &sp);
        if (UCS_PTR_IS_PTR(s)) { while (ucp_request_check_status(s) == UCS_INPROGRESS) { ucp_worker_progress(a); ucp_worker_progress(b); } ucp_request_free(s); }
        while (ucp_request_check_status(r) == UCS_INPROGRESS) { ucp_worker_progress(b); ucp_worker_progress(a); }
        if (ucp_request_check_status(r) != UCS_OK) { fprintf(stderr, "receive failed\n"); return 1; }
        ucp_request_free(r);
        r = ucp_tag_recv_nbx(a, ra, 8, 2, ~0ull, &rp);
        s = ucp_tag_send_nbx(eb, sb, 8, 2, &sp);
        if (UCS_PTR_IS_PTR(s)) { while (ucp_request_check_status(s) == UCS_INPROGRESS) { ucp_worker_progress(a); ucp_worker_progress(b); } ucp_request_free(s); }
        while (ucp_request_check_status(r) == UCS_INPROGRESS) { ucp_worker_progress(a); ucp_worker_progress(b); }
        if (ucp_request_check_status(r) != UCS_OK) { fprintf(stderr, "receive failed\n"); return 1; }
        ucp_request_free(r);
    }
    if (ra[0] != 2 || rb[0] != 1) { fprintf(stderr, "wrong data received\n"); return 1; }
    printf("%.1f ns per round trip (%ld iterations)\n", (now() - t0) / iters, iters);
    return 0;
}
