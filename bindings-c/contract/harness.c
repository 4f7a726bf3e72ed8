/* The contract suite's runner and shared helpers (see contract.h). */
#include "contract.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *ct_current = "";
int ct_in_progress;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void ct_req_init(void *request)
{
    struct ct_req_area *a = request;
    a->magic = CT_REQ_MAGIC;
    a->rec = NULL;
}

ucp_context_h ct_context(uint64_t features)
{
    ucp_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                   UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    p.features = features;
    p.request_size = CT_REQ_AREA;
    p.request_init = ct_req_init;
    p.mt_workers_shared = 0;
    ucp_config_t *cfg;
    CT_OK(ucp_config_read(NULL, NULL, &cfg));
    ucp_context_h ctx;
    CT_OK(ucp_init(&p, cfg, &ctx));
    ucp_config_release(cfg);
    return ctx;
}

ucp_worker_h ct_worker(ucp_context_h ctx)
{
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h w;
    CT_OK(ucp_worker_create(ctx, &wp, &w));
    return w;
}

void ct_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct ct_rec *r = arg;
    r->calls++;
    r->status = status;
    r->req = ep;
    r->inside_progress += ct_in_progress;
}

ucp_ep_h ct_ep(ucp_worker_h w, const ucp_address_t *addr, int flags, struct ct_rec *err)
{
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = addr;
    if (flags & CT_PEER_ERRORS) {
        ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        ep.err_handler.cb = ct_err_cb;
        ep.err_handler.arg = err;
    }
    ucp_ep_h e;
    CT_OK(ucp_ep_create(w, &ep, &e));
    return e;
}

void ct_progress(struct ct_pair *p)
{
    ct_in_progress = 1;
    ucp_worker_progress(p->w[0]);
    ucp_worker_progress(p->w[1]);
    ct_in_progress = 0;
}

void ct_progress_n(struct ct_pair *p, int n)
{
    for (int i = 0; i < n; i++) ct_progress(p);
}

ucs_status_t ct_wait(struct ct_pair *p, void *req)
{
    if (req == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    double t0 = now();
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ct_progress(p);
        CT_CHECK(now() - t0 < 10, "request %p did not complete in 10 s", req);
    }
    ucp_request_free(req);
    return s;
}

void ct_wait_flag(struct ct_pair *p, volatile int *flag)
{
    double t0 = now();
    while (!*flag) {
        ct_progress(p);
        CT_CHECK(now() - t0 < 10, "no completion in 10 s");
    }
}

void ct_pair_init(struct ct_pair *p, int flags)
{
    memset(p, 0, sizeof(*p));
    p->ctx = ct_context(UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64 |
                        UCP_FEATURE_AM);
    ucp_address_t *a[2];
    size_t len[2];
    for (int i = 0; i < 2; i++) {
        p->w[i] = ct_worker(p->ctx);
        CT_OK(ucp_worker_get_address(p->w[i], &a[i], &len[i]));
    }
    for (int i = 0; i < 2; i++) p->ep[i] = ct_ep(p->w[i], a[1 - i], flags, &p->err[i]);
    for (int i = 0; i < 2; i++) ucp_worker_release_address(p->w[i], a[i]);
    /* One message each way, so wire-up is done before the test's first operation. */
    for (int i = 0; i < 2; i++) {
        char s = 'x', r = 0;
        ucp_request_param_t rp = ct_recv_param(NULL), sp = ct_send_param(NULL);
        void *rr = ucp_tag_recv_nbx(p->w[1 - i], &r, 1, 0xffff, ~0ull, &rp);
        void *sr = ucp_tag_send_nbx(p->ep[i], &s, 1, 0xffff, &sp);
        CT_OK(ct_wait(p, sr));
        CT_OK(ct_wait(p, rr));
        CT_CHECK(r == 'x', "warm-up message");
    }
}

void ct_pair_fini(struct ct_pair *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->ep[i] == NULL) continue;
        ucp_request_param_t cp;
        memset(&cp, 0, sizeof(cp));
        cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        void *r = ucp_ep_close_nbx(p->ep[i], &cp);
        if (r != NULL && !UCS_PTR_IS_ERR(r)) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS) ct_progress(p);
            ucp_request_free(r);
        }
    }
    for (int i = 0; i < 2; i++) ucp_worker_destroy(p->w[i]);
    ucp_cleanup(p->ctx);
}

ucp_request_param_t ct_send_param(struct ct_rec *rec)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    if (rec != NULL) {
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = ct_send_cb;
        p.user_data = rec;
    }
    return p;
}

