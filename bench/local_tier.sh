#!/bin/sh
# bench/local_tier.sh - the node-local checkpoint tier's speed (README, "The
# node-local tier"; docs/benchmarks.md, "The node-local tier"), each figure
# beside its peer:
#
#   1. a local save's training stall (the training thread's time in it:
#      the snapshot, the partner exchange's share, the votes and the seal)
#      and its background time (own shard written, partner copies, seal)
#      beside a memory copy of the same bytes, dd into /dev/shm and the
#      shared-tier save of the same state;
#   2. the partner copy beside MPI point-to-point bandwidth between the same
#      two ranks, measured in the same run (bench/p2p_bw.c: messages in
#      pieces of 256 MiB and of 4 MiB, the faster counting);
#   3. the overhead of a local checkpoint every 30 s by its stall: the
#      stall / 30 s (section 5 measures it by run time);
#   4. restores from the local and from the shared tier (the resume line's
#      "loaded in"), 1 -> 1, 1 -> 2, 2 -> 1 and 2 -> 2 ranks, each beside
#      torch.load of the same bytes in as many processes at once;
#   5. the overhead by run time: the same training with and without a
#      local checkpoint every BENCH_LOCAL_STEPS steps, run alternately, and
#      the time the runs took over the same steps compared (all of a save's
#      work counted, wherever it lands), once with the ranks filling the
#      cores and once with an idle share in each step (BENCH_IDLE_MS).
#
#   BUILD=build sh bench/local_tier.sh      (make all, then make bench's
#                                           programs: BUILD/bench/p2p_bw)
#
# One machine plays two nodes: each rank's node is its SLURMD_NODENAME, set
# per rank with mpirun's "-n 1 -x SLURMD_NODENAME=a ... : -n 1 -x
# SLURMD_NODENAME=b ..." contexts, and --ckpt-local DIR/%n gives each fake
# node its own directory under /dev/shm.  The model is section 6's of
# bench/run.sh (an MLP 784-8192-8192-2048-10 with Adam for 1024 MiB: its
# parameters and both moments are the checkpoint), trained with batch 32 on
# Fashion-MNIST.  A run is stopped with SIGKILL to its ranks (the pids of its
# "world:" lines) as soon as it has printed what is measured: a resumed run
# of this model would otherwise evaluate the test set first, for a minute.
#
# Settings (environment):
#   BUILD               build directory with ftrain and bench/p2p_bw (build)
#   BENCH_CKPT_MB       size of the checkpoint state in MiB (1024)
#   BENCH_STOP_LAYERS   hidden layers (chosen from BENCH_CKPT_MB as in
#                       bench/run.sh: 8192,8192,2048 for 1024)
#   BENCH_REPEAT        saves and restores per figure; the best is reported,
#                       every run is printed (3)
#   BENCH_LOCAL_EVERY_S the local checkpoint interval the overhead is stated
#                       for, in seconds (30)
#   BENCH_LOCAL_STEPS   steps between local checkpoints in the saving run (6)
#   BENCH_SHARED_STEPS  steps between its shared-tier saves (14)
#   BENCH_OVERHEAD_SAVES local saves after the first ones in each run of
#                       section 5 (4); 0 skips section 5
#   BENCH_IDLE_MS       section 5's second pair of runs sleeps this long per
#                       step (--step-delay-ms), as a GPU trainer's host
#                       thread waits for its GPU: the CPU is then idle for
#                       part of each step (800; 0: no second pair)
#   BENCH_SINGLE_COPY   Open MPI's shared-memory single-copy mechanism
#                       between the ranks: none (default, as the tests set
#                       it: every byte through a shared segment) or cma
#                       (Linux cross-memory attach: one copy, where the
#                       kernel allows it)
#   BENCH_EXCHANGES     the partner exchanges section 5 runs with, each
#                       beside the same run without the tier
#                       (--ckpt-local-exchange: "thread steps", the
#                       default, or one of them); sections 1-3 use
#                       ftrain's default, auto
#   BENCH_RESTORES      0: skip section 4 (the restores); 1 (default): run it
#   BENCH_THREADS       BLAS threads per rank (--threads; default: ftrain's,
#                       the rank's share of the cores): fewer leave cores
#                       for the tier's helper threads, as on a GPU node
#   BENCH_MPI_YIELD     1 (default): Open MPI ranks yield the CPU while they
#                       wait (mpi_yield_when_idle), 0: they busy-poll
#   BENCH_DIR           where the scratch directory for the shared tier and
#                       the PyTorch files is made ($TMPDIR, else /tmp)
#   BENCH_LOCAL_DIR     where the directory of the fake nodes' local
#                       directories is made (/dev/shm)
#   PYTHON              the interpreter with torch (default: the first of
#                       python3 on PATH and /usr/bin/python3 that imports
#                       torch and numpy)
# Both new directories are deleted at the end.  Needs about 6 x
# BENCH_CKPT_MB free in each place (checked first: the run is skipped with a
# message when there is less), and about 6 x BENCH_CKPT_MB of memory
# besides.
#
# Exit status: 0 when every ftrain figure was measured, 1 when one failed.
# A missing peer prints "peer unavailable: <why>" and the run goes on.
#
# POSIX sh has no local variables: a helper's own variables start with an
# underscore and the helper's subject.
set -u
BUILD=${BUILD:-build}
CKPT_MB=${BENCH_CKPT_MB:-1024}
REPEAT=${BENCH_REPEAT:-3}
EVERY_S=${BENCH_LOCAL_EVERY_S:-30}
LOCAL_STEPS=${BENCH_LOCAL_STEPS:-6}
SHARED_STEPS=${BENCH_SHARED_STEPS:-14}
RESTORES=${BENCH_RESTORES:-1}
OVERHEAD_SAVES=${BENCH_OVERHEAD_SAVES:-4}
IDLE_MS=${BENCH_IDLE_MS:-800}
THREADS=${BENCH_THREADS:-}
SINGLE_COPY=${BENCH_SINGLE_COPY:-none}
EXCHANGES=${BENCH_EXCHANGES:-thread steps}
PYTHON_BIN=${PYTHON:-$(for _py in "$(command -v python3 2>/dev/null)" /usr/bin/python3; do
    [ -n "$_py" ] && "$_py" -c 'import torch, numpy' 2>/dev/null && { echo "$_py"; break; }
done)}
PYTHON_BIN=${PYTHON_BIN:-/usr/bin/python3}
FTRAIN=$BUILD/ftrain
P2P_BW=$BUILD/bench/p2p_bw
SCRIPT_DIR=$(dirname "$0")
SCRATCH=""
LOCAL=""
RUN_PID=""
RUN_LOG=""
status=0

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism="$SINGLE_COPY"
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_mpi_yield_when_idle="${BENCH_MPI_YIELD:-1}"

