#!/bin/sh
# launch.sh - one MPI launch of a test, launched again when Open MPI's own
# start-up failed inside MPI_Init.
#
#     timeout -k 5 120 sh tests/launch.sh mpirun --oversubscribe -n 2 build/ftrain ...
#
# tests/lib.sh's mpi and mpi_bg launch through it; a test may too.
#
# Why: a failure of Open MPI's start-up is not the behaviour a test
# checks.  One such failure, "OPAL ERROR: Unreachable in file
# ext3x_client.c" (PMIx's munge check while the SLURM tests restarted
# munged), has its cause removed in tests/lib.sh (PMIX_MCA_psec=native);
# this is the net for any other.  The rank prints "*** An error occurred
# in MPI_Init_thread" and mpirun aborts the job.  Such a launch is safe to
# repeat: MPI_Init is collective (its PMIx fence waits for every rank), so
# no rank of a launch that one rank failed there got past it, and nothing
# of ftrain's past MPI_Init ran.
#
# What it does: runs COMMAND... (mpirun and its arguments) in the
# foreground.  When it exits non-zero, no TERM, INT or HUP reached this
# script meanwhile, and the launch's stderr holds Open MPI's "An error
# occurred in MPI_Init", the launch is started again, at most
# FTRAIN_LAUNCH_TRIES launches in all (default 3), a second apart.  Each
# retry is said on stderr ("launch.sh: ...") and, when FTRAIN_TEST_LOGS
# names a directory, as a line of FTRAIN_TEST_LOGS/launch-retries (time,
# test file, Open MPI's first error line), which tests/run.sh prints at the
# end: a retry is never silent.
# The launch's stderr is read where it goes: when it is a regular file, from
# where that file ended as the launch started (what the launch wrote stays
# there, a failed attempt's text included); otherwise (a pipe, a terminal,
# /dev/null) the launch's stderr, and its stdout too when both are one pipe,
# go to a temporary file first, copied out once the launch has ended.
# A TERM, INT or HUP (timeout(1) sends them to its whole process group,
# mpirun and the ranks included) is left to the launch and ends the retries.
#
# Exit status: the last launch's (128+N when signal N ended it); 2 with no
# COMMAND.

[ $# -gt 0 ] || { echo "usage: launch.sh COMMAND [ARG...]" >&2; exit 2; }
tries=${FTRAIN_LAUNCH_TRIES:-3}
case $tries in '' | *[!0-9]* | 0) echo "launch.sh: FTRAIN_LAUNCH_TRIES='$tries' is not a positive number" >&2; exit 2 ;; esac

sig=0
trap 'sig=1' TERM INT HUP
tmp=""
sess=""
trap '[ -z "$tmp" ] || rm -f "$tmp"; [ -z "$sess" ] || rm -rf "$sess"' EXIT
# A session directory base of this launch's own, under the one the test
# gave (tests/lib.sh: $T/ompi): an mpirun that ends removes its top
# session directory when it is empty, and a second mpirun of the same test
# creating its own below it meanwhile failed ("orte_session_dir failed",
# seen once in stop_resume.sh's launches side by side).
if [ -n "${OMPI_MCA_orte_tmpdir_base:-}" ] && [ -d "$OMPI_MCA_orte_tmpdir_base" ]; then
    sess=$(mktemp -d "$OMPI_MCA_orte_tmpdir_base/l.XXXXXX") && export OMPI_MCA_orte_tmpdir_base="$sess"
fi

# same_file A B: fds A and B of this process are one file (one pipe).
same_file() {
    [ "$(stat -L -c %d:%i "/proc/$$/fd/$1" 2>/dev/null)" = "$(stat -L -c %d:%i "/proc/$$/fd/$2" 2>/dev/null)" ]
}

n=1
while :; do
    if [ -f "/proc/$$/fd/2" ]; then
        # stderr is a regular file: read it back from where it ends now.
        off=$(stat -L -c %s "/proc/$$/fd/2" 2>/dev/null) || off=0
        "$@"
        rc=$?
        # Read back only what may be launched again (a launch that ended
        # well costs no process more).
        [ "$rc" -ne 0 ] && [ "$sig" = 0 ] && [ "$n" -lt "$tries" ] || exit "$rc"
        err=$(tail -c +"$((off + 1))" "/proc/$$/fd/2" 2>/dev/null | grep -m 3 -E 'An error occurred in MPI_Init|OPAL ERROR|PMIx')
    else
        [ -n "$tmp" ] || tmp=$(mktemp "${TMPDIR:-/tmp}/launch.XXXXXX") || exit 2
        if same_file 1 2; then
            "$@" >"$tmp" 2>&1
            rc=$?
            cat "$tmp"
        else
            "$@" 2>"$tmp"
            rc=$?
            cat "$tmp" >&2
        fi
        [ "$rc" -ne 0 ] && [ "$sig" = 0 ] && [ "$n" -lt "$tries" ] || exit "$rc"
        err=$(grep -m 3 -E 'An error occurred in MPI_Init|OPAL ERROR|PMIx' "$tmp")
    fi
    case $err in *"An error occurred in MPI_Init"*) ;; *) exit "$rc" ;; esac
    first=$(printf '%s\n' "$err" | grep -v 'An error occurred in MPI_Init' | head -n 1)
    [ -n "$first" ] || first=$(printf '%s\n' "$err" | head -n 1)
    echo "launch.sh: launch $n of at most $tries failed inside MPI_Init, in Open MPI's start-up (exit $rc: $first); launching again" >&2
    if [ -n "${FTRAIN_TEST_LOGS:-}" ] && [ -d "$FTRAIN_TEST_LOGS" ]; then
        echo "$(date +%H:%M:%S) ${FTRAIN_TEST_FILE:-?}: launch $n of $tries: $first" >>"$FTRAIN_TEST_LOGS/launch-retries"
    fi
    n=$((n + 1))
    sleep 1
    [ "$sig" = 0 ] || exit "$rc"
done
