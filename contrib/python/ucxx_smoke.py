"""UCXX (RAPIDS' Python bindings to UCX) over whatever UCX the bindings loaded: written
for Rucx's test suite (contrib/python/ucxx-suite.sh --ci), in the shape of UCXX's own
tests, none of which its wheels ship. Checks:

- the bindings see UCX 1.19 or later (they refuse older ones) and an active transport;
- a configuration option set through ucxx.init reads back (ucp_config_modify/print);
- client and server on one worker: tag messages of 0 B to 16 MiB echoed, checked;
- active messages (am_send/am_recv) echoed, checked, up to UCXX's rendezvous threshold;
- the progress thread sleeping on the worker's wakeup descriptor ("blocking" and
  "thread" progress modes), which every exchange above depends on.

Prints "ucxx_smoke: OK" when all pass.
"""

import asyncio
import os
import sys

import numpy as np

SIZES = [0, 1, 10, 4096, 65536, 1 << 20, 16 << 20]
# Active messages up to UCXX's rendezvous threshold (UCX_RNDV_THRESH=8192, which UCXX
# sets): UCXX's rendezvous active messages do not complete over Rucx yet (docs/python.md).
AM_SIZES = [0, 1, 10, 4096]


async def echo_tag(ep):
    size = np.empty(1, dtype=np.uint64)
    await ep.recv(size)
    msg = np.empty(int(size[0]), dtype=np.uint8)
    await ep.recv(msg)
    await ep.send(msg)
    await ep.close()


async def echo_am(ep):
    for _ in AM_SIZES:
        got = await ep.am_recv()
        await ep.am_send(got)
    await ep.close()


async def exchange(ucxx, mode):
    listener = ucxx.create_listener(echo_tag)
    for n in SIZES:
        ep = await ucxx.create_endpoint(ucxx.get_address(), listener.port)
        msg = (np.arange(n, dtype=np.uint64) * 2654435761 % 251).astype(np.uint8)
        await ep.send(np.array([n], dtype=np.uint64))
        await ep.send(msg)
        back = np.empty_like(msg)
        await ep.recv(back)
        assert np.array_equal(back, msg), f"{mode}: tag echo of {n} bytes differs"
        await ep.close()
    listener.close()

    listener = ucxx.create_listener(echo_am)
    ep = await ucxx.create_endpoint(ucxx.get_address(), listener.port)
    for n in AM_SIZES:
        msg = np.full(n, n % 251, dtype=np.uint8)
        await ep.am_send(msg)
        back = await ep.am_recv()
        assert bytes(back) == msg.tobytes(), f"{mode}: AM echo of {n} bytes differs"
    await ep.close()
    listener.close()


def main() -> int:
    import ucxx

    version = ucxx.get_ucx_version()
    assert version >= (1, 19, 0), version
    transports = ucxx.get_active_transports()
    assert transports, "no active transport in ucp_context_print_info's text"
    for mode in os.environ.get("SMOKE_MODES", "blocking,thread").split(","):
        os.environ["UCXPY_PROGRESS_MODE"] = mode
        ucxx.reset()
        ucxx.init(options={"SEG_SIZE": "2M"})
        cfg = ucxx.get_config()
        assert cfg.get("SEG_SIZE") == "2M", cfg.get("SEG_SIZE")
        asyncio.run(exchange(ucxx, mode))
    ucxx.reset()
    print(f"ucxx_smoke: OK (UCX {'.'.join(map(str, version))}, transports {sorted(transports)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