# ---- helpers -------------------------------------------------------------------

# field KEY TEXT: the word after KEY in TEXT ("" when absent).
field() {
    printf '%s\n' "$2" | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) { print $(i + 1); exit } }'
}
# ratio A B: A/B with two decimals, "n/a" when either is missing or B is 0.
ratio() {
    awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "" || b == "" || a == "n/a" || b == "n/a" || b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'
}
# minimum V...: the smallest number ("" when none).
minimum() { printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | head -n 1; }
# median V...: the median of the numbers ("" when none).
median() {
    printf '%s\n' "$@" | grep -E '^-?[0-9.]+$' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# mbps BYTES SECONDS: 10^6 bytes a second, or "n/a".
mbps() { awk -v b="${1:-}" -v s="${2:-}" 'BEGIN { if (b == "" || s == "" || s + 0 == 0) print "n/a"; else printf "%.0f\n", b / s / 1e6 }'; }
heading() { echo; echo "== $* =="; }
fail() { echo "  FAILED: $*"; status=1; }
# row LABEL C1 C2 C3 C4: one line of a table.
row() { printf '  %-48s %10s %10s %10s %10s\n' "$@"; }
show_tail() { printf '%s\n' "$2" | tail -n "$1" | sed 's/^/    | /'; }

# have_torch: PYTHON can import torch and numpy; else TORCH_WHY says why.
have_torch() {
    TORCH_WHY=""
    [ -x "$PYTHON_BIN" ] || { TORCH_WHY="$PYTHON_BIN not found (apt-get install python3-torch)"; return 1; }
    "$PYTHON_BIN" -c 'import torch, numpy' 2>/dev/null ||
        { TORCH_WHY="$PYTHON_BIN cannot import torch and numpy (apt-get install python3-torch, or set PYTHON)"; return 1; }
}

# ---- runs of ftrain ----------------------------------------------------------------

# launch LOG PLACE ARGS...: start ftrain in the background, output in LOG.
# PLACE: 1 (one rank), 2 (two ranks on this node), a (one rank on fake
# node a), ab (one rank on each of the fake nodes a and b).  Sets RUN_PID.
launch() {
    RUN_LOG=$1
    _launch_place=$2
    shift 2
    : >"$RUN_LOG"
    case $_launch_place in
        1) timeout 900 mpirun -n 1 "$FTRAIN" "$@" >"$RUN_LOG" 2>&1 & ;;
        2) timeout 900 mpirun -n 2 "$FTRAIN" "$@" >"$RUN_LOG" 2>&1 & ;;
        a) timeout 900 mpirun -n 1 -x SLURMD_NODENAME=a "$FTRAIN" "$@" >"$RUN_LOG" 2>&1 & ;;
        ab) timeout 900 mpirun -n 1 -x SLURMD_NODENAME=a "$FTRAIN" "$@" : \
                -n 1 -x SLURMD_NODENAME=b "$FTRAIN" "$@" >"$RUN_LOG" 2>&1 & ;;
    esac
    RUN_PID=$!
}

# stop_run: SIGKILL to the ranks of the run started last (their pids from
# its "world:" lines), then wait for its launcher.  Each rank's memory just
# before (RssAnon: its private memory; RssShmem: the shared memory it maps,
# the local tier's files on tmpfs and Open MPI's segments; in MiB) goes to
# RUN_LOG.mem, one line per rank.  A rank killed so leaves
# its Open MPI shared-memory segment in /dev/shm: the segments the ranks
# had mapped are removed once they are gone.
stop_run() {
    [ -n "$RUN_PID" ] || return 0
    _stop_pids=$(sed -n 's/^world: rank [0-9]* .* pid \([0-9]*\) .*/\1/p' "$RUN_LOG")
    for _stop_pid in $_stop_pids; do
        awk '/^(RssAnon|RssShmem):/ { printf "%s %d ", $1, $2 / 1024 } END { print "" }' \
            "/proc/$_stop_pid/status" 2>/dev/null
    done >"$RUN_LOG.mem"
    _stop_segments=""
    for _stop_pid in $_stop_pids; do
        _stop_segments="$_stop_segments $(grep -o '/dev/shm/vader_segment[^ ]*' "/proc/$_stop_pid/maps" 2>/dev/null | sort -u)"
    done
    for _stop_pid in $_stop_pids; do
        kill -KILL "$_stop_pid" 2>/dev/null
    done
    wait "$RUN_PID" 2>/dev/null
    RUN_PID=""
    # shellcheck disable=SC2086 # a list of paths without blanks
    [ -n "$(echo $_stop_segments)" ] && rm -f $_stop_segments
}

# wait_until SECONDS COMMAND...: poll COMMAND every 0.2 s until it
# succeeds (0) or the run started last has ended or SECONDS have passed (1).
wait_until() {
    _wait_polls=$(($1 * 5))
    shift
    while [ "$_wait_polls" -gt 0 ]; do
        "$@" && return 0
        kill -0 "$RUN_PID" 2>/dev/null || { "$@"; return; }
        sleep 0.2
        _wait_polls=$((_wait_polls - 1))
    done
    return 1
}

# The local checkpoint lines of LOG as "step stall total write copy seal
# snapshot exchange waits" (seconds).  A save in the background (its line
# ends with "training stall M ms (snapshot A, exchange B, waits C)"): stall
# is M, total its time from the start to the seal, write, copy and seal the
# line's own figures.  A synchronous one (ftrain before the background
# save; no stall figure): the stall is the total, write is the total less
# the copy and the seal (the snapshot, the shard's write and the wait for
# the slower rank), and snapshot, exchange and waits are n/a.
local_saves() {
    sed -n 's/^local checkpoint: step \([0-9]*\) in \([0-9.]*\) s (own shard .* written in \([0-9.]*\) s, partner copies .* in \([0-9.]*\) s, sealed in \([0-9.]*\) s)\(.*\)/\1 \2 \3 \4 \5 \6/p' "$1" |
        awk '{ tail = ""; for (i = 6; i <= NF; i++) tail = tail " " $i
               cpu = "n/a"
               if (match(tail, /helper CPU [0-9.]+ ms/)) {
                   split(substr(tail, RSTART, RLENGTH), h, / /)
                   cpu = sprintf("%.3f", h[3] / 1000)
               }
               if (match(tail, /training stall [0-9.]+ ms \(snapshot [0-9.]+, exchange [0-9.]+, waits [0-9.]+\)/)) {
                   split(substr(tail, RSTART, RLENGTH), w, /[ (),]+/)
                   printf "%s %.3f %s %s %s %s %.3f %.3f %.3f %s\n", $1, w[3] / 1000, $2, $3, $4, $5, w[6] / 1000, w[8] / 1000, w[10] / 1000, cpu
               } else
                   printf "%s %s %s %.3f %s %s n/a n/a n/a %s\n", $1, $2, $2, $2 - $4 - $5, $4, $5, cpu }'
}
shared_saves() { sed -n 's/^checkpoint: .*step-0*\([0-9]*\) committed in \([0-9.]*\) s.*/\1 \2/p' "$1"; }

