/* Two UCX workers in one process, one thread, ping-ponging 8-byte tag messages over
 * shared memory: the software cost of UCX's tag path per round trip, with no cross-core
 * wait in it. The loop is the one of Rucx's ucp/examples/tag_pingpong.rs, step for step.
 * Built and run by contrib/bench/inproc-pingpong.sh against UCX 1.22's headers. */
#include "ucx-two-workers.h"
#include <stdlib.h>

static void recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req; (void)st; (void)info; (void)user;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    ucp_worker_h w[2];
    ucp_ep_h ea, eb;
    if (two_workers(UCP_FEATURE_TAG, w, &ea, &eb)) return 1;
    ucp_worker_h a = w[0], b = w[1];
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
