/* Rucx C ABI test: the acknowledgement of a synchronous send goes out
 * inside the call that posts the matching receive. Rank 1 Iprobes until the message is
 * there, receives it (MPI_Recv, then MPI_Mrecv after MPI_Mprobe), and then stays out of MPI
 * for a while (sleep). Rank 0's MPI_Issend + MPI_Wait must complete without waiting for
 * rank 1's next MPI call: we require well under the sleep. 8 B (eager) and 100 kB. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

enum { SLEEP_US = 1500000 };

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) MPI_Abort(MPI_COMM_WORLD, 2);
    int sizes[2] = {8, 100000};
    double worst = 0;
    for (int s = 0; s < 2; s++) {
        for (int mode = 0; mode < 2; mode++) { /* 0: Iprobe + Recv, 1: Mprobe + Mrecv */
            int n = sizes[s], tag = 10 * s + mode;
            char *buf = malloc(n);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0) {
                for (int i = 0; i < n; i++) buf[i] = (char)(i + tag);
                MPI_Request r;
                double t0 = MPI_Wtime();
                MPI_Issend(buf, n, MPI_CHAR, 1, tag, MPI_COMM_WORLD, &r);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
                double dt = MPI_Wtime() - t0;
                printf("issend %d B (%s): %.4f s\n", n, mode ? "mprobe+mrecv" : "iprobe+recv", dt);
                if (dt > worst) worst = dt;
            } else {
                int flag = 0;
                MPI_Status st;
                while (!flag) MPI_Iprobe(0, tag, MPI_COMM_WORLD, &flag, &st);
                if (mode == 0) {
                    MPI_Recv(buf, n, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &st);
                } else {
                    MPI_Message m;
                    MPI_Mprobe(0, tag, MPI_COMM_WORLD, &m, &st);
                    MPI_Mrecv(buf, n, MPI_CHAR, &m, &st);
                }
                for (int i = 0; i < n; i++)
                    if (buf[i] != (char)(i + tag)) FAIL("size %d: byte %d differs", n, i);
                usleep(SLEEP_US); /* outside MPI: nothing progresses here */
            }
            free(buf);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        if (worst > 0.5 * SLEEP_US / 1e6) FAIL("an Issend waited %.3f s for the receiver's next MPI call", worst);
        printf("issend_ack: OK\n");
    }
    MPI_Finalize();
    return 0;
}