# saves_done LOG WANT: WANT shared saves, and a local one newer than the
# last of them (so that a resume prefers the local tier).
saves_done() {
    _done_shared=$(shared_saves "$1" | wc -l)
    _done_last_shared=$(shared_saves "$1" | tail -n 1 | cut -d ' ' -f 1)
    _done_last_local=$(local_saves "$1" | tail -n 1 | cut -d ' ' -f 1)
    [ "$_done_shared" -ge "$2" ] && [ -n "$_done_last_local" ] &&
        [ "$_done_last_local" -gt "${_done_last_shared:-0}" ]
}
trained() { grep -q '^train:' "$RUN_LOG"; }

# ---- set-up ------------------------------------------------------------------------

check_settings() {
    case $CKPT_MB in
        '' | *[!0-9]*) echo "bench: BENCH_CKPT_MB must be a whole number of MiB, got '$CKPT_MB'" >&2; exit 2 ;;
    esac
    [ "$CKPT_MB" -ge 4 ] || { echo "bench: BENCH_CKPT_MB must be at least 4" >&2; exit 2; }
    case $THREADS in
        '') ;;
        *[!0-9]* | 0) echo "bench: BENCH_THREADS must be a whole number of at least 1, got '$THREADS'" >&2; exit 2 ;;
    esac
    case $REPEAT in
        '' | *[!0-9]* | 0) echo "bench: BENCH_REPEAT must be a whole number of at least 1, got '$REPEAT'" >&2; exit 2 ;;
    esac
    for _set in "$LOCAL_STEPS" "$SHARED_STEPS"; do
        case $_set in
            '' | *[!0-9]* | 0) echo "bench: BENCH_LOCAL_STEPS and BENCH_SHARED_STEPS must be whole numbers of at least 1" >&2; exit 2 ;;
        esac
    done
    for _set in "$OVERHEAD_SAVES" "$IDLE_MS"; do
        case $_set in
            '' | *[!0-9]*) echo "bench: BENCH_OVERHEAD_SAVES and BENCH_IDLE_MS must be whole numbers" >&2; exit 2 ;;
        esac
    done
    case $SINGLE_COPY in
        none | cma) ;;
        *) echo "bench: BENCH_SINGLE_COPY must be none or cma, got '$SINGLE_COPY'" >&2; exit 2 ;;
    esac
    _set=$(printf '%s' "$EXCHANGES" | tr -d ' \t')
    [ -n "$_set" ] || { echo "bench: BENCH_EXCHANGES is empty (thread, steps or both)" >&2; exit 2; }
    for _set in $EXCHANGES; do
        case $_set in
            thread | steps) ;;
            *) echo "bench: BENCH_EXCHANGES holds thread and/or steps, not '$_set'" >&2; exit 2 ;;
        esac
    done
    case $EVERY_S in
        '' | *[!0-9]* | 0) echo "bench: BENCH_LOCAL_EVERY_S must be a whole number of seconds, got '$EVERY_S'" >&2; exit 2 ;;
    esac
    for program in "$FTRAIN" "$P2P_BW"; do
        [ -x "$program" ] || { echo "bench: $program not built (make BUILD=$BUILD all $program)" >&2; exit 1; }
    done
    command -v mpirun >/dev/null 2>&1 || { echo "bench: mpirun not found" >&2; exit 1; }
    if [ -n "${BENCH_STOP_LAYERS:-}" ]; then
        LAYERS=$BENCH_STOP_LAYERS
    elif [ "$CKPT_MB" -ge 1024 ]; then
        LAYERS=8192,8192,2048
    else
        # Two equal hidden layers: 12 bytes (parameter + Adam m + v) each.
        LAYERS=$(awk -v mb="$CKPT_MB" 'BEGIN { w = int(sqrt(mb * 1048576 / 12)); if (w < 16) w = 16; print w "," w }')
    fi
}

cleanup() {
    stop_run
    rm -rf "$SCRATCH" "$LOCAL"
}

make_dirs() {
    mkdir -p "$BUILD"
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    # New directories of our own, even inside given ones: the exit
    # deletes them.
    _dirs_shared=${BENCH_DIR:-${TMPDIR:-/tmp}}
    _dirs_local=${BENCH_LOCAL_DIR:-/dev/shm}
    mkdir -p "$_dirs_shared" "$_dirs_local" || exit 1
    SCRATCH=$(mktemp -d "$_dirs_shared/ftrain-bench-local.XXXXXX") || exit 1
    LOCAL=$(mktemp -d "$_dirs_local/ftrain-bench-local.XXXXXX") || exit 1
}

# enough_space: BENCH_DIR and BENCH_LOCAL_DIR have room for the run; else
# say so (a skip, not a failure).
enough_space() {
    _space_need=$((CKPT_MB * 6))
    for _space_dir in "$SCRATCH" "$LOCAL"; do
        _space_free=$(df -Pm "$_space_dir" | awk 'NR == 2 { print $4 }')
        if [ "${_space_free:-0}" -lt "$_space_need" ]; then
            echo "  skipped: $_space_free MiB free under $_space_dir, the run needs about $_space_need MiB (lower BENCH_CKPT_MB)"
            return 1
        fi
    done
}

