#!/usr/bin/env bash
# Runs the whole Rucx test suite. As root on a fresh Debian machine it first installs the
# system packages the tests need: iproute2/procps (network namespaces, process checks),
# gcc (the C ABI conformance test compiles against UCX's headers), and Debian's UCX 1.13
# (`libucx-dev` for those headers, `ucx-utils` for the unmodified `ucx_perftest` that the
# C ABI tests run over our libucp.so.0), OpenMPI 4.1.4 and pkg-config (MPI programs and a
# C example built against our headers, run over our library), MPICH 4.0.2 (mpich,
# libmpich-dev: its ch4:ucx device over our library, and its own test suite, whose source
# curl downloads and xz-utils unpacks: contrib/mpich/suite.sh), and g++, make, autoconf,
# automake, libtool and libpmix-dev (Charm++, built from the vendored source against our
# headers: contrib/charm/test.sh), and cmake and libclang-dev (to build the real verbs
# provider, feature `verbs`: rdma-mummy-sys compiles a stub library and generates bindings),
# and python3 with python3-venv (a test regenerates docs/results.md from its data:
# contrib/bench/results.py; UCXX and Dask run in a virtual environment: docs/python.md).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
# Packages the test suite uses; add them here as tests come to need them.
for pkg in iproute2 procps gcc g++ make autoconf automake libtool pkgconf libucx-dev ucx-utils \
  openmpi-bin libopenmpi-dev mpich libmpich-dev libpmix-dev cmake libclang-dev libfabric1 \
  python3 python3-venv curl xz-utils perl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  else
    echo "test-all: missing packages ${need[*]} (run as root to install them)" >&2
  fi
fi

# UCX 1.22 (the PyPI wheel libucx-cu13), beside Debian's 1.13, for the C ABI contract suite
# (bindings-c/tests/contract.rs).
if source contrib/bench/ucx-env.sh; then
  export RUCX_UCX122_LIB="${RUCX_UCX_DIR:-$HOME/.cache/rucx/ucx-1.22}/libucx/lib"
else
  echo "test-all: UCX 1.22 could not be installed; the contract suite runs without it" >&2
fi

# The real verbs provider is built and its unit tests run (feature `verbs`); there is no
# HCA here, so rc_verbs itself runs on the software HCA model.
cargo build --workspace --all-targets --features uct/verbs
cargo test --workspace --features uct/verbs
# The API documentation of the three layers builds without a warning (broken or private
# intra-doc links included); their crate pages' examples ran as doctests just above.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p ucs -p uct -p ucp --features uct/verbs

# Charm++ as a conformance client: built against a `make install` of Rucx alone
# (--basedir=PREFIX), its own tests run over Rucx with no UCX library loaded (about 9
# minutes, 6 of them the build, which is cached).
bash contrib/charm/test.sh
