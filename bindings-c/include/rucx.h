/*
 * Rucx extensions to the ucp API, exported by Rucx's libucp.so.0 (symbols ucpx_*).
 *
 * Structured datatypes: ucpx_dt_create_vector/indexed/subarray build a ucp_datatype_t that
 * ucp_tag_send_nbx/recv_nbx (and _nb), ucp_am_send_nbx/recv_data_nbx, ucp_stream_*_nbx and
 * ucp_put_nbx/get_nbx accept through UCP_OP_ATTR_FIELD_DATATYPE. The buffer passed with it
 * is the origin the layout's offsets count from (MPI's `buf`), and `count` elements are
 * laid out one extent apart. Unlike generic datatypes, Rucx packs these itself (strided
 * copies, zero-copy gathers between two layouts for large messages), with no callbacks.
 * A layout datatype's class, UCPX_DATATYPE_LAYOUT, is one UCX does not use.
 */
#ifndef RUCX_H
#define RUCX_H

#include <ucp/api/ucp.h>
#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

#define RUCX_VERSION_MAJOR 0
#define RUCX_VERSION_MINOR 1

/* (datatype & UCP_DATATYPE_CLASS_MASK) of a layout datatype */
#define UCPX_DATATYPE_LAYOUT 4

/* array order of ucpx_dt_create_subarray */
enum {
    UCPX_ORDER_C       = 0, /* last dimension fastest */
    UCPX_ORDER_FORTRAN = 1  /* first dimension fastest */
};

/* `count` blocks of `blocklen` elements of `elem_size` bytes, block starts `stride`
 * elements apart (MPI_Type_vector). */
ucs_status_t ucpx_dt_create_vector(size_t count, size_t blocklen, ptrdiff_t stride,
                                   size_t elem_size, ucp_datatype_t *datatype_p);

/* Block k is `blocklens[k]` elements of `elem_size` bytes at `displs[k]` elements from the
 * origin (MPI_Type_indexed). */
ucs_status_t ucpx_dt_create_indexed(size_t count, const size_t *blocklens,
                                    const ptrdiff_t *displs, size_t elem_size,
                                    ucp_datatype_t *datatype_p);

/* The `subsizes` box at `starts` of an `ndims`-dimensional array of `sizes` elements of
 * `elem_size` bytes (MPI_Type_create_subarray); `order` is UCPX_ORDER_C or
 * UCPX_ORDER_FORTRAN. The extent is the whole array. */
ucs_status_t ucpx_dt_create_subarray(int ndims, const size_t *sizes, const size_t *subsizes,
                                     const size_t *starts, int order, size_t elem_size,
                                     ucp_datatype_t *datatype_p);

/* Bytes of data in one element of a layout datatype, and its extent (either may be NULL). */
ucs_status_t ucpx_dt_query(ucp_datatype_t datatype, size_t *packed_size, ptrdiff_t *extent);

/* Destroys a layout datatype; operations already posted with it are not affected. */
ucs_status_t ucpx_dt_destroy(ucp_datatype_t datatype);

/* The text of a status code (what UCX's ucs_status_string returns, without libucs). */
const char *ucpx_status_string(ucs_status_t status);

/*
 * Stream-triggered queues (the MPIX_Enqueue_* model of stream-triggered MPI). Operations
 * are enqueued now and return at once; ucpx_enqueue_start releases every operation
 * enqueued since the previous start, as one batch, when the queue's CUDA stream reaches
 * it (one stream write of a trigger counter); ucpx_enqueue_wait makes the stream wait
 * until every started operation is done (one stream wait on a completion counter). The
 * worker fires released operations from ucp_worker_progress, in the order enqueued.
 *
 * `stream` is a CUstream / cudaStream_t, or NULL for a queue with no stream: then start
 * releases at once and wait progresses the worker until the started operations are done
 * (returning the first error of an operation that failed since the previous wait).
 * RUCX_QUEUE_TRIGGER=kernel makes the stream write and wait with one-thread kernels
 * instead of stream memory operations (memop, the default); mixed starts with a stream
 * memory operation and waits with a kernel.
 *
 * A receive names the endpoint its message comes from: if that endpoint fails, the receive
 * ends with its error. A failed operation still counts as done, and destroying a queue
 * counts everything it still holds as done (UCS_ERR_CANCELED), so a stream never waits
 * forever. Buffers stay in use until a wait covering their operation is over.
 */
typedef struct ucpx_queue *ucpx_queue_h;

ucs_status_t ucpx_queue_create(ucp_worker_h worker, void *stream, ucpx_queue_h *queue_p);

ucs_status_t ucpx_enqueue_send(ucpx_queue_h queue, ucp_ep_h ep, const void *buffer,
                               size_t count, ucp_datatype_t datatype, ucp_tag_t tag);

ucs_status_t ucpx_enqueue_recv(ucpx_queue_h queue, ucp_ep_h src_ep, void *buffer,
                               size_t count, ucp_datatype_t datatype, ucp_tag_t tag,
                               ucp_tag_t tag_mask);

/* Posts the receive now, counted as an operation of the next start: it takes its message
 * whenever it comes (a peer's rendezvous never waits for the stream to reach the start),
 * and waits from that start on cover it. The buffer may be written at once: double-buffer
 * across iterations. */
ucs_status_t ucpx_enqueue_recv_posted(ucpx_queue_h queue, ucp_ep_h src_ep, void *buffer,
                                      size_t count, ucp_datatype_t datatype, ucp_tag_t tag,
                                      ucp_tag_t tag_mask);

ucs_status_t ucpx_enqueue_start(ucpx_queue_h queue);

ucs_status_t ucpx_enqueue_wait(ucpx_queue_h queue);

