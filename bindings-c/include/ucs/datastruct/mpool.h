/*
 * Rucx: UCX's memory-pool header. Rucx has no public memory-pool API; this header exists
 * so that programs which include it without using it (Charm++'s UCX machine layer)
 * compile against Rucx's headers alone. It declares nothing.
 */
#ifndef RUCX_UCS_DATASTRUCT_MPOOL_H
#define RUCX_UCS_DATASTRUCT_MPOOL_H

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#endif
