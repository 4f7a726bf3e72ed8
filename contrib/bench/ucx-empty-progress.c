/* The cost of one ucp_worker_progress call that finds nothing, on a worker with a wired
 * shared-memory endpoint. The loop is the one of Rucx's ucp/examples/empty_progress.rs.
 * Built and run by contrib/bench/inproc-pingpong.sh against UCX 1.22's headers. */
#include "ucx-two-workers.h"
#include <stdlib.h>

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 10000000;
    ucp_worker_h w[2];
    ucp_ep_h ea;
    if (two_workers(UCP_FEATURE_TAG | UCP_FEATURE_AM, w, &ea, NULL)) return 1;
    ucp_worker_h a = w[0];
    for (int i = 0; i < 10000; i++) ucp_worker_progress(a);
    double t0 = now();
    unsigned long n = 0;
    for (long i = 0; i < iters; i++) n += ucp_worker_progress(a);
    if (n != 0) { fprintf(stderr, "nothing was sent, yet progress reported events\n"); return 1; }
    printf("%.2f ns per empty progress (%ld calls)\n", (now() - t0) / iters, iters);
    return 0;
}