/* Operations waiting for a start or its trigger, running, done (failed included), and the
 * first error (UCS_OK if none) with the number of failed operations. Outputs may be NULL. */
ucs_status_t ucpx_queue_query(ucpx_queue_h queue, size_t *pending, size_t *running,
                              uint32_t *completed, ucs_status_t *error, uint64_t *failed);

/* UCS_ERR_CANCELED if operations were cut short, the first unreported error, or UCS_OK.
 * Destroy queues before their worker. */
ucs_status_t ucpx_queue_destroy(ucpx_queue_h queue);

/*
 * Tag generation schemes (Charm++'s layouts of a 64-bit tag): from the top, a message type,
 * an id (a source PE, or a channel), and a counter in the low bits. Widths add up to at
 * most 64, the counter has at least one bit. UCPX_TAG_SCHEME_CHARM_DEVICE is the GPU
 * Messaging API's 4 | 32 | 28, UCPX_TAG_SCHEME_CHANNEL the Channel API's 4 | 28 | 32.
 */
typedef struct ucpx_tag_scheme {
    uint32_t type_bits;
    uint32_t id_bits;
    uint32_t counter_bits;
} ucpx_tag_scheme_t;

#define UCPX_TAG_SCHEME_CHARM_DEVICE ((ucpx_tag_scheme_t){4, 32, 28})
#define UCPX_TAG_SCHEME_CHANNEL      ((ucpx_tag_scheme_t){4, 28, 32})

enum {
    UCPX_TAG_MATCH_TYPE    = 1, /* the type only */
    UCPX_TAG_MATCH_TYPE_ID = 2, /* the type and the id (one source or channel) */
    UCPX_TAG_MATCH_ALL     = 3  /* the whole tag */
};

/* UCS_ERR_INVALID_PARAM when a value does not fit its field. */
ucs_status_t ucpx_tag_encode(const ucpx_tag_scheme_t *scheme, uint64_t msg_type, uint64_t id,
                             uint64_t counter, ucp_tag_t *tag_p);
/* Any output may be NULL. */
ucs_status_t ucpx_tag_decode(const ucpx_tag_scheme_t *scheme, ucp_tag_t tag,
                             uint64_t *msg_type, uint64_t *id, uint64_t *counter);
/* The receive mask for UCPX_TAG_MATCH_*. */
ucs_status_t ucpx_tag_mask(const ucpx_tag_scheme_t *scheme, uint32_t fields, ucp_tag_t *mask_p);

/*
 * A wrap-safe tag generator for one (type, id): tags in counter order, each outstanding
 * until released (call ucpx_tag_gen_release once its operation matched: a receive
 * completed, a synchronous send completed). A counter that comes round to a tag still
 * outstanding is refused with UCS_ERR_BUSY, or, with `wait` non-zero, ucpx_tag_gen_next
 * progresses `worker` until a callback releases it (UCS_ERR_NO_RESOURCE at once when
 * `worker` is NULL). Charm++'s own 28-bit counter wraps silently.
 */
typedef struct ucpx_tag_gen *ucpx_tag_gen_h;

ucs_status_t ucpx_tag_gen_create(const ucpx_tag_scheme_t *scheme, uint64_t msg_type,
                                 uint64_t id, int wait, ucpx_tag_gen_h *gen_p);
ucs_status_t ucpx_tag_gen_next(ucpx_tag_gen_h gen, ucp_worker_h worker, ucp_tag_t *tag_p);
ucs_status_t ucpx_tag_gen_release(ucpx_tag_gen_h gen, ucp_tag_t tag);
ucs_status_t ucpx_tag_gen_destroy(ucpx_tag_gen_h gen);

/*
 * Channels (the Channel API): two endpoints joined under an id both sides choose. Sends
 * and receives take the channel's next counter and derive their tags from it, so messages
 * match in order with no metadata message; any memory type and datatype a tag operation
 * takes (the ucp_request_param_t's; Rucx's channel tests use host memory), completion by
 * request or callback as
 * for ucp_tag_send_nbx / ucp_tag_recv_nbx. Wrap-safe: the first send of each half of the
 * counter space goes synchronously, and entering a half again waits (or, with `wait` 0,
 * fails with UCS_ERR_BUSY) until the marker of the other half was matched. If the
 * endpoint fails, pending receives end with its error; closing a channel cancels its
 * receives that have not matched (UCS_ERR_CANCELED). Close channels before their worker.
 */
typedef struct ucpx_channel *ucpx_channel_h;

enum {
    UCPX_CHANNEL_PARAM_FIELD_SCHEME   = 1,
    UCPX_CHANNEL_PARAM_FIELD_MSG_TYPE = 2,
    UCPX_CHANNEL_PARAM_FIELD_WAIT     = 4
};

typedef struct ucpx_channel_params {
    uint64_t field_mask;
    ucpx_tag_scheme_t scheme; /* default UCPX_TAG_SCHEME_CHANNEL */
    uint64_t msg_type;        /* default 0xC */
    int wait;                 /* default 1 */
} ucpx_channel_params_t;

/* `params` may be NULL (defaults). */
ucs_status_t ucpx_channel_open(ucp_ep_h ep, uint64_t id, const ucpx_channel_params_t *params,
                               ucpx_channel_h *channel_p);
ucs_status_ptr_t ucpx_channel_send_nbx(ucpx_channel_h channel, const void *buffer,
                                       size_t count, const ucp_request_param_t *param);
ucs_status_ptr_t ucpx_channel_recv_nbx(ucpx_channel_h channel, void *buffer, size_t count,
                                       const ucp_request_param_t *param);
ucs_status_t ucpx_channel_close(ucpx_channel_h channel);

END_C_DECLS

#endif
