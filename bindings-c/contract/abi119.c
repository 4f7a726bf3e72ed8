/* What UCX 1.14 to 1.19 added to ucp.h: the endpoint's transports and user data in
 * ucp_ep_query, ucp_dt_query, ucp_rkey_compare, ucp_memh_pack's export, the new
 * ucp_mem_map flags, UCP_AM_SEND_FLAG_COPY_HEADER; and calls of ucp_compat.h that 1.19
 * still declares (the _nbr tag calls, the blocking atomics).
 *
 * Built against headers older than 1.19 (Debian's 1.13) only the test of the memory-type
 * numbering is compiled: it uses what every version has, with that version's value of
 * UCS_MEMORY_TYPE_UNKNOWN. */
#include "contract.h"

#include <pthread.h>
#include <string.h>

/* Detects the memory type where the application says it does not know it: in a mem_map
 * and in a send and a receive. The value is the headers' own UCS_MEMORY_TYPE_UNKNOWN (5
 * in 1.13's, 9 in 1.19's, 10 in 1.22's). */
static void unknown_memory_type_means_detect(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char *buf = calloc(1, 4096);
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = buf;
    mp.length = 4096;
    mp.memory_type = UCS_MEMORY_TYPE_UNKNOWN;
    ucp_mem_h memh;
    CT_OK(ucp_mem_map(p.ctx, &mp, &memh));
    ucp_mem_attr_t ma;
    memset(&ma, 0, sizeof(ma));
    ma.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
    CT_OK(ucp_mem_query(memh, &ma));
    CT_CHECK(ma.mem_type == UCS_MEMORY_TYPE_HOST, "mapped memory of type %d, not host",
             (int)ma.mem_type);
    CT_OK(ucp_mem_unmap(p.ctx, memh));

    char *src = ct_pattern(CT_LARGE, 3), *dst = calloc(1, CT_LARGE);
    for (size_t len = CT_SMALL; len <= CT_LARGE; len = len == CT_SMALL ? CT_LARGE : len + 1) {
        ucp_request_param_t rp = ct_recv_param(NULL), sp = ct_send_param(NULL);
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        rp.memory_type = UCS_MEMORY_TYPE_UNKNOWN;
        sp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        sp.memory_type = UCS_MEMORY_TYPE_UNKNOWN;
        void *rr = ucp_tag_recv_nbx(p.w[1], dst, len, 5, ~0ull, &rp);
        void *sr = ucp_tag_send_nbx(p.ep[0], src, len, 5, &sp);
        CT_OK(ct_wait(&p, sr));
        CT_OK(ct_wait(&p, rr));
        CT_CHECK(ct_pattern_ok(dst, len, 3), "%zu bytes arrived wrong", len);
    }
    free(src);
    free(dst);
    free(buf);
    ct_pair_fini(&p);
}

#if UCP_API_VERSION >= UCP_VERSION(1, 19)

#define CANARY 0xcd

static int untouched(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != CANARY) return 0;
    return 1;
}

/* Each endpoint direction's transports: n entries of `entry_size` bytes in `buf` (filled
 * with the canary first); returns the count the library reported. */
static unsigned query_transports(ucp_ep_h ep, unsigned char *buf, unsigned n,
                                 size_t entry_size, size_t buf_size)
{
    memset(buf, CANARY, buf_size);
    ucp_ep_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
    a.transports.entries = (ucp_transport_entry_t *)buf;
    a.transports.num_entries = n;
    a.transports.entry_size = entry_size;
    CT_OK(ucp_ep_query(ep, &a));
    CT_CHECK(a.transports.num_entries <= n, "%u entries reported, room for %u",
             a.transports.num_entries, n);
    CT_CHECK(a.transports.entries == (ucp_transport_entry_t *)buf &&
                 a.transports.entry_size == entry_size,
             "the array or its entry size changed");
    return a.transports.num_entries;
}

/* The transports of an endpoint: a transport and a device name for each lane, at most as
 * many entries as the caller has room for, no field written past `entry_size` in an
 * entry, nothing past the entries reported; the names stay valid while the endpoint is
 * open. */
