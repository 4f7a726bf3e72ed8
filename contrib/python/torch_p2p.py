"""PyTorch CUDA tensors between every pair of processes through an MPI that knows
nothing of GPUs (the GPU machine's OpenMPI 4.1.6 through mpi4py): the UCX library under
`pml ucx` sees device memory and moves it. Over Rucx:

    mpirun -np N --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
        -x LD_LIBRARY_PATH=<rucx lib> python contrib/python/torch_p2p.py [MAXSIZE]

Each process takes GPU rank % ngpu. For every ordered pair (a, b) and every size from 4 B
to MAXSIZE (default 256 MiB; by factors of 16, and MAXSIZE itself): a sends a tensor to b, b checks every
element and sends it back, a checks it; then a timed ping-pong. Rank 0 prints
"torch_p2p SIZE a b latency_us bandwidth_GB/s" lines and "torch_p2p: OK".

What does not work this way: collectives that reduce (MPI_Allreduce on device buffers)
run their arithmetic on the host in a non-CUDA-aware MPI and fail or corrupt data; only
point-to-point (and collectives that only move bytes, through pml) reach the library.
"""

import sys

import torch
from mpi4py import MPI


def main() -> int:
    comm = MPI.COMM_WORLD
    me, np_ = comm.Get_rank(), comm.Get_size()
    dev = torch.device("cuda", me % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    maxsize = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    sizes = []
    s = 4
    while s <= maxsize:
        sizes.append(s)
        s *= 16
    if sizes[-1] != maxsize:
        sizes.append(maxsize)
    lines = []
    for size in sizes:
        n = size // 4
        for a in range(np_):
            for b in range(np_):
                if a == b:
                    continue
                comm.Barrier()
                if me not in (a, b):
                    continue
                peer = b if me == a else a
                want = (torch.arange(n, dtype=torch.int32, device=dev) * 7 + a * 131 + b) % 100003
                buf = want.clone() if me == a else torch.zeros(n, dtype=torch.int32, device=dev)
                torch.cuda.synchronize()
                if me == a:
                    comm.Send(buf, dest=peer, tag=1)
                    buf.zero_()
                    torch.cuda.synchronize()
                    comm.Recv(buf, source=peer, tag=2)
                else:
                    comm.Recv(buf, source=peer, tag=1)
                    torch.cuda.synchronize()
                    if not torch.equal(buf, want):
                        print(f"torch_p2p: {size} B {a}->{b}: wrong data", flush=True)
                        comm.Abort(1)
                    comm.Send(buf, dest=peer, tag=2)
                torch.cuda.synchronize()
                if me == a and not torch.equal(buf, want):
                    print(f"torch_p2p: {size} B {b}->{a}: wrong data", flush=True)
                    comm.Abort(1)
                iters = 50 if size <= (1 << 20) else 5
                t0 = MPI.Wtime()
                for _ in range(iters):
                    if me == a:
                        comm.Send(buf, dest=peer, tag=3)
                        comm.Recv(buf, source=peer, tag=3)
                    else:
                        comm.Recv(buf, source=peer, tag=3)
                        comm.Send(buf, dest=peer, tag=3)
                dt = (MPI.Wtime() - t0) / (2 * iters)
                if me == a:
                    lines.append((size, a, b, dt * 1e6, size / dt / 1e9))
    every = comm.gather(lines, root=0)
    if me == 0:
        for size, a, b, us, gbs in sorted(x for part in every for x in part):
            print(f"torch_p2p {size} {a} {b} {us:.2f} {gbs:.2f}", flush=True)
        print(f"torch_p2p: OK ({np_} processes, {torch.cuda.device_count()} GPUs)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
