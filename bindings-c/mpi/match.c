/* Rucx C ABI test: wildcards, probes, matched probes and cancel. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

static void fill_int(int *b, int n, int seed) { for (int i = 0; i < n; i++) b[i] = seed * 100003 + i; }
static void check_int(const int *b, int n, int seed, const char *w)
{
    for (int i = 0; i < n; i++)
        if (b[i] != seed * 100003 + i) FAIL("%s: element %d is %d, want %d", w, i, b[i], seed * 100003 + i);
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) MPI_Abort(MPI_COMM_WORLD, 2);
    int peer = 1 - rank;
    enum { BIG = 1 << 20 }; /* ints: 4 MiB, rendezvous */
    int *buf = malloc(sizeof(int) * BIG);
    MPI_Status st;
    int cnt;

    /* 1. MPI_ANY_SOURCE / MPI_ANY_TAG with small and large messages; tags come back in status */
    if (rank == 1) {
        int tags[3] = {11, 22, 33}, lens[3] = {1, 1000, BIG};
        for (int i = 0; i < 3; i++) { fill_int(buf, lens[i], tags[i]); MPI_Send(buf, lens[i], MPI_INT, 0, tags[i], MPI_COMM_WORLD); }
    } else {
        for (int i = 0; i < 3; i++) {
            memset(buf, 0, sizeof(int) * BIG);
            MPI_Recv(buf, BIG, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &cnt);
            int want_tag = (i + 1) * 11, want_len = i == 0 ? 1 : i == 1 ? 1000 : BIG;
            if (st.MPI_SOURCE != 1 || st.MPI_TAG != want_tag || cnt != want_len)
                FAIL("any/any #%d: source %d tag %d count %d", i, st.MPI_SOURCE, st.MPI_TAG, cnt);
            check_int(buf, cnt, want_tag, "any/any");
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* 2. MPI_Probe, then a receive sized from the probe; MPI_Iprobe polled until found */
    if (rank == 0) {
        fill_int(buf, 777, 5); MPI_Send(buf, 777, MPI_INT, 1, 5, MPI_COMM_WORLD);
        fill_int(buf, 300000, 6); MPI_Send(buf, 300000, MPI_INT, 1, 6, MPI_COMM_WORLD);
    } else {
        MPI_Probe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &cnt);
        if (st.MPI_TAG != 5 || cnt != 777) FAIL("probe: tag %d count %d", st.MPI_TAG, cnt);
        int *b = malloc(sizeof(int) * cnt);
        MPI_Recv(b, cnt, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check_int(b, cnt, 5, "probe");
        free(b);
        int flag = 0;
        while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &flag, &st);
        MPI_Get_count(&st, MPI_INT, &cnt);
        if (st.MPI_SOURCE != 0 || cnt != 300000) FAIL("iprobe: source %d count %d", st.MPI_SOURCE, cnt);
        MPI_Recv(buf, cnt, MPI_INT, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check_int(buf, cnt, 6, "iprobe");
        /* Iprobe for something never sent */
        MPI_Iprobe(0, 999, MPI_COMM_WORLD, &flag, &st);
        if (flag) FAIL("iprobe found a message that was never sent");
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* 3. MPI_Mprobe + MPI_Mrecv, MPI_Improbe + MPI_Imrecv; out of order by tag */
    if (rank == 1) {
        fill_int(buf, 10, 41); MPI_Send(buf, 10, MPI_INT, 0, 41, MPI_COMM_WORLD);
        fill_int(buf, 500000, 42); MPI_Send(buf, 500000, MPI_INT, 0, 42, MPI_COMM_WORLD);
    } else {
        MPI_Message m;
        MPI_Mprobe(1, 42, MPI_COMM_WORLD, &m, &st);
        MPI_Get_count(&st, MPI_INT, &cnt);
        if (cnt != 500000) FAIL("mprobe count %d", cnt);
        MPI_Mrecv(buf, cnt, MPI_INT, &m, &st);
        check_int(buf, cnt, 42, "mrecv");
        int flag = 0;
        while (!flag) MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m, &st);
        MPI_Get_count(&st, MPI_INT, &cnt);
        if (st.MPI_TAG != 41 || cnt != 10) FAIL("improbe tag %d count %d", st.MPI_TAG, cnt);
        MPI_Request r;
        MPI_Imrecv(buf, cnt, MPI_INT, &m, &r);
        MPI_Wait(&r, &st);
        check_int(buf, 10, 41, "imrecv");
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* 4. MPI_Cancel of a posted receive that never matches; then the tag still works */
    {
        MPI_Request r;
        int x = -1;
        MPI_Irecv(&x, 1, MPI_INT, peer, 4242, MPI_COMM_WORLD, &r);
        MPI_Cancel(&r);
        MPI_Wait(&r, &st);
        int cancelled = 0;
        MPI_Test_cancelled(&st, &cancelled);
        if (!cancelled) FAIL("receive was not cancelled");
        if (x != -1) FAIL("cancelled receive wrote %d", x);
        MPI_Barrier(MPI_COMM_WORLD);
        int y = rank + 10, z = -1;
        MPI_Sendrecv(&y, 1, MPI_INT, peer, 4242, &z, 1, MPI_INT, peer, 4242, MPI_COMM_WORLD, &st);
        if (z != peer + 10) FAIL("after cancel: got %d", z);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(buf);
    if (rank == 0) printf("match: OK (any-source/any-tag, probe, iprobe, mprobe, improbe, cancel)\n");
    MPI_Finalize();
    return 0;
}