static void ep_query_transports(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    const size_t es = sizeof(ucp_transport_entry_t) + 16; /* 16 canary bytes per entry */
    enum { ROOM = 8 };
    unsigned char buf[ROOM * (sizeof(ucp_transport_entry_t) + 16)];
    unsigned n = query_transports(p.ep[0], buf, ROOM, es, sizeof(buf));
    CT_CHECK(n >= 1, "no transport reported");
    const char *tl0 = NULL, *dev0 = NULL;
    for (unsigned i = 0; i < n; i++) {
        ucp_transport_entry_t e;
        memcpy(&e, buf + i * es, sizeof(e));
        CT_CHECK(e.transport_name != NULL && e.transport_name[0] != '\0',
                 "entry %u: no transport name", i);
        CT_CHECK(e.device_name != NULL, "entry %u: no device name", i);
        CT_CHECK(untouched(buf + i * es + sizeof(e), es - sizeof(e)),
                 "entry %u: written past the entry's fields", i);
        if (i == 0) {
            tl0 = e.transport_name;
            dev0 = e.device_name;
        }
    }
    CT_CHECK(untouched(buf + n * es, sizeof(buf) - n * es), "written past the %u entries", n);

    /* Room for one: one entry, the rest untouched. */
    CT_CHECK(query_transports(p.ep[0], buf, 1, es, sizeof(buf)) == 1, "room for 1");
    CT_CHECK(untouched(buf + sizeof(ucp_transport_entry_t),
                       sizeof(buf) - sizeof(ucp_transport_entry_t)),
             "written past the one entry asked for");
    /* Room for none: none, and a NULL array is not touched. */
    ucp_ep_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
    a.transports.entry_size = sizeof(ucp_transport_entry_t);
    CT_OK(ucp_ep_query(p.ep[0], &a));
    CT_CHECK(a.transports.num_entries == 0, "%u entries in no room", a.transports.num_entries);

    /* Entries of an older, shorter struct (the transport name alone): the device name is
     * not written. */
    unsigned m = query_transports(p.ep[0], buf, ROOM, sizeof(const char *), sizeof(buf));
    CT_CHECK(m == n, "%u entries of 8 bytes, %u of %zu", m, n, es);
    for (unsigned i = 0; i < m; i++) {
        const char *t;
        memcpy(&t, buf + i * sizeof(t), sizeof(t));
        CT_CHECK(t != NULL && t[0] != '\0', "short entry %u: no transport name", i);
    }
    CT_CHECK(untouched(buf + m * sizeof(const char *), sizeof(buf) - m * sizeof(const char *)),
             "written past %u entries of one pointer each", m);

    /* The names handed out first are still readable after traffic and more queries. */
    ucp_request_param_t rp = ct_recv_param(NULL), sp = ct_send_param(NULL);
    char s = 'y', r = 0;
    void *rr = ucp_tag_recv_nbx(p.w[1], &r, 1, 9, ~0ull, &rp);
    CT_OK(ct_wait(&p, ucp_tag_send_nbx(p.ep[0], &s, 1, 9, &sp)));
    CT_OK(ct_wait(&p, rr));
    query_transports(p.ep[0], buf, ROOM, es, sizeof(buf));
    ucp_transport_entry_t e;
    memcpy(&e, buf, sizeof(e));
    CT_CHECK(strcmp(tl0, e.transport_name) == 0 && strcmp(dev0, e.device_name) == 0,
             "the first lane's names changed: %s/%s then %s/%s", tl0, dev0, e.transport_name,
             e.device_name);
    ct_pair_fini(&p);
}

/* A caller built against older headers passes a shorter ucp_ep_attr_t: a query of the
 * older fields writes nothing past remote_sockaddr. */
static void ep_query_leaves_newer_fields_alone(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    union {
        ucp_ep_attr_t a;
        unsigned char b[sizeof(ucp_ep_attr_t)];
    } u;
    const size_t old = offsetof(ucp_ep_attr_t, transports);
    memset(&u, CANARY, sizeof(u));
    u.a.field_mask = UCP_EP_ATTR_FIELD_NAME;
    CT_OK(ucp_ep_query(p.ep[0], &u.a));
    CT_CHECK(u.a.name[0] != (char)CANARY && memchr(u.a.name, 0, sizeof(u.a.name)) != NULL,
             "no name");
    CT_CHECK(untouched(u.b + old, sizeof(u) - old), "written past the 1.13 struct (%zu bytes)",
             old);
    ct_pair_fini(&p);
}

/* UCP_EP_ATTR_FIELD_USER_DATA gives the user data the endpoint was created with, and the
 * one ucp_ep_modify_nb set later. */