ucp_request_param_t ct_recv_param(struct ct_rec *rec)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    if (rec != NULL) {
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.recv = ct_recv_cb;
        p.user_data = rec;
    }
    return p;
}

void ct_send_cb(void *req, ucs_status_t status, void *user_data)
{
    struct ct_rec *r = user_data;
    r->calls++;
    r->status = status;
    r->req = req;
    r->user_data = user_data;
    r->inside_progress += ct_in_progress;
    if (r->free_in_cb) ucp_request_free(req);
}

void ct_recv_cb(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info,
                void *user_data)
{
    struct ct_rec *r = user_data;
    r->calls++;
    r->status = status;
    r->req = req;
    r->user_data = user_data;
    r->inside_progress += ct_in_progress;
    if (info != NULL) {
        r->tag = info->sender_tag;
        r->length = info->length;
    }
    if (r->free_in_cb) ucp_request_free(req);
}

char *ct_pattern(size_t n, unsigned seed)
{
    char *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) b[i] = (char)(i * 31 + seed * 7 + (i >> 12));
    return b;
}

int ct_pattern_ok(const char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (char)(i * 31 + seed * 7 + (i >> 12))) return 0;
    return 1;
}

static const struct {
    const char *area;
    const struct ct_test *tests;
} areas[] = {
    {"requests", ct_requests}, {"callbacks", ct_callbacks}, {"tag", ct_tag},
    {"rma", ct_rma},           {"ep", ct_endpoints},               {"address", ct_address},
    {"worker", ct_worker_tests}, {"am", ct_am}, {"config", ct_config},
    {"abi119", ct_abi119},
};

static int selected(const char *full, int argc, char **argv)
{
    if (argc == 0) return 1;
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], full) == 0 || strncmp(argv[i], full, strlen(argv[i])) == 0)
            return 1;
    return 0;
}

/* Usage: contract [-l] [-t SECONDS] [NAME-OR-PREFIX ...]
 *   -l  list the tests and their promises instead of running them. */
int main(int argc, char **argv)
{
    int list = 0, limit = 30;
    int opt;
    while ((opt = getopt(argc, argv, "lt:")) != -1) {
        if (opt == 'l') list = 1;
        else if (opt == 't') limit = atoi(optarg);
        else return 2;
    }
    argc -= optind;
    argv += optind;
    int pass = 0, fail = 0, skip = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t a = 0; a < sizeof(areas) / sizeof(areas[0]); a++) {
        for (const struct ct_test *t = areas[a].tests; t->name != NULL; t++) {
            char full[128];
            snprintf(full, sizeof(full), "%s.%s", areas[a].area, t->name);
            if (!selected(full, argc, argv)) continue;
            if (list) {
                printf("%s\t%s\n", full, t->promise);
                continue;
            }
            fflush(stdout);
            fflush(stderr);
            double t0 = now();
            pid_t pid = fork();
            if (pid == 0) {
                ct_current = full;
                alarm(limit);
                t->fn();
                exit(0);
            }
            int st = 0;
            waitpid(pid, &st, 0);
            double dt = now() - t0;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                printf("PASS %s (%.2f s)\n", full, dt);
                pass++;
            } else if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
                printf("SKIP %s\n", full);
                skip++;
            } else if (WIFSIGNALED(st)) {
                printf("FAIL %s (%s)\n", full,
                       WTERMSIG(st) == SIGALRM ? "timed out" : strsignal(WTERMSIG(st)));
                fail++;
            } else {
                printf("FAIL %s (exit %d)\n", full, WEXITSTATUS(st));
                fail++;
            }
        }
    }
    if (!list) printf("contract: %d passed, %d failed, %d skipped\n", pass, fail, skip);
    return fail ? 1 : 0;
}

ucp_listener_h ct_listen(ucp_worker_h w, ucp_listener_conn_callback_t cb, void *arg,
                         struct sockaddr_in *at)
{
    ucp_listener_params_t lp;
    memset(&lp, 0, sizeof(lp));
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr *)&sin;
    lp.sockaddr.addrlen = sizeof(sin);
    lp.conn_handler.cb = cb;
    lp.conn_handler.arg = arg;
    ucp_listener_h l;
    CT_OK(ucp_listener_create(w, &lp, &l));
    ucp_listener_attr_t la;
    memset(&la, 0, sizeof(la));
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    CT_OK(ucp_listener_query(l, &la));
    memcpy(at, &la.sockaddr, sizeof(*at));
    return l;
}
