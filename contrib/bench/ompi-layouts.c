/*
 * The named application layouts of Rucx (ucp/src/dt/apps.rs) as MPI derived datatypes,
 * and an OpenMPI ping-pong of one of them: the same shapes, built with the same
 * constructors and parameters, over the same single buffer (the layout addresses it from
 * its start, count 1). Run by contrib/bench/ompi-layouts.sh beside `rucx-perftest -t
 * tag_lat -D <layout>`.
 *
 *   mpirun -np 2 --mca pml ucx ./ompi-layouts SPEC [ITERS]
 *
 * SPEC is the fully spelled-out spec rucx-perftest prints for the layout:
 *   milc_su3_zd:L2xL3xL4xL5
 *   nas_mg_x:D1xD2xD3   nas_mg_y:D1xD2xD3   nas_mg_z:D1xD2xD3
 *   specfem3d_cm:ICM,IIC,NCM,NIC
 *
 * Rank 0 prints
 *   layout SPEC size=.. lb=.. extent=.. true_lb=.. true_ub=.. blocks=.. fnv=..
 * (the same words rucx-perftest prints for the layout: MPI_Type_size, MPI_Type_get_extent,
 * MPI_Type_get_true_extent, contiguous blocks of the footprint in address order, and FNV-1a
 * 64 of the type packed from a buffer whose byte i is fingerprint_byte(i)), checks one
 * exchange byte for byte (exactly the layout's bytes arrive, the gaps stay untouched), then
 *   latency SPEC median=.. average=.. us (N iterations)
 * one-way (half the round trip): the median of the iterations' round trips, and the
 * average.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)

/* splitmix64 and the sparse Fisher-Yates draw of apps.rs (dense here: an array). */
static uint64_t splitmix64(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int *sample_distinct(uint64_t k, uint64_t n, uint64_t seed)
{
    uint64_t state = seed, *a = malloc(sizeof(*a) * n);
    int *out = malloc(sizeof(*out) * (k ? k : 1));
    for (uint64_t i = 0; i < n; i++) a[i] = i;
    for (uint64_t i = 0; i < k; i++) {
        uint64_t r = (uint64_t)(((unsigned __int128)splitmix64(&state) * (n - i)) >> 64);
        uint64_t j = i + r, vi = a[i], vj = a[j];
        a[j] = vi;
        out[i] = (int)vj;
    }
    free(a);
    return out;
}

#define SEED_CM 0x5eed000000c0ffeeull
#define SEED_IC 0x5eed00001c0ffee1ull

/* The layout of SPEC and the bytes of buffer it addresses. */
static MPI_Datatype build(const char *spec, size_t *buf_len)
{
    MPI_Datatype t;
    long a, b, c, d;
    if (sscanf(spec, "milc_su3_zd:%ldx%ldx%ldx%ld", &a, &b, &c, &d) == 4) {
        /* hvector(2, 1, half buffer, vector(L5, L2*L3/2, L2*L3*L4/2, contiguous(6, float))) */
        MPI_Datatype su3, temp;
        long sites = a * b * c * d;
        MPI_Type_contiguous(6, MPI_FLOAT, &su3);
        MPI_Type_vector((int)d, (int)(a * b / 2), (int)(a * b * c / 2), su3, &temp);
        MPI_Type_create_hvector(2, 1, (MPI_Aint)(sites / 2 * 24), temp, &t);
        MPI_Type_free(&su3);
        MPI_Type_free(&temp);
        *buf_len = (size_t)sites * 24;
    } else if (sscanf(spec, "nas_mg_%*1[xyz]:%ldx%ldx%ld", &a, &b, &c) == 3) {
        /* The face one layer inside the boundary of a D1 x D2 x D3 grid of doubles, placed at
         * its first element by a one-block struct. */
        char axis = spec[7];
        long d1 = a, d2 = b, d3 = c, x, y, z;
        MPI_Datatype face, col;
        if (axis == 'x') {
            MPI_Type_vector((int)(d2 - 2), 1, (int)d1, MPI_DOUBLE, &col);
            MPI_Type_create_hvector((int)(d3 - 2), 1, (MPI_Aint)(d1 * d2 * 8), col, &face);
            MPI_Type_free(&col);
            x = d1 - 2, y = 1, z = 1;
        } else if (axis == 'y') {
            MPI_Type_vector((int)(d3 - 2), (int)(d1 - 2), (int)(d1 * d2), MPI_DOUBLE, &face);
            x = 1, y = d2 - 2, z = 1;
        } else {
            MPI_Type_vector((int)(d2 - 2), (int)(d1 - 2), (int)d1, MPI_DOUBLE, &face);
            x = 1, y = 1, z = 1;
        }
        int one = 1;
        MPI_Aint at = (MPI_Aint)((x + d1 * (y + d2 * z)) * 8);
        MPI_Type_create_struct(1, &one, &at, &face, &t);
        MPI_Type_free(&face);
        *buf_len = (size_t)(d1 * d2 * d3 * 8);
    } else if (sscanf(spec, "specfem3d_cm:%ld,%ld,%ld,%ld", &a, &b, &c, &d) == 4) {
        /* struct of indexed_block(ICM, 3, 3*index, float) over NCM points and
         * indexed_block(IIC, 3, 3*index, float) over NIC points. */
        long icm = a, iic = b, ncm = c, nic = d;
        int *cm = sample_distinct(icm, ncm, SEED_CM), *ic = sample_distinct(iic, nic, SEED_IC);
        for (long i = 0; i < icm; i++) cm[i] *= 3;
        for (long i = 0; i < iic; i++) ic[i] *= 3;
        MPI_Datatype parts[2];
        MPI_Type_create_indexed_block((int)icm, 3, cm, MPI_FLOAT, &parts[0]);
        MPI_Type_create_indexed_block((int)iic, 3, ic, MPI_FLOAT, &parts[1]);
        int bl[2] = {1, 1};
        MPI_Aint displ[2] = {0, (MPI_Aint)(ncm * 12)};
        MPI_Type_create_struct(2, bl, displ, parts, &t);
        MPI_Type_free(&parts[0]);
        MPI_Type_free(&parts[1]);
        free(cm);
        free(ic);
        *buf_len = (size_t)((ncm + nic) * 12);
    } else {
        if (rank == 0) fprintf(stderr, "ompi-layouts: unknown or abbreviated spec '%s'\n", spec);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return MPI_DATATYPE_NULL;
    }
    MPI_Type_commit(&t);
    return t;
}

static unsigned char fingerprint_byte(uint64_t i) { return (unsigned char)(((uint32_t)i * 2654435761u) >> 24); }

/* Which bytes of the buffer the layout covers: unpack a stream of ones into zeroes. */
static unsigned char *footprint(MPI_Datatype t, int size, size_t buf_len)
{
    unsigned char *ones = malloc(size), *mask = calloc(buf_len, 1);
    int pos = 0;
    memset(ones, 1, size);
    MPI_Unpack(ones, size, &pos, mask, 1, t, MPI_COMM_SELF);
    free(ones);
    return mask;
}

static void describe(const char *spec, MPI_Datatype t, size_t buf_len)
{
    int size, pos = 0;
    MPI_Aint lb, extent, tlb, textent;
    MPI_Type_size(t, &size);
    MPI_Type_get_extent(t, &lb, &extent);
    MPI_Type_get_true_extent(t, &tlb, &textent);
    unsigned char *mask = footprint(t, size, buf_len);
    long blocks = 0;
    for (size_t i = 0; i < buf_len; i++)
        if (mask[i] && (i == 0 || !mask[i - 1])) blocks++;
    unsigned char *src = malloc(buf_len), *packed = malloc(size);
    for (size_t i = 0; i < buf_len; i++) src[i] = fingerprint_byte(i);
    MPI_Pack(src, 1, t, packed, size, &pos, MPI_COMM_SELF);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < size; i++) h = (h ^ packed[i]) * 0x00000100000001b3ull;
    printf("layout %s size=%d lb=%ld extent=%ld true_lb=%ld true_ub=%ld blocks=%ld fnv=%016llx\n",
           spec, size, (long)lb, (long)extent, (long)tlb, (long)(tlb + textent), blocks,
           (unsigned long long)h);
    free(mask);
    free(src);
    free(packed);
}