static void ep_query_user_data(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    ucp_address_t *addr;
    size_t len;
    CT_OK(ucp_worker_get_address(p.w[1], &addr, &len));
    int mark1, mark2;
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_USER_DATA;
    ep.address = addr;
    ep.user_data = &mark1;
    ucp_ep_h e;
    CT_OK(ucp_ep_create(p.w[0], &ep, &e));
    ucp_worker_release_address(p.w[1], addr);
    ucp_ep_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_EP_ATTR_FIELD_USER_DATA;
    CT_OK(ucp_ep_query(e, &a));
    CT_CHECK(a.user_data == &mark1, "user data %p, created with %p", a.user_data,
             (void *)&mark1);
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_USER_DATA;
    ep.user_data = &mark2;
    CT_OK(ct_wait(&p, ucp_ep_modify_nb(e, &ep)));
    a.user_data = NULL;
    CT_OK(ucp_ep_query(e, &a));
    CT_CHECK(a.user_data == &mark2, "user data %p, modified to %p", a.user_data,
             (void *)&mark2);
    ucp_request_param_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ct_wait(&p, ucp_ep_close_nbx(e, &cp));
    ct_pair_fini(&p);
}

/* The packing callbacks of a generic datatype whose element is 3 bytes packed. */
struct gen_state {
    size_t count;
    int *finished;
};
static int gen_started, gen_finished;
static void *gen_start(void *ctx, const void *buffer, size_t count)
{
    (void)ctx;
    (void)buffer;
    struct gen_state *s = malloc(sizeof(*s));
    s->count = count;
    s->finished = &gen_finished;
    gen_started++;
    return s;
}
static void *gen_start_unpack(void *ctx, void *buffer, size_t count)
{
    return gen_start(ctx, buffer, count);
}
static size_t gen_packed_size(void *state)
{
    return ((struct gen_state *)state)->count * 3;
}
static size_t gen_pack(void *state, size_t offset, void *dest, size_t max)
{
    (void)state;
    (void)offset;
    (void)dest;
    return max;
}
static ucs_status_t gen_unpack(void *state, size_t offset, const void *src, size_t len)
{
    (void)state;
    (void)offset;
    (void)src;
    (void)len;
    return UCS_OK;
}
static void gen_finish(void *state)
{
    struct gen_state *s = state;
    (*s->finished)++;
    free(s);
}

/* ucp_dt_query's packed size: contig from the datatype (count 1 by default), iov from
 * the ucp_dt_iov_t array, generic from its callbacks (each state started is finished);
 * iov and generic without a buffer are refused; nothing asked, nothing written. */
static void dt_query_packed_sizes(void)
{
    ucp_datatype_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE;
    CT_OK(ucp_dt_query(ucp_dt_make_contig(8), &a));
    CT_CHECK(a.packed_size == 8, "contig(8), count 1: %zu", a.packed_size);
    a.field_mask |= UCP_DATATYPE_ATTR_FIELD_COUNT;
    a.count = 10;
    CT_OK(ucp_dt_query(ucp_dt_make_contig(8), &a));
    CT_CHECK(a.packed_size == 80, "contig(8), count 10: %zu", a.packed_size);

    char x[64];
    ucp_dt_iov_t iov[3] = {{x, 5}, {x + 8, 0}, {x + 16, 30}};
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE | UCP_DATATYPE_ATTR_FIELD_BUFFER |
                   UCP_DATATYPE_ATTR_FIELD_COUNT;
    a.buffer = iov;
    a.count = 3;
    CT_OK(ucp_dt_query(ucp_dt_make_iov(), &a));
    CT_CHECK(a.packed_size == 35, "iov of 5, 0 and 30 bytes: %zu", a.packed_size);
    a.field_mask &= ~(uint64_t)UCP_DATATYPE_ATTR_FIELD_BUFFER;
    CT_CHECK(ucp_dt_query(ucp_dt_make_iov(), &a) == UCS_ERR_INVALID_PARAM,
             "iov without its array accepted");

    ucp_generic_dt_ops_t ops = {gen_start, gen_start_unpack, gen_packed_size, gen_pack,
                                gen_unpack, gen_finish};
    ucp_datatype_t dt;
    CT_OK(ucp_dt_create_generic(&ops, NULL, &dt));
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE | UCP_DATATYPE_ATTR_FIELD_BUFFER |
                   UCP_DATATYPE_ATTR_FIELD_COUNT;
    a.buffer = x;
    a.count = 7;
    CT_OK(ucp_dt_query(dt, &a));
    CT_CHECK(a.packed_size == 21, "generic of 7 elements of 3 bytes: %zu", a.packed_size);
    CT_CHECK(gen_started >= 1 && gen_started == gen_finished,
             "%d pack states started, %d finished", gen_started, gen_finished);
    a.field_mask &= ~(uint64_t)UCP_DATATYPE_ATTR_FIELD_BUFFER;
    CT_CHECK(ucp_dt_query(dt, &a) == UCS_ERR_INVALID_PARAM, "generic without a buffer accepted");
    ucp_dt_destroy(dt);

    memset(&a, 0, sizeof(a));
    a.packed_size = 12345;
    CT_OK(ucp_dt_query(ucp_dt_make_contig(4), &a));
    CT_CHECK(a.packed_size == 12345, "packed_size written without its bit");
}

