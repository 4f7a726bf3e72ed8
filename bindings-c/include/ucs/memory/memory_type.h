/* Rucx: memory types (UCX 1.19 values). Rucx serves host and CUDA memory. */
#ifndef RUCX_UCS_MEMORY_MEMORY_TYPE_H
#define RUCX_UCS_MEMORY_MEMORY_TYPE_H

#include <ucs/sys/compiler_def.h>

/* The numbering is UCX 1.19's: RDMA and the ZE types (1.16, 1.17) came before LAST, which
 * moved from 5 to 9. Rucx reads 5 (UNKNOWN of programs built against UCX 1.13's headers)
 * as "unknown" too: see docs/c-abi.md. */
typedef enum ucs_memory_type {
    UCS_MEMORY_TYPE_HOST,           /* system memory */
    UCS_MEMORY_TYPE_CUDA,           /* CUDA device memory */
    UCS_MEMORY_TYPE_CUDA_MANAGED,   /* CUDA managed memory */
    UCS_MEMORY_TYPE_ROCM,           /* ROCm device memory (not served) */
    UCS_MEMORY_TYPE_ROCM_MANAGED,   /* ROCm managed memory (not served) */
    UCS_MEMORY_TYPE_RDMA,           /* memory of an RDMA device (not served) */
    UCS_MEMORY_TYPE_ZE_HOST,        /* oneAPI Level Zero host memory (not served) */
    UCS_MEMORY_TYPE_ZE_DEVICE,      /* Level Zero device memory (not served) */
    UCS_MEMORY_TYPE_ZE_MANAGED,     /* Level Zero shared memory (not served) */
    UCS_MEMORY_TYPE_LAST,
    UCS_MEMORY_TYPE_UNKNOWN = UCS_MEMORY_TYPE_LAST
} ucs_memory_type_t;

/* The memory types the CPU can load from and store to, as a bit set. */
#define UCS_MEMORY_TYPES_CPU_ACCESSIBLE                                         \
    (UCS_BIT(UCS_MEMORY_TYPE_HOST) | UCS_BIT(UCS_MEMORY_TYPE_ROCM_MANAGED) |    \
     UCS_BIT(UCS_MEMORY_TYPE_ZE_HOST) | UCS_BIT(UCS_MEMORY_TYPE_ZE_MANAGED))

#endif
