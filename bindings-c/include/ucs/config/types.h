/* Rucx: configuration printing flags and the socket-address pair (UCX 1.13 layout). */
#ifndef RUCX_UCS_CONFIG_TYPES_H
#define RUCX_UCS_CONFIG_TYPES_H

#include <ucs/sys/compiler_def.h>
#include <sys/socket.h>

typedef enum {
    UCS_CONFIG_PRINT_CONFIG          = UCS_BIT(0),
    UCS_CONFIG_PRINT_HEADER          = UCS_BIT(1),
    UCS_CONFIG_PRINT_DOC             = UCS_BIT(2),
    UCS_CONFIG_PRINT_HIDDEN          = UCS_BIT(3),
    UCS_CONFIG_PRINT_COMMENT_DEFAULT = UCS_BIT(4)
} ucs_config_print_flags_t;

/* A socket address and its length. */
typedef struct ucs_sock_addr {
    const struct sockaddr *addr;
    socklen_t             addrlen;
} ucs_sock_addr_t;

#endif
