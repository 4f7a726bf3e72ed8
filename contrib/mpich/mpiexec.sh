#!/usr/bin/env bash
# The launcher that MPICH's `runtests` calls as its mpiexec (suite.sh passes
# `-mpiexec=<this file>`). runtests runs
#     mpiexec.sh -n <np> [mpiexec args from the testlist] ./<program> [program args]
# in the test's build directory, with MPIEXEC_TIMEOUT set to the test's time limit, and
# judges the test by the exit status and the output (stdout and stderr merged).
#
# suite.sh sets, for the column being run:
#   RUCX_SUITE_MPI     mpich | openmpi    which installed MPI launches the program
#   RUCX_SUITE_LIB     ucx | rucx         which libucp.so.0 the ranks load
#   RUCX_SUITE_LIBDIR  (rucx only)        a directory whose libucp/libucs/libucm/libuct.so.0
#                                         all name Rucx's library
# A testlist entry may set (through runtests' `env=`):
#   RUCX_SUITE_STATUS_ONLY=1   for programs that do not print MPICH's " No Errors" (the
#                              `basic` directory, which MPICH's own lists leave out): the
#                              run passes when the launcher exits 0 and no line says
#                              FAILURE; then " No Errors" is printed in place of the output.
set -uo pipefail

mpi=${RUCX_SUITE_MPI:?RUCX_SUITE_MPI unset (run through contrib/mpich/suite.sh)}
lib=${RUCX_SUITE_LIB:?RUCX_SUITE_LIB unset (run through contrib/mpich/suite.sh)}

case $lib in
  # Debian's UCX 1.13 is what the dynamic linker finds by default.
  ucx) unset LD_LIBRARY_PATH ;;
  rucx) export LD_LIBRARY_PATH=${RUCX_SUITE_LIBDIR:?RUCX_SUITE_LIBDIR unset} ;;
  *) echo "mpiexec.sh: unknown RUCX_SUITE_LIB=$lib" >&2; exit 2 ;;
esac

case $mpi in
  mpich)
    # Hydra: forks the ranks locally and passes the whole environment; it honours
    # MPIEXEC_TIMEOUT itself.
    launcher=(mpiexec.mpich)
    ;;
  openmpi)
    # As bindings-c/tests/openmpi.rs runs it: local launch without ssh (plm isolated), only
    # the self BTL, so that pml ucx carries all point-to-point traffic and osc ucx all RMA;
    # any UCX transport and device. mpi_yield_when_idle: the ranks sched_yield() when a
    # progress call finds nothing, which 4 busy-polling ranks on 2 shared cores need.
    # mpirun honours MPIEXEC_TIMEOUT itself (a synonym of --timeout).
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    launcher=(mpirun.openmpi --allow-run-as-root --oversubscribe
      --mca plm isolated --mca btl self
      --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
      --mca osc ucx --mca mpi_yield_when_idle 1)
    if [ "$lib" = rucx ]; then
      launcher+=(-x LD_LIBRARY_PATH)
    fi
    ;;
  *) echo "mpiexec.sh: unknown RUCX_SUITE_MPI=$mpi" >&2; exit 2 ;;
esac

# The program runtests asked for (the first ./name argument), to find leftovers by.
prog=
for a in "$@"; do
  case $a in ./*) prog=$(readlink -f "$a"); break ;; esac
done

# A backstop past the launcher's own MPIEXEC_TIMEOUT, in case a launcher itself hangs.
limit=${MPIEXEC_TIMEOUT:-180}
backstop=(timeout -k 10 $((limit + 60)))

if [ "${RUCX_SUITE_STATUS_ONLY:-}" = 1 ]; then
  out=$("${backstop[@]}" "${launcher[@]}" "$@" </dev/null 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q FAILURE <<<"$out"; then
    echo " No Errors"
  else
    printf '%s\n' "$out"
    [ $rc -ne 0 ] || rc=1
  fi
else
  "${backstop[@]}" "${launcher[@]}" "$@" </dev/null
  rc=$?
fi

# Ranks the launcher left behind (after a timeout) would busy-poll through the next tests:
# end those processes of this very program, by pid.
if [ -n "$prog" ]; then
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$prog" ] || continue
    # (Said only for a failed run: runtests counts any extra output as a failure.)
    [ $rc -eq 0 ] || echo "mpiexec.sh: killing leftover ${p#/proc/} ($prog)" >&2
    kill -9 "${p#/proc/}" 2>/dev/null || true
  done
fi
exit $rc
