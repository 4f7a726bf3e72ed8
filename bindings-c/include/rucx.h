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

END_C_DECLS

#endif
