/* Rucx C ABI test: MPI_Request_free on an MPI_Issend that may still be
 * active. ucp.h: a request freed before it completes is released by the library when it
 * completes, and its callback is not invoked. pml ucx recycles the request memory as soon
 * as MPI_Request_free returns, so a callback run after that corrupts the next request.
 * One process, MPI_COMM_SELF, 20 rounds of Issend to itself, Mprobe + Imrecv, Test, free. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); \
    MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int sizes[2] = {8, 100000};
    for (int s = 0; s < 2; s++) {
        int n = sizes[s];
        char *sbuf = malloc(n), *rbuf = malloc(n);
        for (int it = 0; it < 20; it++) {
            for (int i = 0; i < n; i++) sbuf[i] = (char)(i * 7 + it);
            memset(rbuf, 0, n);
            MPI_Request sreq, rreq;
            MPI_Message msg;
            MPI_Status st;
            int flag = 0;
            MPI_Issend(sbuf, n, MPI_CHAR, 0, it, MPI_COMM_SELF, &sreq);
            MPI_Mprobe(0, it, MPI_COMM_SELF, &msg, &st);
            MPI_Imrecv(rbuf, n, MPI_CHAR, &msg, &rreq);
            MPI_Test(&rreq, &flag, &st);
            MPI_Request_free(&sreq);
            if (!flag) MPI_Wait(&rreq, &st);
            int cnt;
            MPI_Get_count(&st, MPI_CHAR, &cnt);
            if (cnt != n || st.MPI_TAG != it) FAIL("round %d: count %d tag %d", it, cnt, st.MPI_TAG);
            for (int i = 0; i < n; i++)
                if (rbuf[i] != (char)(i * 7 + it)) FAIL("round %d size %d: byte %d differs", it, n, i);
        }
        free(sbuf);
        free(rbuf);
    }
    MPI_Finalize();
    printf("issend_free: OK\n");
    return 0;
}
