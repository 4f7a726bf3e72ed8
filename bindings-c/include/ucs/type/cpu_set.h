/* Rucx: the CPU mask of ucp_worker_params_t (1024 CPUs, UCX names and layout, unchanged from 1.13 to 1.19). */
#ifndef RUCX_UCS_TYPE_CPU_SET_H
#define RUCX_UCS_TYPE_CPU_SET_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned long int ucs_cpu_mask_t;

#define UCS_CPU_SETSIZE   1024
#define UCS_NCPUBITS      (8 * sizeof(ucs_cpu_mask_t))     /* CPUs per mask word */
#define UCS_CPUELT(_cpu)  ((_cpu) / UCS_NCPUBITS)          /* word of a CPU */
#define UCS_CPUMASK(_cpu) ((ucs_cpu_mask_t)1 << ((_cpu) % UCS_NCPUBITS)) /* its bit */

typedef struct {
    ucs_cpu_mask_t ucs_bits[UCS_CPU_SETSIZE / UCS_NCPUBITS];
} ucs_cpu_set_t;

#define UCS_CPU_ZERO(_set) \
    do { \
        size_t _w; \
        for (_w = 0; _w < UCS_CPU_SETSIZE / UCS_NCPUBITS; _w++) (_set)->ucs_bits[_w] = 0; \
    } while (0)

#define UCS_CPU_SET(_cpu, _set) \
    do { \
        size_t _c = (_cpu); \
        if (_c < UCS_CPU_SETSIZE) (_set)->ucs_bits[UCS_CPUELT(_c)] |= UCS_CPUMASK(_c); \
    } while (0)

#define UCS_CPU_CLR(_cpu, _set) \
    do { \
        size_t _c = (_cpu); \
        if (_c < UCS_CPU_SETSIZE) (_set)->ucs_bits[UCS_CPUELT(_c)] &= ~UCS_CPUMASK(_c); \
    } while (0)

static inline int ucs_cpu_is_set(int cpu, const ucs_cpu_set_t *set)
{
    return cpu >= 0 && cpu < UCS_CPU_SETSIZE &&
           (set->ucs_bits[UCS_CPUELT(cpu)] & UCS_CPUMASK(cpu)) != 0;
}

#endif
