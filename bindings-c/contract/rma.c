/* RMA: flush and fence, mem_map and remote key lifetimes. */
#include "contract.h"

#include <string.h>
#include <time.h>

/* Region of `len` bytes mapped on w[1] (allocated by the library when alloc), its key
 * unpacked on ep[0]. */
struct region {
    ucp_mem_h memh;
    void *base;
    size_t len;
    ucp_rkey_h rkey;
};

static void region_map(struct ct_pair *p, struct region *r, size_t len, int alloc)
{
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = len;
    if (alloc) {
        mp.address = NULL;
        mp.flags = UCP_MEM_MAP_ALLOCATE;
    } else {
        r->base = calloc(1, len);
        mp.address = r->base;
    }
    CT_OK(ucp_mem_map(p->ctx, &mp, &r->memh));
    ucp_mem_attr_t ma;
    memset(&ma, 0, sizeof(ma));
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    CT_OK(ucp_mem_query(r->memh, &ma));
    CT_CHECK(ma.address != NULL && ma.length >= len, "mem_query: %p %zu", ma.address,
             ma.length);
    if (!alloc) CT_CHECK(ma.address == r->base, "mem_query address");
    r->base = ma.address;
    r->len = len;
    void *packed;
    size_t plen;
    CT_OK(ucp_rkey_pack(p->ctx, r->memh, &packed, &plen));
    /* The packed key outlives its buffer: copy, release, then unpack the copy. */
    void *copy = malloc(plen);
    memcpy(copy, packed, plen);
    ucp_rkey_buffer_release(packed);
    CT_OK(ucp_ep_rkey_unpack(p->ep[0], copy, &r->rkey));
    memset(copy, 0xee, plen);
    free(copy);
}

static void region_unmap(struct ct_pair *p, struct region *r, int alloc)
{
    ucp_rkey_destroy(r->rkey);
    CT_OK(ucp_mem_unmap(p->ctx, r->memh));
    if (!alloc) free(r->base);
}

static ucs_status_t flush(struct ct_pair *p, int ep)
{
    ucp_request_param_t fp;
    memset(&fp, 0, sizeof(fp));
    void *r = ep ? ucp_ep_flush_nbx(p->ep[0], &fp) : ucp_worker_flush_nbx(p->w[0], &fp);
    return ct_wait(p, r);
}

/* Puts posted with put_nbi are in the target's memory once a worker or endpoint flush
 * completes; a key unpacked from a copy of the packed buffer works after the buffer was
 * released. */
static void put_then_flush(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    for (int alloc = 0; alloc < 2; alloc++) {
        for (int ep = 0; ep < 2; ep++) {
            struct region r;
            region_map(&p, &r, 1 << 20, alloc);
            char *src = ct_pattern(1 << 20, alloc * 2 + ep);
            ucp_request_param_t pp;
            memset(&pp, 0, sizeof(pp));
            for (size_t off = 0; off < r.len; off += 4096) {
                void *q = ucp_put_nbx(p.ep[0], src + off, 4096, (uint64_t)(uintptr_t)r.base + off,
                                      r.rkey, &pp);
                CT_CHECK(!UCS_PTR_IS_ERR(q), "put");
                if (q != NULL) ucp_request_free(q);
            }
            CT_OK(flush(&p, ep));
            CT_CHECK(ct_pattern_ok(r.base, r.len, alloc * 2 + ep),
                     "%s memory, %s flush: the target lacks data", alloc ? "allocated" : "user",
                     ep ? "ep" : "worker");
            free(src);
            region_unmap(&p, &r, alloc);
        }
    }
    ct_pair_fini(&p);
}

/* A fence orders puts to one location: the value written after the fence is the one left. */
static void fence_orders_puts(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct region r;
    region_map(&p, &r, 4096, 0);
    uint64_t v[64];
    ucp_request_param_t pp;
    memset(&pp, 0, sizeof(pp));
    for (int round = 0; round < 64; round++) {
        v[round] = 1000 + round;
        void *q = ucp_put_nbx(p.ep[0], &v[round], 8, (uint64_t)(uintptr_t)r.base, r.rkey, &pp);
        CT_CHECK(!UCS_PTR_IS_ERR(q), "put");
        if (q != NULL) ucp_request_free(q);
        CT_OK(ucp_worker_fence(p.w[0]));
    }
    CT_OK(flush(&p, 0));
    CT_CHECK(*(uint64_t *)r.base == 1063, "after 64 fenced puts the target holds %llu",
             (unsigned long long)*(uint64_t *)r.base);
    region_unmap(&p, &r, 0);
    ct_pair_fini(&p);
}

