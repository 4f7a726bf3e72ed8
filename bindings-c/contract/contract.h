/*
 * The ucp.h contract suite: each test encodes one promise of UCX's ucp.h that a consumer
 * (OpenMPI's pml/osc ucx, Charm++'s machine layer, ucx_perftest) may rely on. The same
 * binary runs over Debian's UCX 1.13, UCX 1.22 (the PyPI wheel) and Rucx's libucp.so.0;
 * a test must pass on UCX to count as encoding the contract (bindings-c/tests/contract.rs).
 *
 * Each test runs in a forked process with a time limit, so a crash or a hang fails that
 * test only. Only ucp_* calls are used (no libucs), so the suite builds against Rucx's
 * headers as well as UCX's.
 */
#ifndef RUCX_CONTRACT_H
#define RUCX_CONTRACT_H

#include <ucp/api/ucp.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct ct_test {
    const char *name;
    const char *promise; /* the guarantee, in one sentence */
    void (*fn)(void);
};

/* The areas, each a file; each table ends with a zeroed entry. */
extern const struct ct_test ct_requests[], ct_callbacks[], ct_tag[], ct_rma[], ct_endpoints[],
    ct_address[], ct_worker_tests[], ct_am[], ct_config[],
    ct_abi119[];

extern const char *ct_current;

#define CT_FAIL(...)                                                                   \
    do {                                                                               \
        fprintf(stderr, "    %s (%s:%d): ", ct_current, __FILE__, __LINE__);           \
        fprintf(stderr, __VA_ARGS__);                                                  \
        fputc('\n', stderr);                                                           \
        exit(1);                                                                       \
    } while (0)
#define CT_CHECK(cond, ...)                                                            \
    do {                                                                               \
        if (!(cond)) CT_FAIL(__VA_ARGS__);                                             \
    } while (0)
#define CT_OK(call)                                                                    \
    do {                                                                               \
        ucs_status_t _s = (call);                                                      \
        if (_s != UCS_OK) CT_FAIL("%s returned status %d", #call, (int)_s);            \
    } while (0)
#define CT_SKIP(...)                                                                   \
    do {                                                                               \
        fprintf(stderr, "    %s skipped: ", ct_current);                               \
        fprintf(stderr, __VA_ARGS__);                                                  \
        fputc('\n', stderr);                                                           \
        exit(77);                                                                      \
    } while (0)

/* What a callback saw. Callbacks find it through user_data (nbx) or the request's
 * application area (the legacy _nb calls). */
struct ct_rec {
    int calls;
    int inside_progress; /* calls made while ct_progress was running */
    ucs_status_t status;
    void *req;
    void *user_data;
    ucp_tag_t tag;
    size_t length;
    int free_in_cb; /* the callback frees its request */
};

/* Bytes of application area in every request (ucp_params_t::request_size). */
#define CT_REQ_AREA 64
#define CT_REQ_MAGIC 0x52756378u
/* The application area of a request: ct_req_init writes the magic into it. */
struct ct_req_area {
    uint32_t magic;
    struct ct_rec *rec; /* for the legacy callbacks */
};

/* A context and two workers of this process, connected both ways: ep[i] goes from w[i]
 * to w[1 - i]. */
struct ct_pair {
    ucp_context_h ctx;
    ucp_worker_h w[2];
    ucp_ep_h ep[2];
    struct ct_rec err[2]; /* error callbacks of ep[i] */
};

enum { CT_PEER_ERRORS = 1 }; /* ct_pair_init flags: UCP_ERR_HANDLING_MODE_PEER endpoints */

void ct_pair_init(struct ct_pair *p, int flags);
void ct_pair_fini(struct ct_pair *p);
/* Progresses both workers once. */
void ct_progress(struct ct_pair *p);
/* Progresses both workers n times. */
void ct_progress_n(struct ct_pair *p, int n);
/* Progresses both until `req` (a ucs_status_ptr_t) completes, frees it, returns its
 * status (UCS_OK for NULL, the error for an error pointer). Fails after 10 s. */
ucs_status_t ct_wait(struct ct_pair *p, void *req);
/* Progresses both until *flag is non-zero; fails after 10 s. */
void ct_wait_flag(struct ct_pair *p, volatile int *flag);

ucp_context_h ct_context(uint64_t features);
ucp_worker_h ct_worker(ucp_context_h ctx);
ucp_ep_h ct_ep(ucp_worker_h w, const ucp_address_t *addr, int flags, struct ct_rec *err);
/* A listener on 127.0.0.1 (a free port) calling cb(req, arg) for each connection
 * request; its address in *at. */
struct sockaddr_in;
ucp_listener_h ct_listen(ucp_worker_h w, ucp_listener_conn_callback_t cb, void *arg,
                         struct sockaddr_in *at);
/* The error handler ct_ep installs: records into the ct_rec given as its argument. */
void ct_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status);

/* Request parameters for a contiguous buffer: a send/recv callback (ct_send_cb /
 * ct_recv_cb recording into rec) when rec is not NULL. */
ucp_request_param_t ct_send_param(struct ct_rec *rec);
ucp_request_param_t ct_recv_param(struct ct_rec *rec);
void ct_send_cb(void *req, ucs_status_t status, void *user_data);
void ct_recv_cb(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info,
                void *user_data);

/* A buffer of n bytes filled from seed, and its check. */
char *ct_pattern(size_t n, unsigned seed);
int ct_pattern_ok(const char *b, size_t n, unsigned seed);

/* Whether ct_progress is running (callbacks record it). */
extern int ct_in_progress;

/* An eager and a rendezvous size for every library here. */
enum { CT_SMALL = 8, CT_LARGE = 4 << 20 };

#endif
