/* Rucx: thread modes of contexts and workers (UCX values, unchanged from 1.13 to 1.19). */
#ifndef RUCX_UCS_TYPE_THREAD_MODE_H
#define RUCX_UCS_TYPE_THREAD_MODE_H

typedef enum {
    UCS_THREAD_MODE_SINGLE,     /* one thread, always the same */
    UCS_THREAD_MODE_SERIALIZED, /* several threads, one at a time */
    UCS_THREAD_MODE_MULTI,      /* several threads at once */
    UCS_THREAD_MODE_LAST
} ucs_thread_mode_t;

#endif
