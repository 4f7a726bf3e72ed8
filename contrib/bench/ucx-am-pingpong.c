/* Two UCX workers in one process, one thread, ping-ponging 8-byte active messages over
 * shared memory, the answer sent from inside the handler: the software cost of UCX's
 * active-message path per round trip. The loop is the one of Rucx's
 * ucp/examples/am_pingpong.rs, step for step. Built and run by
 * contrib/bench/inproc-pingpong.sh against UCX 1.22's headers. */
#include "ucx-two-workers.h"
#include <stdlib.h>

static ucp_ep_h answer_ep;
static char sa[8] = {1}, sb[8] = {2};
static volatile unsigned long got;
static int failed;

/* Worker a's handler: counts answers. */
static ucs_status_t on_answer(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
                              const ucp_am_recv_param_t *param)
{
    (void)arg; (void)hdr; (void)hlen; (void)param;
    if (len != 8 || ((const char *)data)[0] != 2) failed = 1;
    got++;
    return UCS_OK;
}

/* Worker b's handler: answers from inside the handler. */
static ucs_status_t on_ping(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    (void)arg; (void)hdr; (void)hlen; (void)param;
    if (len != 8 || ((const char *)data)[0] != 1) failed = 1;
    ucp_request_param_t sp = {.op_attr_mask = 0};
    void *s = ucp_am_send_nbx(answer_ep, 0, NULL, 0, sb, 8, &sp);
    if (UCS_PTR_IS_ERR(s)) failed = 1;
    else if (s != NULL) ucp_request_free(s);
    return UCS_OK;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    ucp_worker_h w[2];
    ucp_ep_h ea;
    if (two_workers(UCP_FEATURE_AM, w, &ea, &answer_ep)) return 1;
    ucp_worker_h a = w[0], b = w[1];
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = 0};
    hp.cb = on_answer;
    if (ucp_worker_set_am_recv_handler(a, &hp) != UCS_OK) return 1;
    hp.cb = on_ping;
    if (ucp_worker_set_am_recv_handler(b, &hp) != UCS_OK) return 1;
    ucp_request_param_t sp = {.op_attr_mask = 0};
    double t0 = 0;
    for (long n = 0; n < iters + 10000; n++) {
        if (n == 10000) t0 = now();
        unsigned long want = got + 1;
        void *s = ucp_am_send_nbx(ea, 0, NULL, 0, sa, 8, &sp);
        if (UCS_PTR_IS_ERR(s)) { fprintf(stderr, "send failed\n"); return 1; }
        while (got < want || s != NULL) {
            if (s != NULL && ucp_request_check_status(s) != UCS_INPROGRESS) { ucp_request_free(s); s = NULL; }
            ucp_worker_progress(b);
            ucp_worker_progress(a);
        }
        if (failed) { fprintf(stderr, "wrong data or a failed answer\n"); return 1; }
    }
    printf("%.1f ns per round trip (%ld iterations)\n", (now() - t0) / iters, iters);
    return 0;
}