print_header() {
    echo "ftrain node-local tier benchmark - $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    printf 'machine: %s cores (%s), %s GiB memory\n' "$(nproc)" \
        "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
        "$(awk '/^MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
    printf 'shared tier: %s on %s; local tier: %s on %s\n' "$SCRATCH" \
        "$(df -PT "$SCRATCH" | awk 'NR == 2 { print $2 " (" $1 ")" }')" "$LOCAL" \
        "$(df -PT "$LOCAL" | awk 'NR == 2 { print $2 }')"
    echo "load: $(uptime | sed 's/.*load average: /load average /') (other processes share this machine)"
    echo "ftrain: $("$FTRAIN" --version 2>&1 | head -1)"
    echo "BLAS threads per rank: ${THREADS:-ftrain's default (the rank's share of the cores)}"
    printf 'mpi: %s; btl self,vader, single_copy_mechanism=%s, mpi_yield_when_idle=%s\n' \
        "$(mpirun --version 2>&1 | head -1)" "$SINGLE_COPY" "$OMPI_MCA_mpi_yield_when_idle"
    if have_torch; then
        echo "torch: $("$PYTHON_BIN" -c 'import torch; print(torch.__version__, "threads", torch.get_num_threads())' 2>&1)"
    else
        echo "torch: peer unavailable: $TORCH_WHY"
    fi
    echo "model: MLP 784-$(echo "$LAYERS" | tr , -)-10, Adam, batch 32 (BENCH_CKPT_MB $CKPT_MB); each figure the best of $REPEAT (BENCH_REPEAT)"
}

# ---- 1-3. saves --------------------------------------------------------------------

# The common options of every run: the model, and steps enough that none
# ends by itself (each is stopped once it printed its figures).
RUN_ARGS=""
set_run_args() {
    RUN_ARGS="--device cpu --layers $LAYERS --global-batch 32 --steps 1000000 --log-every 1000000${THREADS:+ --threads $THREADS}"
}

# save_run NAME PLACE WANT: a run that keeps local checkpoints every
# LOCAL_STEPS steps and saves to the shared tier every SHARED_STEPS, with a
# metrics row per step, until WANT shared saves and a local one after the
# last; its run directory is SCRATCH/NAME, its local root LOCAL/NAME/%n, its
# output SCRATCH/NAME.out.  @return 1 when it did not get there.
save_run() {
    # shellcheck disable=SC2086 # RUN_ARGS is a list of options
    launch "$SCRATCH/$1.out" "$2" $RUN_ARGS --log-every 1 --run-dir "$SCRATCH/$1" \
        --ckpt-local "$LOCAL/$1/%n" --ckpt-local-every "$LOCAL_STEPS" --ckpt-every "$SHARED_STEPS"
    wait_until 850 saves_done "$SCRATCH/$1.out" "$3"
    _save_rc=$?
    stop_run
    rm -rf "$SCRATCH/$1/heartbeat"
    if [ "$_save_rc" != 0 ]; then
        show_tail 6 "$(cat "$SCRATCH/$1.out")"
        return 1
    fi
    STATE_BYTES=$(sed -n 's/^train: .*, \([0-9]*\) parameters,.*/\1/p' "$SCRATCH/$1.out" | awk '{ print $1 * 12 }')
}