/* A key of a fresh region of n bytes, packed and unpacked on ep[0]. */
static ucp_rkey_h key_of(struct ct_pair *p, ucp_mem_h memh)
{
    void *packed;
    size_t plen;
    CT_OK(ucp_rkey_pack(p->ctx, memh, &packed, &plen));
    ucp_rkey_h k;
    CT_OK(ucp_ep_rkey_unpack(p->ep[0], packed, &k));
    ucp_rkey_buffer_release(packed);
    return k;
}

static ucp_mem_h map(struct ct_pair *p, void *buf, size_t n, unsigned flags)
{
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = buf;
    mp.length = n;
    mp.flags = flags;
    ucp_mem_h memh;
    CT_OK(ucp_mem_map(p->ctx, &mp, &memh));
    return memh;
}

static int sign(int x)
{
    return (x > 0) - (x < 0);
}

/* ucp_rkey_compare: one region's key unpacked twice compares equal, and so does a key with
 * itself; the order is antisymmetric and consistent; a field_mask other than 0 or a NULL
 * result is refused. */
static void rkey_compare_orders_keys(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char *a = calloc(1, 8192), *b = calloc(1, 8192);
    ucp_mem_h ma = map(&p, a, 8192, 0), mb = map(&p, b, 8192, 0);
    ucp_rkey_h ka1 = key_of(&p, ma), ka2 = key_of(&p, ma), kb = key_of(&p, mb);
    ucp_rkey_compare_params_t cp;
    memset(&cp, 0, sizeof(cp));
    int r = 7;
    CT_OK(ucp_rkey_compare(p.w[0], ka1, ka1, &cp, &r));
    CT_CHECK(r == 0, "a key compared with itself: %d", r);
    r = 7;
    CT_OK(ucp_rkey_compare(p.w[0], ka1, ka2, &cp, &r));
    CT_CHECK(r == 0, "one region's key unpacked twice: %d", r);
    int ab, ba, a2b;
    CT_OK(ucp_rkey_compare(p.w[0], ka1, kb, &cp, &ab));
    CT_OK(ucp_rkey_compare(p.w[0], kb, ka1, &cp, &ba));
    CT_OK(ucp_rkey_compare(p.w[0], ka2, kb, &cp, &a2b));
    CT_CHECK(sign(ab) == -sign(ba), "not antisymmetric: a<=>b %d, b<=>a %d", ab, ba);
    CT_CHECK(sign(ab) == sign(a2b), "equal keys ordered differently against b: %d, %d", ab,
             a2b);
    cp.field_mask = 1;
    CT_CHECK(ucp_rkey_compare(p.w[0], ka1, kb, &cp, &r) == UCS_ERR_INVALID_PARAM,
             "an unknown field accepted");
    cp.field_mask = 0;
    CT_CHECK(ucp_rkey_compare(p.w[0], ka1, kb, &cp, NULL) == UCS_ERR_INVALID_PARAM,
             "a NULL result accepted");
    ucp_rkey_destroy(ka1);
    ucp_rkey_destroy(ka2);
    ucp_rkey_destroy(kb);
    CT_OK(ucp_mem_unmap(p.ctx, ma));
    CT_OK(ucp_mem_unmap(p.ctx, mb));
    free(a);
    free(b);
    ct_pair_fini(&p);
}

/* Exporting a memory handle that no transport can export fails with UCS_ERR_UNSUPPORTED
 * (host memory, no UCP_FEATURE_EXPORTED_MEMH). */