/* One exchange with distinct data: rank 1 must see the layout's bytes and only those. */
static void verify(MPI_Datatype t, size_t buf_len)
{
    int size;
    MPI_Type_size(t, &size);
    unsigned char *buf = malloc(buf_len);
    if (rank == 0) {
        for (size_t i = 0; i < buf_len; i++) buf[i] = (unsigned char)(i * 7 + 3);
        MPI_Send(buf, 1, t, 1, 2, MPI_COMM_WORLD);
    } else {
        unsigned char *mask = footprint(t, size, buf_len);
        memset(buf, 0xEE, buf_len);
        MPI_Recv(buf, 1, t, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < buf_len; i++) {
            unsigned char want = mask[i] ? (unsigned char)(i * 7 + 3) : 0xEE;
            if (buf[i] != want) FAIL("byte %zu is %u, want %u", i, buf[i], want);
        }
        free(mask);
    }
    free(buf);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2 || argc < 2) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 ompi-layouts SPEC [ITERS]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *spec = argv[1];
    int iters = argc > 2 ? atoi(argv[2]) : 1000, warm = iters / 10 + 1, peer = 1 - rank;
    size_t buf_len = 0;
    MPI_Datatype t = build(spec, &buf_len);
    if (rank == 0) describe(spec, t, buf_len);
    verify(t, buf_len);
    unsigned char *buf = calloc(buf_len, 1);
    double *rtt = malloc(sizeof(double) * iters), t0 = 0, last = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = last = MPI_Wtime();
        }
        if (rank == 0) {
            MPI_Send(buf, 1, t, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, 1, t, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 1, t, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 1, t, peer, 1, MPI_COMM_WORLD);
        }
        if (i >= warm) {
            double now = MPI_Wtime();
            rtt[i - warm] = now - last;
            last = now;
        }
    }
    double avg = (last - t0) * 1e6 / (2.0 * iters);
    qsort(rtt, iters, sizeof(double), cmp);
    if (rank == 0)
        printf("latency %s median=%.3f average=%.3f us (%d iterations)\n", spec,
               rtt[iters / 2] * 1e6 / 2.0, avg, iters);
    free(rtt);
    free(buf);
    MPI_Type_free(&t);
    MPI_Finalize();
    return 0;
}