/* A get after a flushed put reads what the put wrote; atomics return the old value. */
static void get_and_atomic_after_flush(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct region r;
    region_map(&p, &r, 4096, 1);
    uint64_t val = 41, back = 0;
    ucp_request_param_t pp;
    memset(&pp, 0, sizeof(pp));
    void *q = ucp_put_nbx(p.ep[0], &val, 8, (uint64_t)(uintptr_t)r.base, r.rkey, &pp);
    CT_CHECK(!UCS_PTR_IS_ERR(q), "put");
    CT_OK(ct_wait(&p, q));
    CT_OK(flush(&p, 1));
    CT_OK(ct_wait(&p, ucp_get_nbx(p.ep[0], &back, 8, (uint64_t)(uintptr_t)r.base, r.rkey, &pp)));
    CT_CHECK(back == 41, "get read %llu", (unsigned long long)back);
    uint64_t add = 1, old = 0;
    ucp_request_param_t ap;
    memset(&ap, 0, sizeof(ap));
    ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    ap.datatype = ucp_dt_make_contig(8);
    ap.reply_buffer = &old;
    CT_OK(ct_wait(&p, ucp_atomic_op_nbx(p.ep[0], UCP_ATOMIC_OP_ADD, &add, 1,
                                        (uint64_t)(uintptr_t)r.base, r.rkey, &ap)));
    CT_CHECK(old == 41 && *(uint64_t *)r.base == 42, "fetch-add: old %llu, now %llu",
             (unsigned long long)old, (unsigned long long)*(uint64_t *)r.base);
    region_unmap(&p, &r, 1);
    ct_pair_fini(&p);
}

/* Keys and mappings: several keys of one mapping live side by side, a key destroyed
 * before the mapping goes first, and a region mapped, unmapped and mapped again gets a
 * working new key. */
static void key_lifetimes(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    for (int round = 0; round < 3; round++) {
        struct region r;
        region_map(&p, &r, 65536, round == 1);
        void *packed;
        size_t plen;
        ucp_rkey_h second;
        CT_OK(ucp_rkey_pack(p.ctx, r.memh, &packed, &plen));
        CT_OK(ucp_ep_rkey_unpack(p.ep[0], packed, &second));
        ucp_rkey_buffer_release(packed);
        uint64_t a = 7 + round, b = 9 + round;
        ucp_request_param_t pp;
        memset(&pp, 0, sizeof(pp));
        CT_OK(ct_wait(&p, ucp_put_nbx(p.ep[0], &a, 8, (uint64_t)(uintptr_t)r.base, r.rkey, &pp)));
        CT_OK(ct_wait(&p, ucp_put_nbx(p.ep[0], &b, 8, (uint64_t)(uintptr_t)r.base + 8, second, &pp)));
        CT_OK(flush(&p, 0));
        CT_CHECK(((uint64_t *)r.base)[0] == a && ((uint64_t *)r.base)[1] == b, "round %d", round);
        ucp_rkey_destroy(second);
        region_unmap(&p, &r, round == 1);
    }
    ct_pair_fini(&p);
}

/* ucp_rkey_ptr gives a local pointer through which stores reach the target's memory, or
 * UCS_ERR_UNREACHABLE where the memory cannot be mapped; for library-allocated and user
 * memory alike. */
static void rkey_ptr_reaches_the_target(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    int mapped = 0;
    for (int alloc = 0; alloc < 2; alloc++) {
        struct region r;
        region_map(&p, &r, 1 << 16, alloc);
        void *local = NULL;
        ucs_status_t s = ucp_rkey_ptr(r.rkey, (uint64_t)(uintptr_t)r.base + 4096, &local);
        CT_CHECK(s == UCS_OK || s == UCS_ERR_UNREACHABLE, "ucp_rkey_ptr: status %d", (int)s);
        if (s == UCS_OK) {
            mapped++;
            CT_CHECK(local != NULL, "UCS_OK with a NULL pointer");
            memcpy(local, "through the mapping", 20);
            CT_CHECK(memcmp((char *)r.base + 4096, "through the mapping", 20) == 0,
                     "a store through ucp_rkey_ptr's pointer did not reach the target");
        }
        region_unmap(&p, &r, alloc);
    }
    (void)mapped;
    ct_pair_fini(&p);
}

