# Rucx: build, install and uninstall the drop-in UCX library, its headers, pkg-config
# files and tools (docs/install.md).
#
#   make [all]                            release build (cargo; fat LTO takes minutes)
#   make install [PREFIX=/usr/local] [DESTDIR=]
#   make uninstall [PREFIX=/usr/local] [DESTDIR=]
#   make test                             the whole test suite (contrib/test-all.sh)
#   make help

PREFIX   ?= /usr/local
DESTDIR  ?=
# Cargo profile to build and install: release, or debug (the dev profile) or any other.
PROFILE  ?= release
# Extra cargo arguments, e.g. CARGO_FLAGS="--features uct/verbs".
CARGO_FLAGS ?=
CARGO    ?= cargo
# The tools installed in bin/; empty: the library, headers and pkg-config files only.
BINS     ?= rucx-perftest rucx-info
# Where cargo put the build; NO_BUILD=1 installs what is there without running cargo.
BUILD_DIR ?= $(or $(CARGO_TARGET_DIR),target)/$(PROFILE)
NO_BUILD ?=

override PREFIX := $(abspath $(PREFIX))
$(if $(PREFIX),,$(error PREFIX is empty))
VERSION  := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

# One library file serves every UCX library name. Its soname is libucp.so.0
# (bindings-c/build.rs), so whatever name a program links it by (-lucp, -lucs, -luct,
# -lucm), the program records libucp.so.0, which is a link here to that file. Programs
# linked against UCX itself (Debian's OpenMPI, whose pml ucx needs libucp.so.0,
# libucs.so.0 and libucm.so.0) find each name as a link here too, and the loader, seeing
# one file (same device and inode) behind all of them, loads it once. So plain symbolic
# links are enough, and no separate file per soname is needed. (ldconfig indexes sonames
# only, so the other names are found through LD_LIBRARY_PATH or an rpath, not
# ld.so.cache: separate stub files would matter only there.)
LIB      := librucx.so.$(VERSION)
# (libucs_signal too: Python's libucx.load_library() opens it by name; bindings-c/gen-pc.sh.)
LINKS    := $(foreach l,ucp ucs ucm uct ucs_signal,lib$(l).so.0 lib$(l).so)
HEADERS  := $(shell cd bindings-c/include && find . -name '*.h' | sed 's|^\./||' | sort)
PCS      := ucx.pc ucx-ucp.pc ucx-uct.pc ucx-ucs.pc rucx.pc
MANIFEST := share/rucx/install_manifest.txt
FILES    := lib/$(LIB) $(addprefix lib/,$(LINKS)) $(addprefix include/,$(HEADERS)) \
            $(addprefix lib/pkgconfig/,$(PCS)) $(addprefix bin/,$(BINS)) $(MANIFEST)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.PHONY: all build install uninstall test help

all: build

build:
	$(CARGO) build --profile $(if $(filter debug,$(PROFILE)),dev,$(PROFILE)) \
	  -p rucx-bindings-c $(if $(BINS),-p rucx-perftest) $(CARGO_FLAGS)

# The manifest lists every file and link installed and every directory that did not
# exist before (ending in /; ./ is the prefix itself): uninstall removes exactly those,
# directories only when empty. It is written before anything is copied, so that even a
# failed install can be uninstalled; an earlier install in the prefix is removed first.
install: $(if $(NO_BUILD),,build)
	@d='$(DESTDIR)$(PREFIX)'
	[ ! -f "$$d/$(MANIFEST)" ] || $(MAKE) --no-print-directory uninstall
	new=()
	for dir in . $$(for f in $(FILES); do f=$$(dirname $$f)
	    while [ $$f != . ]; do echo $$f; f=$$(dirname $$f); done; done | sort -u); do
	  [ -d "$$d/$$dir" ] || { mkdir -p "$$d/$$dir"; new+=("$$dir/"); }
	done
	printf '%s\n' $(FILES) "$${new[@]}" > "$$d/$(MANIFEST)"
	install -m 755 '$(BUILD_DIR)/librucx_bindings_c.so' "$$d/lib/$(LIB)"
	for l in $(LINKS); do ln -sfn $(LIB) "$$d/lib/$$l"; done
	for h in $(HEADERS); do install -m 644 "bindings-c/include/$$h" "$$d/include/$$h"; done
	for pc in $(PCS); do
	  sed -e 's|@prefix@|$(PREFIX)|g' -e 's|@libdir@|$(PREFIX)/lib|g' \
	      -e 's|@includedir@|$(PREFIX)/include|g' "bindings-c/$$pc.in" > "$$d/lib/pkgconfig/$$pc"
	done
	for b in $(BINS); do install -m 755 "$(BUILD_DIR)/$$b" "$$d/bin/$$b"; done
	echo "Rucx installed in $$d (pkg-config: PKG_CONFIG_PATH=$(PREFIX)/lib/pkgconfig, module ucx)"

uninstall:
	@d='$(DESTDIR)$(PREFIX)'
	[ -f "$$d/$(MANIFEST)" ] || { echo "uninstall: no Rucx install in $$d" >&2; exit 1; }
	list=$$(cat "$$d/$(MANIFEST)")
	for f in $$list; do
	  case $$f in /*|*..*) echo "uninstall: skipping $$f" >&2 ;; */) ;; *) rm -f "$$d/$$f" ;; esac
	done
	for dir in $$(printf '%s\n' $$list | grep '/$$' | grep -v '\.\.' | sort -r); do
	  rmdir "$$d/$${dir#./}" 2>/dev/null || true
	done
	echo "Rucx uninstalled from $$d"

test:
	bash contrib/test-all.sh

help:
	@echo 'make [all]        release build: cargo build --release -p rucx-bindings-c -p rucx-perftest'
	echo 'make install      install into PREFIX (default /usr/local), under DESTDIR if set:'
	echo '                  lib/ (libucp.so.0 and the other UCX names), include/, lib/pkgconfig/'
	echo '                  (ucx, ucx-ucp, ucx-uct, ucx-ucs, rucx), bin/ (rucx-perftest, rucx-info)'
	echo '                  and share/rucx/install_manifest.txt'
	echo 'make uninstall    remove what the manifest in PREFIX lists'
	echo 'make test         the test suite (bash contrib/test-all.sh)'
	echo 'Variables: PREFIX DESTDIR PROFILE=release|debug CARGO_FLAGS BINS BUILD_DIR NO_BUILD=1'