static void memh_export_unsupported(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char *buf = calloc(1, 4096);
    ucp_mem_h memh = map(&p, buf, 4096, 0);
    ucp_memh_pack_params_t pp;
    memset(&pp, 0, sizeof(pp));
    pp.field_mask = UCP_MEMH_PACK_PARAM_FIELD_FLAGS;
    pp.flags = UCP_MEMH_PACK_FLAG_EXPORT;
    void *out = NULL;
    size_t len = 0;
    ucs_status_t s = ucp_memh_pack(memh, &pp, &out, &len);
    CT_CHECK(s == UCS_ERR_UNSUPPORTED, "export: status %d", (int)s);
    CT_OK(ucp_mem_unmap(p.ctx, memh));
    free(buf);
    ct_pair_fini(&p);
}

/* Puts `n` bytes of pattern `seed` through `k` into `dst` and checks them. */
static void put_and_check(struct ct_pair *p, ucp_rkey_h k, char *dst, size_t n, unsigned seed)
{
    char *src = ct_pattern(n, seed);
    ucp_request_param_t pp;
    memset(&pp, 0, sizeof(pp));
    CT_OK(ct_wait(p, ucp_put_nbx(p->ep[0], src, n, (uint64_t)(uintptr_t)dst, k, &pp)));
    ucp_request_param_t fp;
    memset(&fp, 0, sizeof(fp));
    CT_OK(ct_wait(p, ucp_ep_flush_nbx(p->ep[0], &fp)));
    CT_CHECK(ct_pattern_ok(dst, n, seed), "put of %zu bytes did not land", n);
    free(src);
}

/* ucp_mem_map's 1.14-1.18 additions: the EXPORTED_MEMH feature and a NULL exported
 * buffer change nothing; SYMMETRIC_RKEY (a hint) and LOCK (pages present up front) map
 * memory that works, the application's and the library's; LOCK with NONBLOCK is refused. */
static void mem_map_new_flags(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_EXPORTED_MEMH);
    ucp_cleanup(ctx);

    const size_t n = 1 << 16;
    char *buf = calloc(1, n);
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER;
    mp.address = buf;
    mp.length = n;
    mp.exported_memh_buffer = NULL;
    ucp_mem_h memh;
    CT_OK(ucp_mem_map(p.ctx, &mp, &memh));
    ucp_rkey_h k = key_of(&p, memh);
    put_and_check(&p, k, buf, n, 1);
    ucp_rkey_destroy(k);
    CT_OK(ucp_mem_unmap(p.ctx, memh));

    const unsigned flags[] = {UCP_MEM_MAP_SYMMETRIC_RKEY, UCP_MEM_MAP_LOCK,
                              UCP_MEM_MAP_LOCK | UCP_MEM_MAP_SYMMETRIC_RKEY};
    for (int alloc = 0; alloc < 2; alloc++) {
        for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
            memh = map(&p, alloc ? NULL : buf, n, flags[f] | (alloc ? UCP_MEM_MAP_ALLOCATE : 0));
            ucp_mem_attr_t ma;
            memset(&ma, 0, sizeof(ma));
            ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
            CT_OK(ucp_mem_query(memh, &ma));
            k = key_of(&p, memh);
            put_and_check(&p, k, ma.address, n, 2 + f + alloc);
            ucp_rkey_destroy(k);
            CT_OK(ucp_mem_unmap(p.ctx, memh));
        }
    }

    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = buf;
    mp.length = n;
    mp.flags = UCP_MEM_MAP_LOCK | UCP_MEM_MAP_NONBLOCK;
    CT_CHECK(ucp_mem_map(p.ctx, &mp, &memh) == UCS_ERR_INVALID_PARAM,
             "LOCK with NONBLOCK accepted");
    free(buf);
    ct_pair_fini(&p);
}

/* What the AM handler of copy_header saw. */
struct am_seen {
    ucp_worker_h w;
    int calls;
    char header[32];
    size_t header_length;
    char *data;
    size_t length;
    int data_done;
};

