"""A Dask cluster whose scheduler and workers talk over UCX through UCXX
(distributed-ucxx, protocol="ucx"), on host memory: a few array operations, each result
checked against NumPy. Run it over Rucx by putting Rucx's library names first on the
library path and telling the bindings to load them from there:

    RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true LD_LIBRARY_PATH=/opt/rucx/lib \
        python contrib/python/dask_ucx.py

Prints "dask_ucx: OK" and the UCX version the bindings loaded.
"""

import sys

import numpy as np


def main() -> int:
    import dask.array as da
    import ucxx
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        protocol="ucx",
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
    )
    client = Client(cluster)
    try:
        assert cluster.scheduler_address.startswith("ucx://"), cluster.scheduler_address
        rng = np.random.default_rng(7)
        a = rng.random((600, 600))
        b = rng.random((600, 600))
        x = da.from_array(a, chunks=(150, 150))
        y = da.from_array(b, chunks=(150, 150))
        # Chunks move between the two workers over UCX for each of these.
        got_sum = (x + y.T).sum().compute()
        got_dot = (x @ y).compute()
        got_mean = x.mean(axis=0).compute()
        assert np.isclose(got_sum, (a + b.T).sum()), got_sum
        assert np.allclose(got_dot, a @ b)
        assert np.allclose(got_mean, a.mean(axis=0))
        # The workers' own view: each ran tasks, and their peers are ucx:// addresses.
        info = client.scheduler_info()
        workers = list(info["workers"])
        assert len(workers) == 2 and all(w.startswith("ucx://") for w in workers), workers
        version = ".".join(str(v) for v in ucxx.get_ucx_version())
        print(f"dask_ucx: OK (UCX {version} as the bindings see it, workers {workers})")
        return 0
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
