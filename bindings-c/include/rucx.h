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

ucs_status_t ucpx_enqueue_start(ucpx_queue_h queue);

ucs_status_t ucpx_enqueue_wait(ucpx_queue_h queue);

/* Operations waiting for a start or its trigger, running, done (failed included), and the
 * first error (UCS_OK if none) with the number of failed operations. Outputs may be NULL. */
ucs_status_t ucpx_queue_query(ucpx_queue_h queue, size_t *pending, size_t *running,
                              uint32_t *completed, ucs_status_t *error, uint64_t *failed);

/* UCS_ERR_CANCELED if operations were cut short, the first unreported error, or UCS_OK.
 * Destroy queues before their worker. */
ucs_status_t ucpx_queue_destroy(ucpx_queue_h queue);

END_C_DECLS

#endif