/* What OpenMPI's osc/ucx does for MPI_REPLACE in MPI_Get_accumulate and MPI_Fetch_and_op:
 * a get of the old value, then a put of the new one to the same address, on one
 * endpoint, then a flush. The get reads the value from before the put, and the flush
 * completes both. For user and library-allocated memory, _nbi and _nbx calls, endpoint
 * and worker flush, a word and 1 KiB (a reply a library may build in place). */
static void get_then_put_keeps_order(void)
{
    enum { WORDS = 128 };
    struct ct_pair p;
    ct_pair_init(&p, 0);
    for (int alloc = 0; alloc < 2; alloc++) {
        for (int variant = 0; variant < 8; variant++) {
            int nbx = variant & 1, ep = (variant >> 1) & 1;
            size_t words = (variant & 4) ? WORDS : 1, len = words * 8;
            struct region r;
            region_map(&p, &r, 4096, alloc);
            uint64_t addr = (uint64_t)(uintptr_t)r.base + 64;
            ucp_request_param_t pp;
            memset(&pp, 0, sizeof(pp));
            for (int round = 0; round < 16; round++) {
                uint64_t first[WORDS], second[WORDS], old[WORDS];
                for (size_t i = 0; i < WORDS; i++) {
                    first[i] = 1000 + round + i;
                    second[i] = 0;
                    old[i] = 0xdead;
                }
                CT_OK(ct_wait(&p, ucp_put_nbx(p.ep[0], first, len, addr, r.rkey, &pp)));
                CT_OK(flush(&p, ep));
                if (nbx) {
                    void *g = ucp_get_nbx(p.ep[0], old, len, addr, r.rkey, &pp);
                    CT_CHECK(!UCS_PTR_IS_ERR(g), "get_nbx");
                    void *q = ucp_put_nbx(p.ep[0], second, len, addr, r.rkey, &pp);
                    CT_CHECK(!UCS_PTR_IS_ERR(q), "put_nbx");
                    if (g != NULL) ucp_request_free(g);
                    if (q != NULL) ucp_request_free(q);
                } else {
                    ucs_status_t s = ucp_get_nbi(p.ep[0], old, len, addr, r.rkey);
                    CT_CHECK(s == UCS_OK || s == UCS_INPROGRESS, "get_nbi: %d", (int)s);
                    s = ucp_put_nbi(p.ep[0], second, len, addr, r.rkey);
                    CT_CHECK(s == UCS_OK || s == UCS_INPROGRESS, "put_nbi: %d", (int)s);
                }
                CT_OK(flush(&p, ep));
                for (size_t i = 0; i < words; i++) {
                    CT_CHECK(old[i] == first[i],
                             "%s memory, %s, %s flush, %zu bytes, round %d: the get read "
                             "%llu at word %zu, not the value before the put (%llu)",
                             alloc ? "allocated" : "user", nbx ? "nbx" : "nbi",
                             ep ? "ep" : "worker", len, round, (unsigned long long)old[i],
                             i, (unsigned long long)first[i]);
                    CT_CHECK(((volatile uint64_t *)(r.base + 64))[i] == 0,
                             "the put's value is not in the target after the flush");
                }
            }
            region_unmap(&p, &r, alloc);
        }
    }
    ct_pair_fini(&p);
}

/* A flush completes every get posted before it: many small gets, _nbi, of scattered
 * words, all present once one worker flush returns. */
