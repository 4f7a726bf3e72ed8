#!/bin/sh
# Makes a pkg-config directory for Rucx's libucp built by cargo:
#   bindings-c/gen-pc.sh [debug|release]
# creates target/<profile>/rucx-pkg/ with lib/libucp.so and lib/libucp.so.0 (links to the
# cdylib; libucs, libucm and libuct are other names of the same library, for programs that
# link -lucs -lucm -luct or whose plugins need them, as OpenMPI's and Charm++'s do; and
# libucs_signal, which Python's libucx.load_library() opens by name) and
# rucx.pc, and prints that directory (use it as PKG_CONFIG_PATH).
set -e
profile=${1:-debug}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
so="$target/$profile/librucx_bindings_c.so"
[ -f "$so" ] || { echo "$so not built: cargo build -p rucx-bindings-c" >&2; exit 1; }
out="$target/$profile/rucx-pkg"
mkdir -p "$out/lib"
for lib in ucp ucs ucm uct ucs_signal; do
  ln -sf "$so" "$out/lib/lib$lib.so"
  ln -sf "$so" "$out/lib/lib$lib.so.0"
done
sed -e "s|@prefix@|$out|" -e "s|@libdir@|$out/lib|" -e "s|@includedir@|$here/include|" \
    "$here/rucx.pc.in" > "$out/rucx.pc"
echo "$out"