static void am_data_cb(void *req, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    ((struct am_seen *)user_data)->data_done = status == UCS_OK ? 1 : -1;
    ucp_request_free(req);
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    struct am_seen *s = arg;
    s->calls++;
    s->header_length = header_length;
    memcpy(s->header, header, header_length < 32 ? header_length : 32);
    s->length = length;
    s->data = malloc(length);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        ucp_request_param_t rp;
        memset(&rp, 0, sizeof(rp));
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        rp.cb.recv_am = am_data_cb;
        rp.user_data = s;
        void *r = ucp_am_recv_data_nbx(s->w, data, s->data, length, &rp);
        if (r == NULL) s->data_done = 1;
        else if (UCS_PTR_IS_ERR(r)) s->data_done = -1;
        return UCS_OK;
    }
    memcpy(s->data, data, length);
    s->data_done = 1;
    return UCS_OK;
}

/* With UCP_AM_SEND_FLAG_COPY_HEADER the header may be overwritten and freed as soon as
 * ucp_am_send_nbx returns, before the send completes: the handler gets the header as it
 * was (eager and rendezvous). */
static void am_copy_header(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    struct am_seen seen;
    ucp_am_handler_param_t hp;
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = 3;
    hp.cb = am_cb;
    hp.arg = &seen;
    CT_OK(ucp_worker_set_am_recv_handler(p.w[1], &hp));
    for (size_t len = CT_SMALL; len <= CT_LARGE; len = len == CT_SMALL ? CT_LARGE : len + 1) {
        memset(&seen, 0, sizeof(seen));
        seen.w = p.w[1];
        char *hdr = ct_pattern(24, 7);
        char *data = ct_pattern(len, 8);
        ucp_request_param_t sp = ct_send_param(NULL);
        sp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        sp.flags = UCP_AM_SEND_FLAG_COPY_HEADER;
        void *r = ucp_am_send_nbx(p.ep[0], 3, hdr, 24, data, len, &sp);
        memset(hdr, 0xee, 24);
        free(hdr);
        CT_OK(ct_wait(&p, r));
        for (int i = 0; i < 10000000 && seen.data_done == 0; i++) ct_progress(&p);
        CT_CHECK(seen.calls == 1 && seen.header_length == 24, "%zu bytes: %d calls, header %zu",
                 len, seen.calls, seen.header_length);
        CT_CHECK(ct_pattern_ok(seen.header, 24, 7), "%zu bytes: the header changed", len);
        CT_CHECK(seen.data_done == 1 && seen.length == len && ct_pattern_ok(seen.data, len, 8),
                 "%zu bytes: the data", len);
        free(seen.data);
        free(data);
    }
    ct_pair_fini(&p);
}

/* Memory for an application-allocated request: request_size bytes of the library's in
 * front of CT_REQ_AREA bytes of ours; returns the request pointer. */
static void *app_request(ucp_context_h ctx, void **mem)
{
    ucp_context_attr_t ca;
    memset(&ca, 0, sizeof(ca));
    ca.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
    CT_OK(ucp_context_query(ctx, &ca));
    size_t n = (ca.request_size + CT_REQ_AREA + 63) & ~(size_t)63;
    *mem = aligned_alloc(64, n);
    memset(*mem, 0, n);
    return (char *)*mem + ca.request_size;
}

/* ucp_tag_send_nbr / ucp_tag_recv_nbr with requests the application allocated: the
 * receive posts (UCS_OK) and reports through its request, tag and length included; the
 * send completes at once (UCS_OK) or reports through its request (UCS_INPROGRESS); eager
 * and rendezvous. */
static void tag_nbr(void)
{
    struct ct_pair p;
    ct_pair_init(&p, 0);
    char *src = ct_pattern(CT_LARGE, 4), *dst = calloc(1, CT_LARGE);
    for (size_t len = CT_SMALL; len <= CT_LARGE; len = len == CT_SMALL ? CT_LARGE : len + 1) {
        void *rmem, *smem;
        void *rreq = app_request(p.ctx, &rmem), *sreq = app_request(p.ctx, &smem);
        memset(dst, 0, len);
        CT_OK(ucp_tag_recv_nbr(p.w[1], dst, len, ucp_dt_make_contig(1), 0x77, ~0ull, rreq));
        ucs_status_t s =
            ucp_tag_send_nbr(p.ep[0], src, len, ucp_dt_make_contig(1), 0x77, sreq);
        CT_CHECK(s == UCS_OK || s == UCS_INPROGRESS, "send of %zu bytes: status %d", len, (int)s);
        for (int i = 0; i < 10000000 && ((s == UCS_INPROGRESS &&
                                          ucp_request_check_status(sreq) == UCS_INPROGRESS) ||
                                         ucp_request_check_status(rreq) == UCS_INPROGRESS);
             i++)
            ct_progress(&p);
        if (s == UCS_INPROGRESS) CT_OK(ucp_request_check_status(sreq));
        ucp_tag_recv_info_t info;
        memset(&info, 0, sizeof(info));
        CT_OK(ucp_tag_recv_request_test(rreq, &info));
        CT_CHECK(info.sender_tag == 0x77 && info.length == len, "receive info: tag %llx, %zu bytes",
                 (unsigned long long)info.sender_tag, info.length);
        CT_CHECK(ct_pattern_ok(dst, len, 4), "%zu bytes arrived wrong", len);
        free(rmem);
        free(smem);
    }
    free(src);
    free(dst);
    ct_pair_fini(&p);
}