section_saves() {
    heading "1-3. local saves on 2 fake nodes (a, b), 1 rank each, beside a memory copy, MPI and the shared tier"
    echo "  ftrain on 2 ranks, --ckpt-local $LOCAL/two/%n --ckpt-local-every $LOCAL_STEPS (stored shards) and"
    echo "  --ckpt-every $SHARED_STEPS (the shared tier: zstd 1, O_DIRECT, $SCRATCH), stopped after $REPEAT shared saves"
    if ! save_run two ab "$REPEAT"; then
        fail "the 2-rank saving run did not get to $REPEAT shared saves"
        return
    fi
    LOCAL_STEP_TWO=$(local_saves "$SCRATCH/two.out" | tail -n 1 | cut -d ' ' -f 1)
    _s_dir=$(ls -d "$LOCAL/two/a/step-"* | tail -n 1)
    SHARD_BYTES=$(wc -c <"$(ls "$_s_dir"/shard-* | head -n 1)")
    echo "  state $STATE_BYTES bytes; a rank's shard (file) $SHARD_BYTES bytes; every save of the run, seconds:"
    local_saves "$SCRATCH/two.out" | awk '{ printf "    local step %-4s stall %s (snapshot %s, exchange %s, waits %s); start to seal %s: write %s, partner copy %s, seal %s; helper CPU %s\n", $1, $2, $7, $8, $9, $3, $4, $5, $6, $10 }'
    grep '^local checkpoint: step [0-9]* skipped' "$SCRATCH/two.out" | sed 's/^/    /'
    shared_saves "$SCRATCH/two.out" | awk '{ printf "    shared step %-4s %s\n", $1, $2 }'
    # The best local save (by its stall), and its parts.
    # shellcheck disable=SC2046 # the nine fields of one line
    set -- $(local_saves "$SCRATCH/two.out" | sort -g -k 2 | head -n 1)
    _s_stall=$2 _s_total=$3 _s_write=$4 _s_copy=$5 _s_seal=$6 _s_snap=$7 _s_xchg=$8
    # shellcheck disable=SC2046 # one number a line
    _s_shared=$(minimum $(shared_saves "$SCRATCH/two.out" | cut -d ' ' -f 2))
    # shellcheck disable=SC2046
    _s_stall_median=$(median $(local_saves "$SCRATCH/two.out" | cut -d ' ' -f 2))
    # shellcheck disable=SC2046
    _s_copy_median=$(median $(local_saves "$SCRATCH/two.out" | cut -d ' ' -f 5))
    # The helper's CPU of the saves after the first three (whose files are
    # new memory, zeroed by the kernel on the helper's first touch).
    # shellcheck disable=SC2046
    _s_cpu_median=$(median $(local_saves "$SCRATCH/two.out" | tail -n +4 | cut -d ' ' -f 10))

    # The peers, in the same run: dd into /dev/shm, a memory copy, MPI.
    _s_dd=$(LC_ALL=C dd if=/dev/zero of="$LOCAL/dd.bin" bs=1M count=$((SHARD_BYTES / 1048576)) 2>&1 |
        awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "copied,") { printf "%.3f\n", $(i + 1); exit } }')
    rm -f "$LOCAL/dd.bin"
    _s_dd_bytes=$(( SHARD_BYTES / 1048576 * 1048576 ))
    P2P=$(timeout 600 mpirun -n 1 -x SLURMD_NODENAME=a "$P2P_BW" "$SHARD_BYTES" "$REPEAT" : \
        -n 1 -x SLURMD_NODENAME=b "$P2P_BW" "$SHARD_BYTES" "$REPEAT" 2>&1)
    [ -n "$(field exchange_s "$P2P")" ] || { fail "p2p_bw"; show_tail 3 "$P2P"; }
    echo
    row "2 ranks, per save (the best stall of them)" "seconds" "MB/s" "" ""
    row "local checkpoint: the training stall" "$_s_stall" "$(mbps "$STATE_BYTES" "$_s_stall")" "" ""
    row "  of it: snapshot (state copy)" "$_s_snap" "" "" ""
    row "  of it: partner exchange on the training thread" "$_s_xchg" "" "" ""
    row "  (median stall of the local saves)" "$_s_stall_median" "" "" ""
    row "the same save, start to seal" "$_s_total" "" "" ""
    row "  own shard written (background)" "$_s_write" "$(mbps "$SHARD_BYTES" "$_s_write")" "" ""
    row "  partner copy: MPI + check + write (wall)" "$_s_copy" "$(mbps "$SHARD_BYTES" "$_s_copy")" "" ""
    row "  seal (votes, manifest, rename)" "$_s_seal" "" "" ""
    # The larger rank's, at the stop (stop_run).
    _s_anon=$(awk '{ for (i = 1; i < NF; i++) if ($i == "RssAnon:" && $(i + 1) > m) m = $(i + 1) } END { print m + 0 }' "$SCRATCH/two.out.mem")
    _s_shmem=$(awk '{ for (i = 1; i < NF; i++) if ($i == "RssShmem:" && $(i + 1) > m) m = $(i + 1) } END { print m + 0 }' "$SCRATCH/two.out.mem")
    row "a rank's memory at the stop (MiB; state $((STATE_BYTES / 1048576)))" "" "" "" ""
    row "  private (RssAnon: state, buffers)" "$_s_anon" "" "" ""
    row "  shared it maps (RssShmem: tier files, MPI)" "$_s_shmem" "" "" ""
    row "memcpy of one shard's bytes, warm memory" "$(field memcpy_s "$P2P")" "$(field memcpy_mb_per_s "$P2P")" "" ""
    row "memcpy into new memory (page faults)" "$(field fresh_s "$P2P")" "$(field fresh_mb_per_s "$P2P")" "" ""
    row "dd bs=1M of one shard's bytes into /dev/shm" "${_s_dd:-n/a}" "$(mbps "$_s_dd_bytes" "$_s_dd")" "" ""
    row "shared-tier save of the same state (2 ranks)" "${_s_shared:-n/a}" "$(mbps "$STATE_BYTES" "$_s_shared")" "" ""
    echo "  shared-tier save / local stall: $(ratio "$_s_shared" "$_s_stall")"
    echo
    row "partner copy beside MPI, one shard each way" "seconds" "MB/s" "" ""
    row "partner copy, wall (median of the saves)" "$_s_copy_median" "$(mbps "$SHARD_BYTES" "$_s_copy_median")" "" ""
    row "  of it on the training thread (best save)" "$_s_xchg" "" "" ""
    row "MPI, both ranks send and receive at once (best)" "$(field exchange_s "$P2P")" "$(field exchange_mb_per_s "$P2P")" "" ""
    row "  in pieces of 256 MiB / of 4 MiB (the tier's)" "$(field exchange_256m_s "$P2P") / $(field exchange_4m_s "$P2P")" "" "" ""
    row "MPI, one way (MPI_Send / MPI_Recv, best)" "$(field send_s "$P2P")" "$(field send_mb_per_s "$P2P")" "" ""
    echo "  partner copy (wall) / MPI exchange of the same bytes: $(ratio "$_s_copy_median" "$(field exchange_s "$P2P")")" \
        "(the copy also checks and writes the partner's)"
    echo
    row "overhead at one checkpoint every $EVERY_S s" "seconds" "overhead" "" ""
    row "local checkpoint: training stall (best)" "$_s_stall" "$(awk -v s="$_s_stall" -v t="$EVERY_S" 'BEGIN { printf "%.2f%%\n", 100 * s / t }')" "" ""
    row "local checkpoint: training stall (median)" "$_s_stall_median" "$(awk -v s="$_s_stall_median" -v t="$EVERY_S" 'BEGIN { printf "%.2f%%\n", 100 * s / t }')" "" ""
    row "shared-tier save instead (synchronous)" "${_s_shared:-n/a}" "$(awk -v s="${_s_shared:-}" -v t="$EVERY_S" 'BEGIN { if (s == "") print "n/a"; else printf "%.2f%%\n", 100 * s / t }')" "" ""
    row "helper thread's CPU, saves after the third (median)" "${_s_cpu_median:-n/a}" "$(awk -v s="${_s_cpu_median:-}" -v t="$EVERY_S" 'BEGIN { if (s == "" || s == "n/a") print "n/a"; else printf "%.2f%%\n", 100 * s / t }')" "" ""
    echo "  (the stall is the training thread's own time in the saves; the helper's CPU is what the"
    echo "   background work takes from a core, of one core's time; what it costs the steps, where"
    echo "   the ranks fill the cores, is section 5's run-time comparison)"
    [ "$RESTORES" = 0 ] && return

    # The 1-rank checkpoints for the restores (one node: no partner).
    echo
    echo "  1 rank on node a (no partner copy), the same saves, stopped after its first shared save:"
    if save_run one a 1; then
        LOCAL_STEP_ONE=$(local_saves "$SCRATCH/one.out" | tail -n 1 | cut -d ' ' -f 1)
        local_saves "$SCRATCH/one.out" | awk '{ printf "    local step %-4s stall %s; start to seal %s: write %s, partner copy %s, seal %s\n", $1, $2, $3, $4, $5, $6 }'
        shared_saves "$SCRATCH/one.out" | awk '{ printf "    shared step %-4s %s\n", $1, $2 }'
    else
        fail "the 1-rank saving run did not get to a shared save"
    fi
}

# ---- 4. restores ---------------------------------------------------------------------

