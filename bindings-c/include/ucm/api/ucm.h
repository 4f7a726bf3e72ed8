/*
 * Rucx: the memory-event functions of UCX's ucm.h that real consumers call (OpenMPI's
 * common ucx library). Exported by Rucx's library, which is also installed as libucm.so.0.
 * Rucx installs no memory hooks: native events are not offered (ucm_test_events returns
 * UCS_ERR_UNSUPPORTED for any), events declared external are accepted, and
 * ucm_vm_munmap has nothing to invalidate. Values follow UCX 1.13.
 */
#ifndef RUCX_UCM_API_UCM_H
#define RUCX_UCM_API_UCM_H

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>

BEGIN_C_DECLS

/* The memory events a consumer may declare external (a subset of UCX's ucm_event_type_t). */
typedef enum ucm_event_type {
    UCM_EVENT_VM_MAPPED   = UCS_BIT(16),
    UCM_EVENT_VM_UNMAPPED = UCS_BIT(17)
} ucm_event_type_t;

/* The application reports `events` itself (ucm_vm_munmap for UCM_EVENT_VM_UNMAPPED). */
void ucm_set_external_event(int events);

/* UCS_OK when native handlers for `events` work: with Rucx, only for no events. */
ucs_status_t ucm_test_events(int events);

/* UCS_OK when every one of `events` was declared external. */
ucs_status_t ucm_test_external_events(int events);

/* The application releases [addr, addr + length). */
void ucm_vm_munmap(void *addr, size_t length);

END_C_DECLS

#endif
