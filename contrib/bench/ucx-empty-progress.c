/* The cost of one ucp_worker_progress call that finds nothing, on a worker with a wired
 * shared-memory endpoint. The loop is the one of Rucx's ucp/examples/empty_progress.rs.
 * Built and run by contrib/bench/inproc-pingpong.sh against UCX 1.22's headers. */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 10000000;
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG | UCP_FEATURE_AM};
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
    ucp_address_t *ba; size_t bl;
    ucp_worker_get_address(b, &ba, &bl);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = ba};
    ucp_ep_h ea;
    if (ucp_ep_create(a, &ep, &ea) != UCS_OK) return 1;
    for (int i = 0; i < 10000; i++) ucp_worker_progress(a);
    double t0 = now();
    unsigned long n = 0;
    for (long i = 0; i < iters; i++) n += ucp_worker_progress(a);
    if (n != 0) { fprintf(stderr, "nothing was sent, yet progress reported events\n"); return 1; }
    printf("%.2f ns per empty progress (%ld calls)\n", (now() - t0) / iters, iters);
    return 0;
}
