/*
 * Rucx: status codes (numerically UCX's, the same from 1.13 to 1.19, so that either
 * library's code means the same thing) and the status-or-pointer convention of the
 * non-blocking calls.
 */
#ifndef RUCX_UCS_TYPE_STATUS_H
#define RUCX_UCS_TYPE_STATUS_H

#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

typedef enum {
    /* success and "still going" */
    UCS_OK                         = 0,
    UCS_INPROGRESS                 = 1,

    /* failures */
    UCS_ERR_NO_MESSAGE             = -1,
    UCS_ERR_NO_RESOURCE            = -2,
    UCS_ERR_IO_ERROR               = -3,
    UCS_ERR_NO_MEMORY              = -4,
    UCS_ERR_INVALID_PARAM          = -5,
    UCS_ERR_UNREACHABLE            = -6,
    UCS_ERR_INVALID_ADDR           = -7,
    UCS_ERR_NOT_IMPLEMENTED        = -8,
    UCS_ERR_MESSAGE_TRUNCATED      = -9,
    UCS_ERR_NO_PROGRESS            = -10,
    UCS_ERR_BUFFER_TOO_SMALL       = -11,
    UCS_ERR_NO_ELEM                = -12,
    UCS_ERR_SOME_CONNECTS_FAILED   = -13,
    UCS_ERR_NO_DEVICE              = -14,
    UCS_ERR_BUSY                   = -15,
    UCS_ERR_CANCELED               = -16,
    UCS_ERR_SHMEM_SEGMENT          = -17,
    UCS_ERR_ALREADY_EXISTS         = -18,
    UCS_ERR_OUT_OF_RANGE           = -19,
    UCS_ERR_TIMED_OUT              = -20,
    UCS_ERR_EXCEEDS_LIMIT          = -21,
    UCS_ERR_UNSUPPORTED            = -22,
    UCS_ERR_REJECTED               = -23,
    UCS_ERR_NOT_CONNECTED          = -24,
    UCS_ERR_CONNECTION_RESET       = -25,

    /* ranges reserved for link and endpoint failures */
    UCS_ERR_FIRST_LINK_FAILURE     = -40,
    UCS_ERR_LAST_LINK_FAILURE      = -59,
    UCS_ERR_FIRST_ENDPOINT_FAILURE = -60,
    UCS_ERR_ENDPOINT_TIMEOUT       = -80,
    UCS_ERR_LAST_ENDPOINT_FAILURE  = -89,

    UCS_ERR_LAST                   = -100
} UCS_S_PACKED ucs_status_t;   /* one byte */

/*
 * What a non-blocking call returns: NULL (done), a small negative number (an error code cast
 * to a pointer), or a request pointer.
 */
typedef void *ucs_status_ptr_t;

#define UCS_PTR_IS_ERR(_p)      (((uintptr_t)(_p)) >= ((uintptr_t)UCS_ERR_LAST))
#define UCS_PTR_IS_PTR(_p)      (((uintptr_t)(_p) - 1) < ((uintptr_t)UCS_ERR_LAST - 1))
#define UCS_PTR_RAW_STATUS(_p)  ((ucs_status_t)(intptr_t)(_p))
#define UCS_PTR_STATUS(_p)      (UCS_PTR_IS_PTR(_p) ? UCS_INPROGRESS : UCS_PTR_RAW_STATUS(_p))
#define UCS_STATUS_PTR(_s)      ((void*)(intptr_t)(_s))
#define UCS_STATUS_IS_ERR(_s)   ((_s) < 0)

/*
 * The text of a status code. Exported by Rucx's library, which is also installed as
 * libucs.so.0 for programs that link -lucs.
 */
const char *ucs_status_string(ucs_status_t status);

END_C_DECLS

#endif
