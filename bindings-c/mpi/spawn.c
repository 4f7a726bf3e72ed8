/* Rucx C ABI test: a parent spawns two children, exchanges a message
 * with each, and disconnects; the children finalize and exit while the parent keeps
 * progressing for 2 s. A clean disconnect is not a failure: nobody may log a warning. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    MPI_Comm parent, inter;
    int x = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) {
        MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter, MPI_ERRCODES_IGNORE);
        for (int i = 0; i < 2; i++) { x = i; MPI_Send(&x, 1, MPI_INT, i, 0, inter); MPI_Recv(&x, 1, MPI_INT, i, 1, inter, MPI_STATUS_IGNORE); }
        MPI_Comm_disconnect(&inter);
        for (int k = 0; k < 200; k++) { int f; MPI_Status s; MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_SELF, &f, &s); usleep(10000); }
        printf("spawn: OK\n");
    } else {
        MPI_Recv(&x, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
        MPI_Send(&x, 1, MPI_INT, 0, 1, parent);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize();
    return 0;
}
