/* Rucx C ABI test over oshmem (spml ucx): the small case, a put and an atomic per PE
 * checked after a barrier, then shmem_finalize. bindings-c/tests/oshmem.rs runs it with
 * OpenMPI's default memory hooks to show that its exit is the same over UCX 1.13 and over
 * Rucx (docs/c-abi.md, "OpenSHMEM (oshmem, spml ucx)"). */
#include "check.h"

static long x, y;

int main(void)
{
    start();
    const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    shmem_long_p(&x, 100 + me, right);
    shmem_barrier_all();
    long got = shmem_long_atomic_fetch_add(&y, 1, 0);
    if (got < 0 || got >= npes) FAIL("fetch_add returned %ld", got);
    shmem_barrier_all();
    if (x != 100 + left) FAIL("put: %ld, want %d", x, 100 + left);
    if (me == 0 && y != npes) FAIL("fetch_add: %ld, want %d", y, npes);
    return finish("putamo");
}
