/*
 * Rucx: the ucp handle types, scalar types and callback signatures of UCX 1.19's ucp API.
 * Declarations written for Rucx; names, values and layouts are UCX's so that UCX programs
 * compile and link against Rucx's libucp unchanged.
 */
#ifndef RUCX_UCP_DEF_H
#define RUCX_UCP_DEF_H

#include <ucs/memory/memory_type.h>
#include <ucs/type/status.h>
#include <ucs/config/types.h>
#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

/* ---- opaque handles ---- */
typedef struct ucp_context      *ucp_context_h;
typedef struct ucp_worker       *ucp_worker_h;
typedef struct ucp_ep           *ucp_ep_h;
typedef struct ucp_listener     *ucp_listener_h;
typedef struct ucp_conn_request *ucp_conn_request_h;
typedef struct ucp_mem          *ucp_mem_h;
typedef struct ucp_rkey         *ucp_rkey_h;
typedef struct ucp_recv_desc    *ucp_tag_message_h;
typedef struct ucp_config       ucp_config_t;
typedef struct ucp_address      ucp_address_t;

/* ---- scalars ---- */
typedef uint64_t ucp_tag_t;
/* Class in the low 3 bits (UCP_DATATYPE_*), class data above. */
typedef uint64_t ucp_datatype_t;

typedef struct ucp_tag_recv_info {
    ucp_tag_t sender_tag;   /* tag of the matched message */
    size_t    length;       /* its length in bytes */
} ucp_tag_recv_info_t;

typedef struct ucp_am_recv_param {
    uint64_t recv_attr;     /* UCP_AM_RECV_ATTR_* bits */
    ucp_ep_h reply_ep;      /* with UCP_AM_RECV_ATTR_FIELD_REPLY_EP */
} ucp_am_recv_param_t;

/* ---- error handling ---- */
typedef enum {
    UCP_ERR_HANDLING_MODE_NONE, /* no guarantees after a peer fails */
    UCP_ERR_HANDLING_MODE_PEER  /* report a failed peer through the endpoint's handler */
} ucp_err_handling_mode_t;

typedef void (*ucp_err_handler_cb_t)(void *arg, ucp_ep_h ep, ucs_status_t status);

typedef struct ucp_err_handler {
    ucp_err_handler_cb_t cb;
    void                 *arg;
} ucp_err_handler_t;

/* ---- request callbacks ---- */
typedef void (*ucp_request_init_callback_t)(void *request);
typedef void (*ucp_request_cleanup_callback_t)(void *request);
typedef void (*ucp_send_callback_t)(void *request, ucs_status_t status);
typedef void (*ucp_send_nbx_callback_t)(void *request, ucs_status_t status, void *user_data);
typedef void (*ucp_tag_recv_callback_t)(void *request, ucs_status_t status,
                                        ucp_tag_recv_info_t *info);
typedef void (*ucp_tag_recv_nbx_callback_t)(void *request, ucs_status_t status,
                                            const ucp_tag_recv_info_t *tag_info,
                                            void *user_data);
typedef void (*ucp_stream_recv_callback_t)(void *request, ucs_status_t status, size_t length);
typedef void (*ucp_stream_recv_nbx_callback_t)(void *request, ucs_status_t status,
                                               size_t length, void *user_data);
typedef void (*ucp_am_recv_data_nbx_callback_t)(void *request, ucs_status_t status,
                                                size_t length, void *user_data);

/* ---- active messages ---- */
typedef ucs_status_t (*ucp_am_callback_t)(void *arg, void *data, size_t length,
                                          ucp_ep_h reply_ep, unsigned flags);
typedef ucs_status_t (*ucp_am_recv_callback_t)(void *arg, const void *header,
                                               size_t header_length, void *data,
                                               size_t length,
                                               const ucp_am_recv_param_t *param);

/* ---- listeners ---- */
typedef void (*ucp_listener_accept_callback_t)(ucp_ep_h ep, void *arg);
typedef void (*ucp_listener_conn_callback_t)(ucp_conn_request_h conn_request, void *arg);