# torch_peers: the same tensors (names, shapes, float32 bytes) through
# torch.save, then torch.load in 1 and in 2 processes at once; sets
# TORCH_LOAD_1, TORCH_INTO_1, TORCH_LOAD_2, TORCH_INTO_2 (seconds; the
# slowest process of the best round) or TORCH_WHY.
# shellcheck disable=SC2034 # read by restore_row through eval
TORCH_LOAD_1="" TORCH_INTO_1="" TORCH_LOAD_2="" TORCH_INTO_2="" TORCH_WHY=""
torch_peers() {
    have_torch || return
    # The raw bytes and tensor table bench/torch_ckpt.py reads: the model's
    # and both moments' tensors, Gaussian values.
    if ! _torch_out=$("$PYTHON_BIN" - "$SCRATCH/raw.bin" "784,$LAYERS,10" <<'EOF' 2>&1
import json, sys
import numpy as np
path, dims = sys.argv[1], [int(d) for d in sys.argv[2].split(",")]
rng = np.random.default_rng(42)
tensors, offset = [], 0
with open(path, "wb") as f:
    for group in ("model", "optim.m", "optim.v"):
        for layer in range(len(dims) - 1):
            for kind, shape in (("weight", [dims[layer + 1], dims[layer]]), ("bias", [dims[layer + 1]])):
                n = int(np.prod(shape))
                (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)).tofile(f)
                tensors.append({"name": f"{group}/l{layer}.{kind}", "dtype": "f32",
                                "offset": offset, "shape": shape})
                offset += 4 * n
with open(path + ".json", "w") as f:
    json.dump({"total_bytes": offset, "tensors": tensors}, f)
EOF
    ); then
        TORCH_WHY="making the raw state failed: $(printf '%s\n' "$_torch_out" | tail -n 1)"
        return
    fi
    _torch_out=$(timeout 900 "$PYTHON_BIN" "$SCRIPT_DIR/torch_ckpt.py" "$SCRATCH/raw.bin" "$SCRATCH/state.pt" "$REPEAT" 2>&1)
    rm -f "$SCRATCH/raw.bin" "$SCRATCH/raw.bin.json"
    if [ "$(field verified "$_torch_out")" != yes ]; then
        TORCH_WHY="torch_ckpt.py failed: $(printf '%s\n' "$_torch_out" | tail -n 1)"
        return
    fi
    echo "  $_torch_out"
    # shellcheck disable=SC2034 # read by restore_row through eval
    TORCH_LOAD_1=$(field load_s "$_torch_out") TORCH_INTO_1=$(field into_s "$_torch_out")
    # Two processes at once, as two ranks of a PyTorch job resume: each
    # loads the whole file; the rounds start together (a barrier of files).
    mkdir -p "$SCRATCH/sync"
    cat >"$SCRATCH/torch_load.py" <<'EOF'
import os, sys, time
import torch
path, sync, me, n, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def barrier(k):
    open(f"{sync}/arrive.{k}.{me}", "w").close()
    while sum(os.path.exists(f"{sync}/arrive.{k}.{i}") for i in range(n)) < n:
        time.sleep(0.001)
live = {k: torch.zeros_like(v) for k, v in torch.load(path).items()}
for r in range(rounds):
    barrier(2 * r)
    t0 = time.perf_counter()
    loaded = torch.load(path)
    fresh = time.perf_counter() - t0
    loaded = None
    barrier(2 * r + 1)
    t0 = time.perf_counter()
    loaded = torch.load(path)
    with torch.no_grad():
        for k, v in loaded.items():
            live[k].copy_(v)
    into = time.perf_counter() - t0
    loaded = None
    print(f"torch_load: round {r} load_s {fresh:.3f} into_s {into:.3f}", flush=True)
EOF
    for _torch_me in 0 1; do
        timeout 900 "$PYTHON_BIN" "$SCRATCH/torch_load.py" "$SCRATCH/state.pt" "$SCRATCH/sync" "$_torch_me" 2 "$REPEAT" \
            >"$SCRATCH/torch_load.$_torch_me" 2>&1 &
    done
    wait
    # Each round's slowest process, then the best round.
    _torch_rounds=$(cat "$SCRATCH/torch_load.0" "$SCRATCH/torch_load.1" | awk '/^torch_load:/ {
        if ($5 > l[$3]) l[$3] = $5; if ($7 > c[$3]) c[$3] = $7 }
        END { for (r in l) print l[r], c[r] }')
    TORCH_LOAD_2=$(printf '%s\n' "$_torch_rounds" | sort -g -k 1 | head -n 1 | cut -d ' ' -f 1)
    # shellcheck disable=SC2034 # read by restore_row through eval
    TORCH_INTO_2=$(printf '%s\n' "$_torch_rounds" | sort -g -k 2 | head -n 1 | cut -d ' ' -f 2)
    echo "  torch.load in 2 processes at once, the slower of each round, s: load$(printf '%s\n' "$_torch_rounds" |
        awk '{ printf " %s", $1 }'); load + copy_$(printf '%s\n' "$_torch_rounds" | awk '{ printf " %s", $2 }')"
    rm -rf "$SCRATCH/state.pt" "$SCRATCH/sync" "$SCRATCH"/torch_load.*
    [ -n "$TORCH_LOAD_2" ] || TORCH_WHY="torch.load in 2 processes failed: $(tail -n 1 "$SCRATCH/torch_load.0" 2>/dev/null)"
}

# restore LABEL PLACE RUN EXPECT [OPTION...]: REPEAT resumes of the run
# directory SCRATCH/RUN on PLACE (as launch), each stopped after its
# "train:" line; EXPECT is a pattern the resume line must match.  Sets
# RESTORE_BEST and RESTORE_RUNS (the "loaded in" seconds).
restore() {
    _r_label=$1 _r_place=$2 _r_run=$3 _r_expect=$4
    shift 4
    RESTORE_BEST="" RESTORE_RUNS=""
    _r_round=0
    while [ "$_r_round" -lt "$REPEAT" ]; do
        _r_round=$((_r_round + 1))
        # shellcheck disable=SC2086 # RUN_ARGS is a list of options
        launch "$SCRATCH/restore.out" "$_r_place" $RUN_ARGS --run-dir "$SCRATCH/$_r_run" "$@"
        wait_until 600 trained
        stop_run
        rm -rf "$SCRATCH/$_r_run/heartbeat"
        _r_line=$(grep '^resume:' "$SCRATCH/restore.out")
        _r_s=$(printf '%s\n' "$_r_line" | sed -n 's/.*, loaded in \([0-9.]*\) s$/\1/p')
        if [ -z "$_r_s" ] || ! printf '%s\n' "$_r_line" | grep -Eq "$_r_expect"; then
            fail "$_r_label: no resume line matching '$_r_expect'"
            show_tail 4 "$(cat "$SCRATCH/restore.out")"
            continue
        fi
        RESTORE_RUNS="$RESTORE_RUNS $_r_s"
    done
    # shellcheck disable=SC2086
    RESTORE_BEST=$(minimum $RESTORE_RUNS)
}

