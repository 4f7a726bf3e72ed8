/*
 * Rucx extension test (rucx.h): layout datatypes through the ucp.h entry points, over a
 * loopback endpoint in one process. Built against Rucx's own headers by tests/headers.rs.
 * Prints "layout_dt: OK" on success.
 */
#include <rucx.h>
#include <ucp/api/ucp.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define EXPECT(_c, ...) do { if (!(_c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); failures++; } } while (0)
#define CHECK(_call) do { ucs_status_t _s = (_call); if (_s != UCS_OK) { \
        fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #_call, \
                ucpx_status_string(_s)); exit(1); } } while (0)

static ucp_worker_h w;
static ucp_ep_h ep;

static ucs_status_t wait_req(ucs_status_ptr_t r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    return s;
}

/* Tag-sends (sbuf, scount, sdt) and receives into (rbuf, rcount, rdt); returns the length. */
static size_t exchange(const void *sbuf, size_t scount, ucp_datatype_t sdt, void *rbuf,
                       size_t rcount, ucp_datatype_t rdt, ucp_tag_t tag)
{
    ucp_tag_recv_info_t info = {0};
    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_RECV_INFO,
        .datatype = rdt,
        .recv_info.tag_info = &info,
    };
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = sdt};
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(w, rbuf, rcount, tag, UINT64_MAX, &rp);
    ucs_status_ptr_t sr = ucp_tag_send_nbx(ep, sbuf, scount, tag, &sp);
    CHECK(wait_req(sr));
    if (rr != NULL && !UCS_PTR_IS_ERR(rr)) {
        /* recv_info is filled only on immediate completion; else ask the request */
        while (ucp_request_check_status(rr) == UCS_INPROGRESS) ucp_worker_progress(w);
        CHECK(ucp_tag_recv_request_test(rr, &info));
        ucp_request_free(rr);
    } else {
        CHECK(UCS_PTR_STATUS(rr));
    }
    return info.length;
}

static double val(long i) { return (double)i * 0.5 + 1.0; }

/* vector layout -> contiguous, both sizes (eager and rendezvous) */
static void test_vector(size_t count, size_t bl, ptrdiff_t stride)
{
    ucp_datatype_t v;
    CHECK(ucpx_dt_create_vector(count, bl, stride, sizeof(double), &v));
    EXPECT((v & UCP_DATATYPE_CLASS_MASK) == UCPX_DATATYPE_LAYOUT, "class %llu",
           (unsigned long long)(v & UCP_DATATYPE_CLASS_MASK));
    size_t span = (count - 1) * (size_t)stride + bl, n = count * bl;
    double *a = malloc(sizeof(double) * span), *c = calloc(n, sizeof(double));
    for (size_t i = 0; i < span; i++) a[i] = val((long)i);
    size_t len = exchange(a, 1, v, c, n * sizeof(double), ucp_dt_make_contig(1), 10);
    EXPECT(len == n * sizeof(double), "vector %zu: length %zu", n, len);
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < bl; j++)
            if (c[i * bl + j] != val((long)(i * stride + j))) {
                EXPECT(0, "vector %zux%zu: [%zu][%zu] = %g", count, bl, i, j, c[i * bl + j]);
                i = count;
                break;
            }
    /* and back: contiguous -> vector layout, gaps untouched */
    for (size_t i = 0; i < n; i++) c[i] = -val((long)i);
    for (size_t i = 0; i < span; i++) a[i] = 7.0;
    exchange(c, n, ucp_dt_make_contig(sizeof(double)), a, 1, v, 11);
    for (size_t i = 0; i < span; i++) {
        size_t blk = i / (size_t)stride, off = i % (size_t)stride;
        double want = off < bl ? -val((long)(blk * bl + off)) : 7.0;
        if (a[i] != want) { EXPECT(0, "contig->vector: a[%zu] = %g, want %g", i, a[i], want); break; }
    }
    CHECK(ucpx_dt_destroy(v));
    free(a);
    free(c);
}

