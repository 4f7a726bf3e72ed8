/* Rucx: memory types (UCX 1.13 values). Rucx serves host memory. */
#ifndef RUCX_UCS_MEMORY_MEMORY_TYPE_H
#define RUCX_UCS_MEMORY_MEMORY_TYPE_H

typedef enum ucs_memory_type {
    UCS_MEMORY_TYPE_HOST,
    UCS_MEMORY_TYPE_CUDA,
    UCS_MEMORY_TYPE_CUDA_MANAGED,
    UCS_MEMORY_TYPE_ROCM,
    UCS_MEMORY_TYPE_ROCM_MANAGED,
    UCS_MEMORY_TYPE_LAST,
    UCS_MEMORY_TYPE_UNKNOWN = UCS_MEMORY_TYPE_LAST
} ucs_memory_type_t;

#endif