/* The target side of the blocking atomics: its own context and worker, progressed by a
 * thread while the caller blocks (the calls progress only the caller's worker). */
struct target {
    ucp_context_h ctx;
    ucp_worker_h w;
    volatile int stop;
};

static void *progress_target(void *arg)
{
    struct target *t = arg;
    while (!t->stop) ucp_worker_progress(t->w);
    return NULL;
}

/* The blocking atomics of ucp_compat.h, 32 and 64 bits: add, fetch-and-add, swap and
 * compare-and-swap (hit and miss) leave the right value and fetch the one before. (The
 * add, like ucp_atomic_post, returns once it left: a flush completes it at the target.) */
static void blocking_atomics(void)
{
    const uint64_t features = UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64;
    struct target t = {ct_context(features), NULL, 0};
    t.w = ct_worker(t.ctx);
    ucp_context_h ctx = ct_context(features);
    ucp_worker_h w = ct_worker(ctx);
    ucp_address_t *addr;
    size_t alen;
    CT_OK(ucp_worker_get_address(t.w, &addr, &alen));
    ucp_ep_h ep = ct_ep(w, addr, 0, NULL);
    ucp_worker_release_address(t.w, addr);
    uint64_t *mem = aligned_alloc(64, 64);
    memset(mem, 0, 64);
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = mem;
    mp.length = 64;
    ucp_mem_h memh;
    CT_OK(ucp_mem_map(t.ctx, &mp, &memh));
    void *packed;
    size_t plen;
    CT_OK(ucp_rkey_pack(t.ctx, memh, &packed, &plen));
    ucp_rkey_h k;
    CT_OK(ucp_ep_rkey_unpack(ep, packed, &k));
    ucp_rkey_buffer_release(packed);
    pthread_t th;
    pthread_create(&th, NULL, progress_target, &t);

    volatile uint32_t *m32 = (uint32_t *)mem;
    uint64_t a32 = (uint64_t)(uintptr_t)mem, a64 = a32 + 8;
    volatile uint64_t *m64 = mem + 1;
    uint32_t r32 = 0;
    uint64_t r64 = 0;
    CT_OK(ucp_atomic_add32(ep, 5, a32, k));
    CT_OK(ucp_ep_flush(ep));
    CT_CHECK(*m32 == 5, "add32: %u", *m32);
    CT_OK(ucp_atomic_fadd32(ep, 3, a32, k, &r32));
    CT_CHECK(r32 == 5 && *m32 == 8, "fadd32: fetched %u, now %u", r32, *m32);
    CT_OK(ucp_atomic_swap32(ep, 100, a32, k, &r32));
    CT_CHECK(r32 == 8 && *m32 == 100, "swap32: fetched %u, now %u", r32, *m32);
    CT_OK(ucp_atomic_cswap32(ep, 100, 7, a32, k, &r32));
    CT_CHECK(r32 == 100 && *m32 == 7, "cswap32 (hit): fetched %u, now %u", r32, *m32);
    CT_OK(ucp_atomic_cswap32(ep, 1, 9, a32, k, &r32));
    CT_OK(ucp_ep_flush(ep));
    CT_CHECK(r32 == 7 && *m32 == 7, "cswap32 (miss): fetched %u, now %u", r32, *m32);

    const uint64_t big = 0x100000000ull;
    CT_OK(ucp_atomic_add64(ep, big + 5, a64, k));
    CT_OK(ucp_ep_flush(ep));
    CT_CHECK(*m64 == big + 5, "add64: %llx", (unsigned long long)*m64);
    CT_OK(ucp_atomic_fadd64(ep, 3, a64, k, &r64));
    CT_CHECK(r64 == big + 5 && *m64 == big + 8, "fadd64: fetched %llx, now %llx",
             (unsigned long long)r64, (unsigned long long)*m64);
    CT_OK(ucp_atomic_swap64(ep, 2 * big, a64, k, &r64));
    CT_CHECK(r64 == big + 8 && *m64 == 2 * big, "swap64: fetched %llx", (unsigned long long)r64);
    CT_OK(ucp_atomic_cswap64(ep, 2 * big, 3 * big, a64, k, &r64));
    CT_CHECK(r64 == 2 * big && *m64 == 3 * big, "cswap64 (hit): fetched %llx",
             (unsigned long long)r64);
    CT_OK(ucp_atomic_cswap64(ep, 1, 9, a64, k, &r64));
    CT_OK(ucp_ep_flush(ep));
    CT_CHECK(r64 == 3 * big && *m64 == 3 * big, "cswap64 (miss): fetched %llx",
             (unsigned long long)r64);
    CT_CHECK(*m32 == 7, "the 64-bit operations touched the 32-bit word: %u", *m32);

    t.stop = 1;
    pthread_join(th, NULL);
    ucp_rkey_destroy(k);
    ucp_request_param_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *r = ucp_ep_close_nbx(ep, &cp);
    while (r != NULL && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
        ucp_worker_progress(w);
    if (r != NULL && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
    CT_OK(ucp_mem_unmap(t.ctx, memh));
    ucp_worker_destroy(w);
    ucp_worker_destroy(t.w);
    ucp_cleanup(ctx);
    ucp_cleanup(t.ctx);
    free(mem);
}

#endif

const struct ct_test ct_abi119[] = {
    {"unknown_memory_type_means_detect", "UCS_MEMORY_TYPE_UNKNOWN of the headers a program was built with (5 before 1.16, 9 in 1.19, 10 in 1.22) makes ucp_mem_map and a send or receive detect the memory type", unknown_memory_type_means_detect},
#if UCP_API_VERSION >= UCP_VERSION(1, 19)
    {"ep_query_transports", "ucp_ep_query(TRANSPORTS) names a transport and a device per lane, at most num_entries of them, never writing a field past entry_size, and the names stay valid while the endpoint is open", ep_query_transports},
    {"ep_query_leaves_newer_fields_alone", "a ucp_ep_query of the 1.13 fields writes nothing past remote_sockaddr (a caller built against older headers passes the shorter struct)", ep_query_leaves_newer_fields_alone},
    {"ep_query_user_data", "ucp_ep_query(USER_DATA) gives the user data the endpoint was created with, then the one ucp_ep_modify_nb set", ep_query_user_data},
    {"dt_query_packed_sizes", "ucp_dt_query gives the packed size of contig (count 1 by default), iov (from its array) and generic (from its callbacks, each state finished) datatypes, refuses iov and generic without a buffer, and writes nothing unasked", dt_query_packed_sizes},
    {"rkey_compare_orders_keys", "ucp_rkey_compare: a key equals itself and the same region's key unpacked again; the order is antisymmetric and consistent; a non-zero field_mask or a NULL result is UCS_ERR_INVALID_PARAM", rkey_compare_orders_keys},
    {"memh_export_unsupported", "ucp_memh_pack(UCP_MEMH_PACK_FLAG_EXPORT) of host memory no transport can export is UCS_ERR_UNSUPPORTED", memh_export_unsupported},
    {"mem_map_new_flags", "the EXPORTED_MEMH feature and a NULL exported_memh_buffer change nothing; SYMMETRIC_RKEY and LOCK map working memory, the application's and allocated; LOCK with NONBLOCK is UCS_ERR_INVALID_PARAM", mem_map_new_flags},
    {"am_copy_header", "with UCP_AM_SEND_FLAG_COPY_HEADER the header may be overwritten and freed once ucp_am_send_nbx returns: the handler gets it as sent (eager and rendezvous)", am_copy_header},
    {"tag_nbr", "ucp_tag_recv_nbr posts into the application's request, which reports the data's tag and length; ucp_tag_send_nbr completes at once or reports through its request (eager and rendezvous)", tag_nbr},
    {"blocking_atomics", "the blocking ucp_atomic_{add,fadd,swap,cswap}{32,64} leave the right remote value and fetch the one before (cswap hit and miss)", blocking_atomics},
#endif
    {0},
};
