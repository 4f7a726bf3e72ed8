/* Rucx C ABI tests over OpenMPI's OpenSHMEM (oshmem, spml ucx): what every program shares.
 * A failed check prints the PE and the reason on stderr and ends the job with
 * shmem_global_exit(1); a program that passes prints "<name>: OK" from PE 0. */
#ifndef RUCX_SHMEM_CHECK_H
#define RUCX_SHMEM_CHECK_H

#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>

static int me, npes;

#define FAIL(...) do { fprintf(stderr, "pe %d: ", me); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); fflush(stderr); shmem_global_exit(1); } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

static void start(void)
{
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
}

/* The success line comes before shmem_finalize, flushed, so that nothing at exit can lose
 * it; every PE has passed its own checks when the barrier returns. */
static int finish(const char *name)
{
    shmem_barrier_all();
    if (me == 0) {
        printf("%s: OK\n", name);
        fflush(stdout);
    }
    shmem_finalize();
    return 0;
}

#endif
