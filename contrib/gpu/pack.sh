#!/usr/bin/env bash
# Builds what the GPU machine runs (it has no Rust toolchain) and puts it, stripped, in
# .gpu/bin (ignored by git; name `.gpu` in the device tool's `carry`):
#   rucx-perftest, rucx-info, rucx-gpu-peer, rucx-st, rucx-faces, the GPU test binary
#   (gpu-tests), uct's unit tests (uct-tests: the software HCA model over GPU memory),
#   libucp.so.0
# and, when contrib/bench/ucx-env.sh has installed it, the UCX 1.22 wheel's ucx_perftest
# with its CUDA modules (.gpu/ucx122).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p rucx-perftest -p rucx-tests -p rucx-bindings-c
cargo test --release -q -p rucx-tests --test gpu --no-run 2>&1 | tail -n 1
cargo test --release -q -p uct --lib --no-run 2>&1 | tail -n 1
out=.gpu/bin
mkdir -p "$out"
cp target/release/rucx-perftest target/release/rucx-info target/release/rucx-gpu-peer \
  target/release/rucx-st target/release/rucx-faces "$out/"
test_bin=$(ls -t target/release/deps/gpu-* | grep -v '\.d$' | head -n 1)
cp "$test_bin" "$out/gpu-tests"
uct_bin=$(ls -t target/release/deps/uct-* | grep -v '\.d$' | head -n 1)
cp "$uct_bin" "$out/uct-tests"
cp target/release/librucx_bindings_c.so "$out/libucp.so.0"
strip "$out"/*
grep -q '^/.gpu/$' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
# libfabric (for the stream-driven deferred-work test through its sockets provider), with
# the libraries it links but not glibc, for a GPU machine that has none of its own.
if [ -e /usr/lib/x86_64-linux-gnu/libfabric.so.1 ] && [ ! -e .gpu/fabric/libfabric.so.1 ]; then
  mkdir -p .gpu/fabric
  cp -L /usr/lib/x86_64-linux-gnu/libfabric.so.1 .gpu/fabric/
  ldd /usr/lib/x86_64-linux-gnu/libfabric.so.1 | awk '$3 ~ /^\// {print $3}' |
    grep -v -e '/libc\.so' -e '/libm\.so' -e '/libpthread' -e '/libdl\.so' |
    while read -r l; do cp -L "$l" .gpu/fabric/; done
fi
root="${RUCX_UCX_DIR:-$HOME/.cache/rucx/ucx-1.22}"
if [ -d "$root/libucx" ] && [ ! -x .gpu/ucx122/bin/ucx_perftest ]; then
  u=.gpu/ucx122
  mkdir -p "$u/lib/ucx" "$u/bin"
  for f in libucs.so.0 libuct.so.0 libucm.so.0 libucp.so.0 libucs_signal.so.0; do
    cp -L "$root/libucx/lib/$f" "$u/lib/"
  done
  cp -L "$root"/libucx_cu13.libs/*.so* "$u/lib/"
  for f in libuct_cuda libucm_cuda libucx_perftest_cuda libuct_cma; do
    cp -L "$root/libucx/lib/ucx/$f.so.0" "$u/lib/ucx/"
    ln -sf "$f.so.0" "$u/lib/ucx/$f.so"
  done
  cp "$root/libucx/bin/ucx_perftest" "$root/libucx/bin/ucx_info" "$u/bin/"
  strip --strip-unneeded "$u"/lib/*.so* "$u"/lib/ucx/*.so.0 "$u"/bin/* 2>/dev/null || true
fi
du -sh .gpu