# restore_row LABEL PROCESSES PLACE RUN EXPECT [OPTION...]: restore, then one
# row beside torch.load in PROCESSES processes at once.
restore_row() {
    _rr_label=$1 _rr_procs=$2
    shift 2
    restore "$_rr_label" "$@"
    eval "_rr_load=\${TORCH_LOAD_$_rr_procs:-} _rr_into=\${TORCH_INTO_$_rr_procs:-}"
    row "$_rr_label" "${RESTORE_BEST:-failed}" "${_rr_load:-n/a}" "${_rr_into:-n/a}" "$(ratio "$_rr_load" "$RESTORE_BEST")"
    echo "      runs:$RESTORE_RUNS"
}

section_restores() {
    heading "4. restores: the resume line's \"loaded in\", beside torch.load of the same bytes"
    echo "  torch.save of the same tensors (names, shapes, float32), then torch.load from the page cache:"
    torch_peers
    [ -n "$TORCH_WHY" ] && echo "  peer unavailable: $TORCH_WHY"
    echo "  The shared tier's files are in the page cache too: the resume verifies the newest checkpoint"
    echo "  on rank 0 before it loads (not in \"loaded in\").  One node: plain mpirun; a, b: fake nodes."
    echo "  torch: the same number of processes at once, each loading the whole file; the slowest counts."
    row "restore (N -> M ranks), seconds" "ftrain" "torch.load" "+copy_" "torch/ftr"
    if [ -n "${LOCAL_STEP_ONE:-}" ]; then
        restore_row "shared tier 1 -> 1" 1 1 one "^resume: from [^ ]*/step-[0-9]* .* world 1 -> 1,"
        restore_row "shared tier 1 -> 2, one node" 2 2 one "^resume: from [^ ]*/step-[0-9]* .* world 1 -> 2,"
        restore_row "shared tier 1 -> 2, nodes a, b" 2 ab one "^resume: from [^ ]*/step-[0-9]* .* world 1 -> 2,"
    fi
    if [ -n "${LOCAL_STEP_TWO:-}" ]; then
        restore_row "shared tier 2 -> 1" 1 1 two "^resume: from [^ ]*/step-[0-9]* .* world 2 -> 1,"
        restore_row "shared tier 2 -> 2, one node" 2 2 two "^resume: from [^ ]*/step-[0-9]* .* world 2 -> 2,"
        restore_row "shared tier 2 -> 2, nodes a, b" 2 ab two "^resume: from [^ ]*/step-[0-9]* .* world 2 -> 2,"
    fi
    # The local tier on, with no local checkpoint due before the run stops.
    _sr_every="--ckpt-local-every 1000000"
    if [ -n "${LOCAL_STEP_ONE:-}" ]; then
        restore_row "local tier 1 -> 1, node a" 1 a one \
            "node-local tier .* step $LOCAL_STEP_ONE .* world 1 -> 1," --ckpt-local "$LOCAL/one/%n" $_sr_every
        restore_row "local tier 1 -> 2, nodes a, b (b holds none)" 2 ab one \
            "node-local tier .* step $LOCAL_STEP_ONE .* world 1 -> 2," --ckpt-local "$LOCAL/one/%n" $_sr_every
    fi
    if [ -n "${LOCAL_STEP_TWO:-}" ]; then
        restore_row "local tier 2 -> 1, node a (own + copy)" 1 a two \
            "node-local tier .* step $LOCAL_STEP_TWO .* world 2 -> 1," --ckpt-local "$LOCAL/two/%n" $_sr_every
        restore_row "local tier 2 -> 2, nodes a, b" 2 ab two \
            "node-local tier .* step $LOCAL_STEP_TWO .* world 2 -> 2," --ckpt-local "$LOCAL/two/%n" $_sr_every
    fi
    echo "  (torch/ftr: torch.load's seconds over ftrain's; +copy_: torch.load then copy_ into the"
    echo "   live tensors, as load_state_dict does; ftrain reads into its live tensors)"
}

# ---- 5. the overhead by run time ----------------------------------------------------

# rows_done METRICS N: METRICS has the row of step N.
rows_done() { grep -q "^{\"step\":$2," "$1" 2>/dev/null; }

# overhead_compare BASE TIER L SAVES: from the per-step rows of two runs'
# metrics.jsonl (each row's time is when its step ended), the time each run
# took over the same steps, and what the one with local checkpoints (every
# L steps) lost.  The first three saves (steps L, 2L, 3L) get new files (a
# node keeps 2 steps and one spare set; only then are files taken back):
# the window (1, 3L] holds the first two saves and the new memory of all
# three; the steady window (3L, (3 + SAVES)L] holds SAVES saves, all on
# files taken back.  Prints "warm W steady S base_step B" (seconds: what the
# warm window lost in all, the steady window per save, the run without
# the tier's median step).
overhead_compare() {
    python3 - "$1" "$2" "$3" "$4" <<'EOF2' 2>/dev/null || echo "warm n/a steady n/a base_step n/a"
import json, statistics, sys
def rows(path):
    r = {}
    for line in open(path):
        d = json.loads(line)
        if "event" not in d and "step" in d:
            r[d["step"]] = d["time"]
    return r
base, tier = rows(sys.argv[1]), rows(sys.argv[2])
L, saves = int(sys.argv[3]), int(sys.argv[4])
a, b, c = 1, 3 * L, (3 + saves) * L
span = lambda r, lo, hi: r[hi] - r[lo]
warm = span(tier, a, b) - span(base, a, b)
steady = (span(tier, b, c) - span(base, b, c)) / saves
step = statistics.median(base[s] - base[s - 1] for s in base if s - 1 in base and s > a)
print("warm %.3f steady %.3f base_step %.3f" % (warm, steady, step))
EOF2
}

