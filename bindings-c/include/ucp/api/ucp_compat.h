/*
 * Rucx: the older (_nb, _nbr, blocking and deprecated) ucp calls that UCX 1.19 still
 * declares and Rucx's libucp exports. Included by <ucp/api/ucp.h>.
 */
#ifndef RUCX_UCP_COMPAT_H
#define RUCX_UCP_COMPAT_H

#include <ucp/api/ucp_def.h>
#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

/* active messages, first API */
ucs_status_t ucp_worker_set_am_handler(ucp_worker_h worker, uint16_t id,
                                       ucp_am_callback_t cb, void *arg, uint32_t flags);
ucs_status_ptr_t ucp_am_send_nb(ucp_ep_h ep, uint16_t id, const void *buffer, size_t count,
                                ucp_datatype_t datatype, ucp_send_callback_t cb,
                                unsigned flags);

/* tag */
ucs_status_ptr_t ucp_tag_send_nb(ucp_ep_h ep, const void *buffer, size_t count,
                                 ucp_datatype_t datatype, ucp_tag_t tag,
                                 ucp_send_callback_t cb);
ucs_status_ptr_t ucp_tag_send_sync_nb(ucp_ep_h ep, const void *buffer, size_t count,
                                      ucp_datatype_t datatype, ucp_tag_t tag,
                                      ucp_send_callback_t cb);
ucs_status_ptr_t ucp_tag_recv_nb(ucp_worker_h worker, void *buffer, size_t count,
                                 ucp_datatype_t datatype, ucp_tag_t tag, ucp_tag_t tag_mask,
                                 ucp_tag_recv_callback_t cb);
ucs_status_ptr_t ucp_tag_msg_recv_nb(ucp_worker_h worker, void *buffer, size_t count,
                                     ucp_datatype_t datatype, ucp_tag_message_h message,
                                     ucp_tag_recv_callback_t cb);
/* The _nbr calls: `req` is the application's memory with ucp_context_attr_t::request_size
 * bytes in front of it. Send: UCS_OK when done at once, UCS_INPROGRESS when `req` reports
 * (ucp_request_check_status), or an error. Receive: UCS_OK when posted (`req` reports). */
ucs_status_t ucp_tag_send_nbr(ucp_ep_h ep, const void *buffer, size_t count,
                              ucp_datatype_t datatype, ucp_tag_t tag, void *req);
ucs_status_t ucp_tag_recv_nbr(ucp_worker_h worker, void *buffer, size_t count,
                              ucp_datatype_t datatype, ucp_tag_t tag, ucp_tag_t tag_mask,
                              void *req);

/* stream */
ucs_status_ptr_t ucp_stream_send_nb(ucp_ep_h ep, const void *buffer, size_t count,
                                    ucp_datatype_t datatype, ucp_send_callback_t cb,
                                    unsigned flags);
ucs_status_ptr_t ucp_stream_recv_nb(ucp_ep_h ep, void *buffer, size_t count,
                                    ucp_datatype_t datatype, ucp_stream_recv_callback_t cb,
                                    size_t *length, unsigned flags);

/* one-sided */
ucs_status_t ucp_put_nbi(ucp_ep_h ep, const void *buffer, size_t length,
                         uint64_t remote_addr, ucp_rkey_h rkey);
ucs_status_ptr_t ucp_put_nb(ucp_ep_h ep, const void *buffer, size_t length,
                            uint64_t remote_addr, ucp_rkey_h rkey, ucp_send_callback_t cb);
ucs_status_t ucp_get_nbi(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
                         ucp_rkey_h rkey);
ucs_status_ptr_t ucp_get_nb(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
                            ucp_rkey_h rkey, ucp_send_callback_t cb);
ucs_status_t ucp_put(ucp_ep_h ep, const void *buffer, size_t length, uint64_t remote_addr,
                     ucp_rkey_h rkey);
ucs_status_t ucp_get(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
                     ucp_rkey_h rkey);

/* blocking atomics: each returns when the operation completed (the fetching ones with the
 * remote value before it in *result) */
ucs_status_t ucp_atomic_add32(ucp_ep_h ep, uint32_t add, uint64_t remote_addr,
                              ucp_rkey_h rkey);
ucs_status_t ucp_atomic_add64(ucp_ep_h ep, uint64_t add, uint64_t remote_addr,
                              ucp_rkey_h rkey);
ucs_status_t ucp_atomic_fadd32(ucp_ep_h ep, uint32_t add, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint32_t *result);
ucs_status_t ucp_atomic_fadd64(ucp_ep_h ep, uint64_t add, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint64_t *result);
ucs_status_t ucp_atomic_swap32(ucp_ep_h ep, uint32_t swap, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint32_t *result);
ucs_status_t ucp_atomic_swap64(ucp_ep_h ep, uint64_t swap, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint64_t *result);
ucs_status_t ucp_atomic_cswap32(ucp_ep_h ep, uint32_t compare, uint32_t swap,
                                uint64_t remote_addr, ucp_rkey_h rkey, uint32_t *result);
ucs_status_t ucp_atomic_cswap64(ucp_ep_h ep, uint64_t compare, uint64_t swap,
                                uint64_t remote_addr, ucp_rkey_h rkey, uint64_t *result);

/* endpoints, workers and requests */
ucs_status_ptr_t ucp_ep_modify_nb(ucp_ep_h ep, const ucp_ep_params_t *params);
void ucp_ep_destroy(ucp_ep_h ep);
ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep);
ucs_status_t ucp_ep_flush(ucp_ep_h ep);
ucs_status_t ucp_worker_flush(ucp_worker_h worker);
int ucp_request_is_completed(void *request);
void ucp_request_release(void *request);
ucs_status_t ucp_request_test(void *request, ucp_tag_recv_info_t *info);

END_C_DECLS

#endif
