/* Worker addresses: copies outlive the release, one address serves several endpoints. */
#include "contract.h"

#include <string.h>

static void exchange(ucp_worker_h from, ucp_ep_h ep, ucp_worker_h to, ucp_tag_t tag)
{
    struct ct_pair p = {.w = {from, to}};
    char src[16] = "address-test-xx", dst[16] = {0};
    src[14] = (char)tag;
    ucp_request_param_t sp = ct_send_param(NULL), rp = ct_recv_param(NULL);
    void *r = ucp_tag_recv_nbx(to, dst, 16, tag, ~0ull, &rp);
    void *s = ucp_tag_send_nbx(ep, src, 16, tag, &sp);
    CT_OK(ct_wait(&p, s));
    CT_OK(ct_wait(&p, r));
    CT_CHECK(memcmp(src, dst, 16) == 0, "data");
}

/* A copy of a worker address made before ucp_worker_release_address connects; two
 * endpoints made from one address reach the same worker; a second get_address gives an
 * address that connects too. */
static void address_copies_and_reuse(void)
{
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG);
    ucp_worker_h a = ct_worker(ctx), b = ct_worker(ctx);
    ucp_address_t *addr;
    size_t len;
    CT_OK(ucp_worker_get_address(b, &addr, &len));
    CT_CHECK(len > 0, "address length");
    void *copy = malloc(len);
    memcpy(copy, addr, len);
    ucp_worker_release_address(b, addr);
    ucp_ep_h e1 = ct_ep(a, copy, 0, NULL);
    ucp_ep_h e2 = ct_ep(a, copy, 0, NULL);
    memset(copy, 0, len); /* the endpoints keep nothing of it */
    free(copy);
    exchange(a, e1, b, 1);
    exchange(a, e2, b, 2);
    exchange(a, e1, b, 3);
    ucp_address_t *again;
    CT_OK(ucp_worker_get_address(b, &again, &len));
    ucp_ep_h e3 = ct_ep(a, again, 0, NULL);
    ucp_worker_release_address(b, again);
    exchange(a, e3, b, 4);
    struct ct_pair p = {.w = {a, b}};
    ucp_request_param_t cp;
    memset(&cp, 0, sizeof(cp));
    CT_OK(ct_wait(&p, ucp_ep_close_nbx(e1, &cp)));
    /* Closing one endpoint leaves the others working. */
    exchange(a, e2, b, 5);
    exchange(a, e3, b, 6);
    CT_OK(ct_wait(&p, ucp_ep_close_nbx(e2, &cp)));
    CT_OK(ct_wait(&p, ucp_ep_close_nbx(e3, &cp)));
    ucp_worker_destroy(a);
    ucp_worker_destroy(b);
    ucp_cleanup(ctx);
}

/* ucp_worker_query with UCP_WORKER_ATTR_FIELD_ADDRESS gives an address that connects, and
 * it is released with ucp_worker_release_address. */
static void address_from_worker_query(void)
{
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG);
    ucp_worker_h a = ct_worker(ctx), b = ct_worker(ctx);
    ucp_worker_attr_t wa;
    memset(&wa, 0, sizeof(wa));
    wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    CT_OK(ucp_worker_query(b, &wa));
    CT_CHECK(wa.address != NULL && wa.address_length > 0, "query address");
    ucp_ep_h e = ct_ep(a, wa.address, 0, NULL);
    ucp_worker_release_address(b, wa.address);
    exchange(a, e, b, 7);
    struct ct_pair p = {.w = {a, b}};
    ucp_request_param_t cp;
    memset(&cp, 0, sizeof(cp));
    CT_OK(ct_wait(&p, ucp_ep_close_nbx(e, &cp)));
    ucp_worker_destroy(a);
    ucp_worker_destroy(b);
    ucp_cleanup(ctx);
}

const struct ct_test ct_address[] = {
    {"address_copies_and_reuse", "a copy of a worker address outlives its release; several endpoints from one address reach the same worker; closing one leaves the others", address_copies_and_reuse},
    {"address_from_worker_query", "ucp_worker_query's address connects and is released with ucp_worker_release_address", address_from_worker_query},
    {0},
};