# overhead_pair NAME ROUND ARGS...: one round of runs on the fake nodes a
# and b (no shared-tier save in any): ARGS alone, then ARGS with a local
# checkpoint every LOCAL_STEPS steps, once for each partner exchange of
# EXCHANGES (--ckpt-local-exchange); each run is stopped once it has the
# row of step (3 + OVERHEAD_SAVES) x LOCAL_STEPS.  Prints the round's line
# and sets PAIR_<exchange> (overhead_compare's words against the run
# without the tier), empty when a run failed.
overhead_pair() {
    _op_name=$1 _op_round=$2
    shift 2
    _op_last=$(((3 + OVERHEAD_SAVES) * LOCAL_STEPS))
    _op_lost="" _op_warm="" _op_sealed="" _op_cpu=""
    for _op_kind in base $EXCHANGES; do
        eval "PAIR_$_op_kind=''"
        _op_dir="$SCRATCH/$_op_name-$_op_kind"
        rm -rf "${_op_dir:?}" "${LOCAL:?}/${_op_name:?}"
        if [ "$_op_kind" != base ]; then
            # shellcheck disable=SC2086 # RUN_ARGS is a list of options
            launch "$_op_dir.out" ab $RUN_ARGS "$@" --log-every 1 --run-dir "$_op_dir" \
                --ckpt-every 1000000 --ckpt-local "$LOCAL/$_op_name/%n" --ckpt-local-every "$LOCAL_STEPS" \
                --ckpt-local-exchange "$_op_kind"
        else
            # shellcheck disable=SC2086
            launch "$_op_dir.out" ab $RUN_ARGS "$@" --log-every 1 --run-dir "$_op_dir" \
                --ckpt-every 1000000
        fi
        wait_until 850 rows_done "$_op_dir/metrics.jsonl" "$_op_last"
        _op_rc=$?
        stop_run
        rm -rf "${LOCAL:?}/${_op_name:?}"
        if [ "$_op_rc" != 0 ]; then
            fail "the $_op_kind run of $_op_name (round $_op_round) did not reach step $_op_last"
            show_tail 6 "$(cat "$_op_dir.out")"
            [ "$_op_kind" = base ] && return 1
            continue
        fi
        [ "$_op_kind" = base ] && continue
        _op_pair=$(overhead_compare "$SCRATCH/$_op_name-base/metrics.jsonl" \
            "$_op_dir/metrics.jsonl" "$LOCAL_STEPS" "$OVERHEAD_SAVES")
        eval "PAIR_$_op_kind=\$_op_pair"
        _op_base_step=$(field base_step "$_op_pair")
        _op_lost="$_op_lost, $_op_kind $(field steady "$_op_pair") s"
        _op_warm="$_op_warm, $_op_kind $(field warm "$_op_pair") s"
        _op_sealed="$_op_sealed, $_op_kind $(grep -c '^local checkpoint: step [0-9]* in' "$_op_dir.out")"
        # shellcheck disable=SC2046 # one number a line
        _op_c=$(median $(local_saves "$_op_dir.out" | tail -n +4 | cut -d ' ' -f 10))
        _op_cpu="$_op_cpu, $_op_kind ${_op_c:-n/a} s"
    done
    echo "    round $_op_round: median step without the tier ${_op_base_step:-n/a} s;" \
        "lost per steady save by exchange${_op_lost#,}; by the first three saves${_op_warm#,}" \
        "(local saves sealed${_op_sealed#,}; helper CPU per steady save, median${_op_cpu#,})"
}

# overhead_rows NAME LABEL ARGS...: REPEAT rounds of overhead_pair, then
# the table's rows (medians of the rounds), one pair per exchange.
overhead_rows() {
    _or_name=$1 _or_label=$2
    shift 2
    echo "  $_or_label:"
    _or_step=""
    for _or_x in $EXCHANGES; do eval "_or_steady_$_or_x='' _or_warm_$_or_x=''"; done
    for _or_round in $(seq 1 "$REPEAT"); do
        overhead_pair "$_or_name" "$_or_round" "$@" || continue
        for _or_x in $EXCHANGES; do
            eval "_or_pair=\$PAIR_$_or_x"
            [ -n "$_or_pair" ] || continue
            eval "_or_steady_$_or_x=\"\$_or_steady_$_or_x $(field steady "$_or_pair")\""
            eval "_or_warm_$_or_x=\"\$_or_warm_$_or_x $(field warm "$_or_pair")\""
            _or_base=$(field base_step "$_or_pair")
        done
        _or_step="$_or_step ${_or_base:-}"
    done
    for _or_x in $EXCHANGES; do
        # shellcheck disable=SC2086 # lists of numbers
        eval "_or_s=\$(median \$_or_steady_$_or_x) _or_w=\$(median \$_or_warm_$_or_x)"
        row "  exchange $_or_x: steady, lost per save (median)" "${_or_s:-n/a}" \
            "$(awk -v s="${_or_s:-}" -v t="$EVERY_S" 'BEGIN { if (s == "") print "n/a"; else printf "%.2f%%\n", 100 * s / t }')" "" ""
        row "  exchange $_or_x: first three saves, in all" "${_or_w:-n/a}" "" "" ""
    done
    # shellcheck disable=SC2086
    _or_step=$(median $_or_step)
    row "  a step without the tier (median)" "${_or_step:-n/a}" "" "" ""
}

section_overhead() {
    heading "5. overhead by run time: the same training without and with a local checkpoint every $LOCAL_STEPS steps"
    echo "  2 ranks on fake nodes a, b; no shared-tier saves; runs alternate (without the tier, then with"
    echo "  each partner exchange of: $EXCHANGES), $REPEAT rounds; each run is"
    echo "  stopped at step $(((3 + OVERHEAD_SAVES) * LOCAL_STEPS)): the first three saves make the node's files (new memory),"
    echo "  the $OVERHEAD_SAVES after them reuse the files of the steps that fall out of --ckpt-local-keep 2"
    row "per local save" "seconds" "at ${EVERY_S} s" "" ""
    if [ -n "$THREADS" ]; then
        overhead_rows busy "$THREADS BLAS threads per rank on $(nproc) cores (BENCH_THREADS; as in sections 1-3)"
    else
        overhead_rows busy "the ranks fill the cores (as in sections 1-3)"
    fi
    if [ "$IDLE_MS" -gt 0 ]; then
        overhead_rows idle "each step also sleeps $IDLE_MS ms (--step-delay-ms: the CPU idles, as a GPU trainer's host thread waits for its GPU)" \
            --step-delay-ms "$IDLE_MS"
    fi
    echo "  (lost: what the run with the tier took over the same steps beyond the run without it, so"
    echo "   all of a save's work counts, the background threads' and the files' preparation too)"
}

# ---- main ------------------------------------------------------------------------------

main() {
    check_settings
    make_dirs
    set_run_args
    print_header
    enough_space || exit 0
    _main_start=$(date +%s)
    section_saves
    [ "$RESTORES" = 0 ] || section_restores
    [ "$OVERHEAD_SAVES" = 0 ] || section_overhead
    echo
    echo "local_tier: done in $(($(date +%s) - _main_start)) s ($(uptime | sed 's/.*load average: /load average /'))"
    exit $status
}

main "$@"