static void flush_completes_gets(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    for (int alloc = 0; alloc < 2; alloc++) {
        struct region r;
        region_map(&p, &r, 1 << 16, alloc);
        uint32_t *t = r.base;
        for (size_t i = 0; i < (1 << 14); i++) t[i] = (uint32_t)(i * 2654435761u);
        uint32_t got[512];
        memset(got, 0, sizeof(got));
        for (int i = 0; i < 512; i++) {
            size_t at = ((size_t)i * 37) % (1 << 14);
            ucs_status_t s = ucp_get_nbi(p.ep[0], &got[i], 4,
                                         (uint64_t)(uintptr_t)r.base + at * 4, r.rkey);
            CT_CHECK(s == UCS_OK || s == UCS_INPROGRESS, "get_nbi: %d", (int)s);
        }
        CT_OK(flush(&p, 0));
        for (int i = 0; i < 512; i++) {
            size_t at = ((size_t)i * 37) % (1 << 14);
            CT_CHECK(got[i] == (uint32_t)(at * 2654435761u),
                     "%s memory: get %d holds %u after the flush",
                     alloc ? "allocated" : "user", i, got[i]);
        }
        region_unmap(&p, &r, alloc);
    }
    ct_pair_fini(&p);
}

/* An atomic either does what it says or is refused: operand sizes other than 4 and 8
 * bytes (UCX refuses them) never come back as a wrong value. */
static void atomics_right_or_refused(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct region r;
    region_map(&p, &r, 4096, 0);
    size_t sizes[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t sz = sizes[k];
        unsigned char *t = (unsigned char *)r.base + 128;
        memset(t, 0, 16);
        t[0] = 5;
        unsigned char add[16] = {3}, old[16];
        memset(old, 0xa5, sizeof(old));
        ucp_request_param_t ap;
        memset(&ap, 0, sizeof(ap));
        ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        ap.datatype = ucp_dt_make_contig(sz);
        ap.reply_buffer = old;
        void *q = ucp_atomic_op_nbx(p.ep[0], UCP_ATOMIC_OP_ADD, add, 1,
                                    (uint64_t)(uintptr_t)t, r.rkey, &ap);
        ucs_status_t s = UCS_PTR_IS_ERR(q) ? UCS_PTR_STATUS(q) : ct_wait(&p, q);
        if (s != UCS_OK) {
            CT_CHECK(t[0] == 5, "a refused %zu-byte atomic changed the target", sz);
            continue;
        }
        CT_OK(flush(&p, 0));
        CT_CHECK(old[0] == 5 && t[0] == 8,
                 "%zu-byte fetch-add done: old %u (want 5), target %u (want 8)", sz, old[0],
                 t[0]);
    }
    region_unmap(&p, &r, 0);
    ct_pair_fini(&p);
}

/* ucp_mem_map of zero bytes gives a handle (with and without an address, with and
 * without ALLOCATE) whose key packs and unpacks, and that unmaps. */