int main(void)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM};
    ucp_context_h ctx;
    CHECK(ucp_init(&params, NULL, &ctx));
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    CHECK(ucp_worker_create(ctx, &wp, &w));
    ucp_address_t *addr;
    size_t alen;
    CHECK(ucp_worker_get_address(w, &addr, &alen));
    ucp_ep_params_t epp = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = addr};
    CHECK(ucp_ep_create(w, &epp, &ep));
    ucp_worker_release_address(w, addr);

    test_vector(8, 3, 5);          /* 192 B: eager */
    test_vector(4096, 16, 40);     /* 512 KiB: rendezvous */

    /* indexed, count 3 (contiguous(3, indexed) built and cached), -> contiguous */
    {
        size_t bl[3] = {2, 1, 4};
        ptrdiff_t ds[3] = {6, 0, 10}; /* extent: [0, 14) elements */
        ucp_datatype_t t;
        CHECK(ucpx_dt_create_indexed(3, bl, ds, sizeof(int32_t), &t));
        size_t packed;
        ptrdiff_t ext;
        CHECK(ucpx_dt_query(t, &packed, &ext));
        EXPECT(packed == 7 * 4 && ext == 14 * 4, "indexed: packed %zu extent %td", packed, ext);
        int32_t a[3 * 14], c[21] = {0};
        for (int i = 0; i < 42; i++) a[i] = 1000 + i;
        for (int rep = 0; rep < 2; rep++) { /* second time from the cache */
            memset(c, 0, sizeof(c));
            size_t len = exchange(a, 3, t, c, sizeof(c), ucp_dt_make_contig(1), 20 + rep);
            EXPECT(len == sizeof(c), "indexed x3: length %zu", len);
            int k = 0;
            for (int e = 0; e < 3; e++)
                for (int b = 0; b < 3; b++)
                    for (size_t j = 0; j < bl[b]; j++, k++)
                        EXPECT(c[k] == 1000 + e * 14 + (int)ds[b] + (int)j, "indexed [%d] = %d", k, c[k]);
        }
        CHECK(ucpx_dt_destroy(t));
    }

    /* subarray (C and Fortran order) <- contiguous; and subarray -> subarray */
    for (int order = 0; order < 2; order++) {
        size_t sizes[3] = {6, 7, 8}, sub[3] = {2, 3, 4}, st[3] = {1, 2, 3};
        ucp_datatype_t t;
        CHECK(ucpx_dt_create_subarray(3, sizes, sub, st, order ? UCPX_ORDER_FORTRAN : UCPX_ORDER_C,
                                      sizeof(uint16_t), &t));
        uint16_t src[24], arr[6 * 7 * 8], arr2[6 * 7 * 8];
        for (int i = 0; i < 24; i++) src[i] = (uint16_t)(500 + i);
        memset(arr, 0, sizeof(arr));
        exchange(src, sizeof(src), ucp_dt_make_contig(1), arr, 1, t, 30 + order);
        int k, bad = 0;
        /* check by count and by round trip: every written element came from src, and a
         * subarray -> subarray copy reproduces them */
        int written = 0;
        for (size_t i = 0; i < sizeof(arr) / 2; i++) if (arr[i]) { written++; if (arr[i] < 500 || arr[i] >= 524) bad++; }
        EXPECT(written == 24 && !bad, "subarray order %d: %d written, %d bad", order, written, bad);
        memset(arr2, 0, sizeof(arr2));
        exchange(arr, 1, t, arr2, 1, t, 40 + order);
        EXPECT(!memcmp(arr, arr2, sizeof(arr)), "subarray -> subarray differs (order %d)", order);
        uint16_t back[24] = {0};
        exchange(arr2, 1, t, back, sizeof(back), ucp_dt_make_contig(1), 50 + order);
        EXPECT(!memcmp(back, src, sizeof(src)), "subarray round trip differs (order %d)", order);
        /* C order, checked element by element */
        if (!order) {
            k = 0;
            for (size_t i = 0; i < 2; i++) for (size_t j = 0; j < 3; j++) for (size_t l = 0; l < 4; l++, k++) {
                size_t at = ((st[0] + i) * 7 + st[1] + j) * 8 + st[2] + l;
                EXPECT(arr[at] == src[k], "subarray C [%zu][%zu][%zu] = %u, want %u", i, j, l, arr[at], src[k]);
            }
        } else {
            k = 0;
            for (size_t l = 0; l < 4; l++) for (size_t j = 0; j < 3; j++) for (size_t i = 0; i < 2; i++, k++) {
                /* Fortran: dimension 0 fastest in memory */
                size_t at = ((st[2] + l) * 7 + st[1] + j) * 6 + st[0] + i;
                EXPECT(arr[at] == src[k], "subarray F (%zu,%zu,%zu) = %u, want %u", i, j, l, arr[at], src[k]);
            }
        }
        CHECK(ucpx_dt_destroy(t));
    }

    /* the old _nb entry point takes the datatype argument directly */
    {
        ucp_datatype_t v;
        CHECK(ucpx_dt_create_vector(4, 1, 2, 8, &v));
        uint64_t a[7] = {1, 0, 2, 0, 3, 0, 4}, c[4] = {0};
        ucp_request_param_t rp = {0};
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(w, c, sizeof(c), 60, UINT64_MAX, &rp);
        CHECK(wait_req(ucp_tag_send_nb(ep, a, 1, v, 60, (ucp_send_callback_t)NULL)));
        CHECK(wait_req(rr));
        EXPECT(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4, "tag_send_nb vector: %llu %llu %llu %llu",
               (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2],
               (unsigned long long)c[3]);
        CHECK(ucpx_dt_destroy(v));
    }

    /* put and get with a layout on the local side */
    {
        enum { N = 1024 };
        uint64_t *region = calloc(N, 8), *local = malloc(N * 2 * 8);
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            .address = region, .length = N * 8,
        };
        ucp_mem_h memh;
        CHECK(ucp_mem_map(ctx, &mp, &memh));
        void *rkey_buf;
        size_t rkey_len;
        CHECK(ucp_rkey_pack(ctx, memh, &rkey_buf, &rkey_len));
        ucp_rkey_h rkey;
        CHECK(ucp_ep_rkey_unpack(ep, rkey_buf, &rkey));
        ucp_rkey_buffer_release(rkey_buf);
        ucp_datatype_t every_other;
        CHECK(ucpx_dt_create_vector(N, 1, 2, 8, &every_other));
        for (int i = 0; i < 2 * N; i++) local[i] = (i % 2) ? 0xdead : (uint64_t)(i / 2 + 77);
        ucp_request_param_t pp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = every_other};
        ucs_status_t s = wait_req(ucp_put_nbx(ep, local, 1, (uint64_t)(uintptr_t)region, rkey, &pp));
        if (s == UCS_OK) {
            CHECK(wait_req(ucp_ep_flush_nbx(ep, &(ucp_request_param_t){0})));
            int bad = 0;
            for (int i = 0; i < N; i++) bad += region[i] != (uint64_t)(i + 77);
            EXPECT(!bad, "put with layout: %d wrong", bad);
            for (int i = 0; i < N; i++) region[i] = (uint64_t)i * 3;
            for (int i = 0; i < 2 * N; i++) local[i] = 0xbeef;
            CHECK(wait_req(ucp_get_nbx(ep, local, 1, (uint64_t)(uintptr_t)region, rkey, &pp)));
            CHECK(wait_req(ucp_ep_flush_nbx(ep, &(ucp_request_param_t){0})));
            bad = 0;
            for (int i = 0; i < 2 * N; i++) bad += local[i] != ((i % 2) ? 0xbeef : (uint64_t)(i / 2) * 3);
            EXPECT(!bad, "get with layout: %d wrong", bad);
        } else {
            EXPECT(0, "put_nbx with a layout datatype: %s", ucpx_status_string(s));
        }
        CHECK(ucpx_dt_destroy(every_other));
        ucp_rkey_destroy(rkey);
        CHECK(ucp_mem_unmap(ctx, memh));
        free(region);
        free(local);
    }

    /* bad input: bad order, NULL out, zero element size, double destroy, foreign handle */
    {
        size_t one = 1;
        ucp_datatype_t t;
        EXPECT(ucpx_dt_create_subarray(1, &one, &one, &one, 7, 1, &t) == UCS_ERR_INVALID_PARAM, "bad order");
        EXPECT(ucpx_dt_create_subarray(1, &one, &one, &one, UCPX_ORDER_C, 1, &t) == UCS_ERR_INVALID_PARAM,
               "box outside the array");
        EXPECT(ucpx_dt_create_vector(1, 1, 1, 8, NULL) == UCS_ERR_INVALID_PARAM, "NULL out");
        EXPECT(ucpx_dt_create_vector(1, 1, 1, 0, &t) == UCS_ERR_INVALID_PARAM, "zero elem size");
        EXPECT(ucpx_dt_create_indexed(2, NULL, NULL, 8, &t) == UCS_ERR_INVALID_PARAM, "NULL arrays");
        CHECK(ucpx_dt_create_vector(2, 1, 2, 8, &t));
        CHECK(ucpx_dt_destroy(t));
        EXPECT(ucpx_dt_destroy(ucp_dt_make_contig(8)) == UCS_ERR_INVALID_PARAM, "destroy contig");
        EXPECT(ucpx_dt_query(ucp_dt_make_contig(8), NULL, NULL) == UCS_ERR_INVALID_PARAM, "query contig");
        EXPECT(strcmp(ucpx_status_string(UCS_ERR_NO_MEMORY), "Out of memory") == 0, "status string");
    }

    ucp_request_param_t cp = {0};
    CHECK(wait_req(ucp_ep_close_nbx(ep, &cp)));
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    if (failures) { fprintf(stderr, "layout_dt: %d failures\n", failures); return 1; }
    printf("layout_dt: OK\n");
    return 0;
}