typedef struct ucp_listener_accept_handler {
    ucp_listener_accept_callback_t cb;
    void                           *arg;
} ucp_listener_accept_handler_t;

typedef struct ucp_listener_conn_handler {
    ucp_listener_conn_callback_t cb;
    void                         *arg;
} ucp_listener_conn_handler_t;

/* ---- wake-up events (ucp_worker_params_t::events) ---- */
typedef enum ucp_wakeup_event_types {
    UCP_WAKEUP_RMA      = UCS_BIT(0),
    UCP_WAKEUP_AMO      = UCS_BIT(1),
    UCP_WAKEUP_TAG_SEND = UCS_BIT(2),
    UCP_WAKEUP_TAG_RECV = UCS_BIT(3),
    UCP_WAKEUP_TX       = UCS_BIT(10),
    UCP_WAKEUP_RX       = UCS_BIT(11),
    UCP_WAKEUP_EDGE     = UCS_BIT(16)
} ucp_wakeup_event_t;

/* ---- endpoint parameters ---- */
enum ucp_ep_params_field {
    UCP_EP_PARAM_FIELD_REMOTE_ADDRESS    = UCS_BIT(0),
    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = UCS_BIT(1),
    UCP_EP_PARAM_FIELD_ERR_HANDLER       = UCS_BIT(2),
    UCP_EP_PARAM_FIELD_USER_DATA         = UCS_BIT(3),
    UCP_EP_PARAM_FIELD_SOCK_ADDR         = UCS_BIT(4),
    UCP_EP_PARAM_FIELD_FLAGS             = UCS_BIT(5),
    UCP_EP_PARAM_FIELD_CONN_REQUEST      = UCS_BIT(6),
    UCP_EP_PARAM_FIELD_NAME              = UCS_BIT(7),
    UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR   = UCS_BIT(8)
};

enum ucp_ep_params_flags_field {
    UCP_EP_PARAMS_FLAGS_CLIENT_SERVER  = UCS_BIT(0),
    UCP_EP_PARAMS_FLAGS_NO_LOOPBACK    = UCS_BIT(1),
    UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID = UCS_BIT(2)
};

typedef struct ucp_ep_params {
    uint64_t                field_mask;     /* UCP_EP_PARAM_FIELD_* */
    const ucp_address_t     *address;       /* peer worker address */
    ucp_err_handling_mode_t err_mode;
    ucp_err_handler_t       err_handler;
    void                    *user_data;
    unsigned                flags;          /* UCP_EP_PARAMS_FLAGS_* */
    ucs_sock_addr_t         sockaddr;       /* server to connect to */
    ucp_conn_request_h      conn_request;   /* accepted connection request */
    const char              *name;
    ucs_sock_addr_t         local_sockaddr;
} ucp_ep_params_t;

/* ---- memory attributes ---- */
enum ucp_mem_attr_field {
    UCP_MEM_ATTR_FIELD_ADDRESS  = UCS_BIT(0),
    UCP_MEM_ATTR_FIELD_LENGTH   = UCS_BIT(1),
    UCP_MEM_ATTR_FIELD_MEM_TYPE = UCS_BIT(2)
};

typedef struct ucp_mem_attr {
    uint64_t          field_mask;   /* UCP_MEM_ATTR_FIELD_* */
    void              *address;
    size_t            length;
    ucs_memory_type_t mem_type;
} ucp_mem_attr_t;

/* ---- transports of an endpoint (ucp_ep_attr_t::transports) ---- */
typedef struct ucp_transport_entry {
    const char *transport_name;   /* e.g. "posix"; valid until the endpoint is closed */
    const char *device_name;      /* e.g. "memory"; valid until the endpoint is closed */
} ucp_transport_entry_t;

/* The caller's array: `num_entries` elements of `entry_size` bytes each on input (the
 * library writes no field that ends past `entry_size`), the number filled on output. */
typedef struct ucp_transports {
    ucp_transport_entry_t *entries;
    unsigned              num_entries;
    size_t                entry_size;
} ucp_transports_t;

END_C_DECLS

#endif