static void zero_length_mem_map(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char buf[8];
    for (int k = 0; k < 3; k++) {
        ucp_mem_map_params_t mp;
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.length = 0;
        mp.address = k == 0 ? buf : NULL;
        mp.flags = k == 2 ? UCP_MEM_MAP_ALLOCATE : 0;
        ucp_mem_h memh;
        CT_OK(ucp_mem_map(p.ctx, &mp, &memh));
        void *packed;
        size_t plen;
        CT_OK(ucp_rkey_pack(p.ctx, memh, &packed, &plen));
        ucp_rkey_h rkey;
        CT_OK(ucp_ep_rkey_unpack(p.ep[0], packed, &rkey));
        ucp_rkey_buffer_release(packed);
        ucp_rkey_destroy(rkey);
        CT_OK(ucp_mem_unmap(p.ctx, memh));
    }
    ct_pair_fini(&p);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A key packed before its context has any worker is unpacked by a peer once the
 * application has made its worker and connected it, and a put through it lands; a
 * context that packed a key and never made a worker cleans up. */
static void rkey_packed_before_any_worker(void)
{
    ucp_context_h tctx = ct_context(UCP_FEATURE_RMA | UCP_FEATURE_TAG);
    static uint64_t target[4];
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = target;
    mp.length = sizeof(target);
    ucp_mem_h memh;
    CT_OK(ucp_mem_map(tctx, &mp, &memh));
    void *packed;
    size_t plen;
    CT_OK(ucp_rkey_pack(tctx, memh, &packed, &plen));
    /* Only now the workers: the target's, and an initiator in another context. */
    ucp_worker_h tw = ct_worker(tctx);
    ucp_context_h ictx = ct_context(UCP_FEATURE_RMA | UCP_FEATURE_TAG);
    ucp_worker_h iw = ct_worker(ictx);
    ucp_address_t *ta, *ia;
    size_t tl, il;
    CT_OK(ucp_worker_get_address(tw, &ta, &tl));
    CT_OK(ucp_worker_get_address(iw, &ia, &il));
    ucp_ep_h ep = ct_ep(iw, ta, 0, NULL);
    ucp_ep_h back = ct_ep(tw, ia, 0, NULL);
    ucp_worker_release_address(tw, ta);
    ucp_worker_release_address(iw, ia);
    ucp_rkey_h rkey;
    CT_OK(ucp_ep_rkey_unpack(ep, packed, &rkey));
    uint64_t v = 0x5eed0000cafe0001ull;
    ucp_request_param_t pp;
    memset(&pp, 0, sizeof(pp));
    void *r = ucp_put_nbx(ep, &v, sizeof(v), (uint64_t)(uintptr_t)&target[1], rkey, &pp);
    CT_CHECK(!UCS_PTR_IS_ERR(r), "put");
    memset(&pp, 0, sizeof(pp));
    void *f = ucp_ep_flush_nbx(ep, &pp);
    void *reqs[2] = {r, f};
    double t0 = now();
    for (int k = 0; k < 2; k++) {
        while (reqs[k] != NULL && ucp_request_check_status(reqs[k]) == UCS_INPROGRESS) {
            ucp_worker_progress(iw);
            ucp_worker_progress(tw);
            CT_CHECK(now() - t0 < 10, "the put did not complete");
        }
        if (reqs[k] != NULL) {
            CT_CHECK(ucp_request_check_status(reqs[k]) == UCS_OK, "request %d", k);
            ucp_request_free(reqs[k]);
        }
    }
    CT_CHECK(target[1] == v, "the target holds %llx", (unsigned long long)target[1]);
    ucp_rkey_destroy(rkey);
    ucp_rkey_buffer_release(packed);
    ucp_request_param_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    (void)ucp_ep_close_nbx(ep, &cp);
    (void)ucp_ep_close_nbx(back, &cp);
    CT_OK(ucp_mem_unmap(tctx, memh));
    ucp_worker_destroy(iw);
    ucp_worker_destroy(tw);
    ucp_cleanup(ictx);
    ucp_cleanup(tctx);
    /* Packed, and no worker ever. */
    ucp_context_h lone = ct_context(UCP_FEATURE_RMA);
    CT_OK(ucp_mem_map(lone, &mp, &memh));
    CT_OK(ucp_rkey_pack(lone, memh, &packed, &plen));
    ucp_rkey_buffer_release(packed);
    CT_OK(ucp_mem_unmap(lone, memh));
    ucp_cleanup(lone);
}

const struct ct_test ct_rma[] = {
    {"put_then_flush", "put_nbi data is in the target once a worker or endpoint flush completes, for user and library-allocated memory; a key unpacked from a copy works after ucp_rkey_buffer_release", put_then_flush},
    {"fence_orders_puts", "ucp_worker_fence orders puts to one location: the last value written stays", fence_orders_puts},
    {"get_and_atomic_after_flush", "a get after a flushed put reads the new value; a fetching atomic returns the old one", get_and_atomic_after_flush},
    {"rkey_ptr_reaches_the_target", "ucp_rkey_ptr gives a pointer through which stores reach the target's memory, or UCS_ERR_UNREACHABLE", rkey_ptr_reaches_the_target},
    {"key_lifetimes", "several keys of one mapping work side by side; destroying keys before unmapping, and mapping again, work", key_lifetimes},
    {"get_then_put_keeps_order", "a get then a put to the same address on one endpoint (8 B and 1 KiB): the get reads the old value and a flush completes both (OpenMPI's MPI_REPLACE)", get_then_put_keeps_order},
    {"flush_completes_gets", "a flush completes every get posted before it", flush_completes_gets},
    {"rkey_packed_before_any_worker", "a key packed before its context has a worker is unpacked by a peer once the worker exists and is connected, and a put through it lands; a context that packed a key and never made a worker cleans up", rkey_packed_before_any_worker},
    {"zero_length_mem_map", "ucp_mem_map of zero bytes (with or without an address, or ALLOCATE) gives a handle whose key packs, unpacks and is destroyed, and that unmaps", zero_length_mem_map},
    {"atomics_right_or_refused", "an atomic of an operand size UCX may not support is refused, or done right; never a wrong value", atomics_right_or_refused},
    {0},
};
