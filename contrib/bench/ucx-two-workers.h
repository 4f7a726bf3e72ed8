/* What the in-process UCX programs of contrib/bench/inproc-pingpong.sh share: two workers
 * of one context in one thread, connected by endpoints, and a monotonic clock. */
#ifndef RUCX_BENCH_UCX_TWO_WORKERS_H
#define RUCX_BENCH_UCX_TWO_WORKERS_H

#include <ucp/api/ucp.h>
#include <stdio.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

/* Creates workers w[0] and w[1] (single-threaded) of a context with `features`, an
 * endpoint from w[0] to w[1] in *ab and, when `ba` is not NULL, one back in *ba.
 * Returns 0, or 1 after printing what failed. */
static int two_workers(uint64_t features, ucp_worker_h w[2], ucp_ep_h *ab, ucp_ep_h *ba)
{
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = features};
    ucp_config_t *cfg;
    ucp_context_h ctx;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK || ucp_init(&p, cfg, &ctx) != UCS_OK) {
        fprintf(stderr, "ucp_init failed\n");
        return 1;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_worker_create(ctx, &wp, &w[0]) != UCS_OK || ucp_worker_create(ctx, &wp, &w[1]) != UCS_OK) {
        fprintf(stderr, "ucp_worker_create failed\n");
        return 1;
    }
    ucp_address_t *addr[2];
    size_t len[2];
    if (ucp_worker_get_address(w[0], &addr[0], &len[0]) != UCS_OK ||
        ucp_worker_get_address(w[1], &addr[1], &len[1]) != UCS_OK) {
        fprintf(stderr, "ucp_worker_get_address failed\n");
        return 1;
    }
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = addr[1]};
    if (ucp_ep_create(w[0], &ep, ab) != UCS_OK) {
        fprintf(stderr, "ucp_ep_create failed\n");
        return 1;
    }
    ep.address = addr[0];
    if (ba != NULL && ucp_ep_create(w[1], &ep, ba) != UCS_OK) {
        fprintf(stderr, "ucp_ep_create failed\n");
        return 1;
    }
    return 0;
}

#endif
