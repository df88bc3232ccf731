#!/bin/sh
# bench/run.sh - every benchmark of `make bench` in one go: ftrain's figures
# beside its peers (PyTorch, dd, zstd), with ratios.  See docs/benchmarks.md.
#
#   BUILD=build sh bench/run.sh
#
# Sections: 1 training throughput, 2 checkpoint save, 3 load and reshard,
# 4 compression ratio, 5 torch.save/torch.load, 6 stop path, 7 GPU (skipped
# with the reason when no GPU can be used), 8 convergence beside PyTorch,
# 9 hangs and dead ranks (the watchdog's cost, the time to end a job), 10
# failure to training again inside the allocation (slurm/train.sbatch on
# the one-machine SLURM test cluster; skipped with the reason without root
# or SLURM).
# Each is one function below (section_1_training ... section_11_local_tier);
# main, at the bottom, runs those that BENCH_SECTIONS names.
#
# Settings (environment):
#   BUILD               build directory with ftrain and bench/ckpt_bench (build)
#   BENCH_SECTIONS      which sections to run ("1 2 3 4 5 6 7 8 9 10 11")
#   BENCH_STEPS         training steps for section 1 (400)
#   BENCH_REPEAT        runs per figure; the best is reported (3)
#   BENCH_PAIRS         back-to-back rounds (dd conv=fdatasync, 1 rank, 2
#                       ranks) for section 2's verdicts, judged by the median
#                       of the paired ratios (8; at least BENCH_REPEAT)
#   BENCH_CKPT_MB       checkpoint state size in MiB for sections 2-5 (1024)
#   BENCH_HANG_ROUNDS   section 9: rounds of the watchdog on/off pair and
#                       runs per failure kind (5)
#   BENCH_RELAUNCH_ROUNDS  section 10: jobs per failure kind (3)
#   FTRAIN_SLURM_LAB    section 10: the test cluster's directory, as for
#                       tests/slurm/lab/lab-up.sh (/tmp/ftrain-slurm-lab)
#   BENCH_STOP_LAYERS   hidden layers of the section 6 MLP (chosen from
#                       BENCH_CKPT_MB: 8192,8192,2048 for 1024, about 1 GiB of
#                       parameters and Adam moments)
#   BENCH_MPI_YIELD     1 (default): Open MPI ranks yield the CPU while they
#                       wait (mpi_yield_when_idle), 0: they busy-poll
#   BENCH_DIR           scratch directory (default: a new one under $TMPDIR or
#                       /tmp, so that `make clean` cannot pull it away
#                       mid-run); deleted at the end
#   PYTHON              the interpreter with torch (default: the first of
#                       python3 on PATH and /usr/bin/python3 that imports
#                       torch and numpy)
#
# A missing peer prints "peer unavailable: <why>" and the run goes on.  Exit
# status: 0 when every ftrain figure was measured, 1 when one failed.
#
# POSIX sh has no local variables: a helper's own variables start with an
# underscore and the helper's subject, so that they cannot clobber a
# caller's.
set -u
BUILD=${BUILD:-build}
SECTIONS=${BENCH_SECTIONS:-"1 2 3 4 5 6 7 8 9 10 11"}
TRAIN_STEPS=${BENCH_STEPS:-400}
REPEAT=${BENCH_REPEAT:-3}
PAIR_ROUNDS=${BENCH_PAIRS:-8}
HANG_ROUNDS=${BENCH_HANG_ROUNDS:-5}
RELAUNCH_ROUNDS=${BENCH_RELAUNCH_ROUNDS:-3}
CKPT_MB=${BENCH_CKPT_MB:-1024}
PYTHON_BIN=${PYTHON:-$(for _py in "$(command -v python3 2>/dev/null)" /usr/bin/python3; do
    [ -n "$_py" ] && "$_py" -c 'import torch, numpy' 2>/dev/null && { echo "$_py"; break; }
done)}
PYTHON_BIN=${PYTHON_BIN:-/usr/bin/python3}
FTRAIN=$BUILD/ftrain
CKPT_BENCH=$BUILD/bench/ckpt_bench
GEMM_BOUND=$BUILD/bench/gemm_bound
GPU_PHASES=$BUILD/bench/gpu_phases
SCRIPT_DIR=$(dirname "$0")
# The scratch directory (set by make_scratch) and the background run that
# the exit must stop (section 6).
SCRATCH=""
BACKGROUND_PID=""
# Section 10: the SLURM test cluster, the job the exit must cancel, and 1
# while the cluster is up because this run started it (the exit stops it).
export FTRAIN_SLURM_LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
LAB=$FTRAIN_SLURM_LAB
RELAUNCH_JOB=""
RELAUNCH_LAB_STARTED=0
# 1 once an ftrain figure could not be measured: the exit status.
status=0

# Figures that one section measures and a later one reports beside a peer.
SAVE_1RANK_MBPS=""         # section 2, best 1-rank save (sections 2, 5)
SAVE_2RANKS_MBPS=""        # section 2, best 2-rank save
RAW_BYTES=""               # section 2, raw bytes of the state (section 4)
STORED_BYTES_1RANK=""      # section 2, bytes the 1-rank save wrote (section 4)
STORED_BYTES_2RANKS=""     # section 2, bytes the 2-rank save wrote (section 4)
LOAD_1TO1_MBPS=""          # section 3, best 1 -> 1 load (section 5)
LOAD_INTO_MBPS=""          # section 3, best load into existing memory (section 5)
CKPT_SPACE_OK=1            # 0 when the scratch disk is too small for 2-5
TORCH_IN_ROUNDS=0          # 1 when torch.save runs in section 2's rounds
TORCH_WHY=""               # why PyTorch cannot be used (have_torch)
# torch_once's figures (section 5): the best and the list of each kind.
TORCH_SAVE_MBPS="" TORCH_LOAD_MBPS="" TORCH_LOAD_INTO_MBPS=""
TORCH_SAVE_RUNS="" TORCH_LOAD_RUNS="" TORCH_LOAD_INTO_RUNS="" TORCH_CKPT_WHY=""

# One machine, as root: shared-memory transport, no binding, no network.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_mpi_yield_when_idle=${BENCH_MPI_YIELD:-1}

# ---- helpers ---------------------------------------------------------------

# field KEY TEXT: the word after KEY in TEXT ("" when absent).
field() {
    printf '%s\n' "$2" | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) { print $(i + 1); exit } }'
}
# ratio A B: A/B with two decimals, "n/a" when either is missing or B is 0.
ratio() {
    awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'
}
# max A B / min A B over numbers, ignoring empty values.
maxof() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 >= b + 0) print a; else print b }'; }
minof() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }
# median V...: the median of numbers ("n/a" and "failed" left out), or "".
median() {
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# verdict VALUE BAR: "met" when VALUE >= BAR, "NOT met", or "not measured"
# when VALUE is "" or "n/a".
verdict() {
    awk -v v="${1:-}" -v bar="$2" 'BEGIN { if (v == "" || v == "n/a") print "not measured"; else if (v + 0 >= bar + 0) print "met"; else print "NOT met" }'
}
# verdict_within_noise MEDIAN NOISE: "met" when MEDIAN >= 1 - NOISE, "NOT
# met", or "not measured" when either is "".
verdict_within_noise() {
    awk -v m="${1:-}" -v d="${2:-}" 'BEGIN { if (m == "" || d == "") print "not measured"; else if (m + 0 >= 1 - d) print "met"; else print "NOT met" }'
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }
# row LABEL COLUMN1 COLUMN2 COLUMN3: one line of a figures table.
row() { printf '  %-46s %14s %14s %8s\n' "$@"; }
heading() { echo; echo "== $* =="; }
# want N: section N is one of BENCH_SECTIONS.
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
fail() { echo "  FAILED: $*"; status=1; }
# show_tail LINES TEXT: the last LINES lines of TEXT, indented and marked.
show_tail() { printf '%s\n' "$2" | tail -"$1" | sed 's/^/    | /'; }

# The timing line of an ftrain run: "timing: S samples/s, gradient reduction
# G ms/step, stop/control reduction C ms/step".
timing_samples_per_s() { printf '%s\n' "$1" | sed -n 's/^timing: \([0-9.]*\) samples\/s.*/\1/p'; }
timing_grad_reduction_ms() { printf '%s\n' "$1" | sed -n 's/^timing: .*gradient reduction \([0-9.]*\) ms.*/\1/p'; }
timing_control_reduction_ms() { printf '%s\n' "$1" | sed -n 's/^timing: .*control reduction \([0-9.]*\) ms.*/\1/p'; }
# train_param_count TEXT: the parameter count of the "train:" line in TEXT.
train_param_count() { printf '%s\n' "$1" | sed -n 's/^train: .*, \([0-9]*\) parameters,.*/\1/p'; }

# ftrain_best RANKS ARGS...: run ftrain on RANKS ranks REPEAT times; sets
# BEST_SAMPLES_PER_S, BEST_GRAD_REDUCTION_MS and BEST_CONTROL_REDUCTION_MS
# from the fastest run and RUNS_SAMPLES_PER_S to the list of samples/s.
ftrain_best() {
    _best_ranks=$1
    shift
    BEST_SAMPLES_PER_S=""
    BEST_GRAD_REDUCTION_MS=""
    BEST_CONTROL_REDUCTION_MS=""
    RUNS_SAMPLES_PER_S=""
    _best_run=0
    while [ "$_best_run" -lt "$REPEAT" ]; do
        _best_run=$((_best_run + 1))
        if [ "$_best_ranks" = 1 ]; then
            _best_output=$(timeout 600 "$FTRAIN" "$@" 2>&1)
        else
            _best_output=$(timeout 600 mpirun -n "$_best_ranks" "$FTRAIN" "$@" 2>&1)
        fi
        _best_sps=$(timing_samples_per_s "$_best_output")
        if [ -z "$_best_sps" ]; then
            show_tail 5 "$_best_output"
            continue
        fi
        RUNS_SAMPLES_PER_S="$RUNS_SAMPLES_PER_S $_best_sps"
        if [ "$(maxof "$BEST_SAMPLES_PER_S" "$_best_sps")" = "$_best_sps" ]; then
            BEST_SAMPLES_PER_S=$_best_sps
            BEST_GRAD_REDUCTION_MS=$(timing_grad_reduction_ms "$_best_output")
            BEST_CONTROL_REDUCTION_MS=$(timing_control_reduction_ms "$_best_output")
        fi
    done
}

# have_torch: PYTHON can import torch and numpy; else TORCH_WHY says why.
have_torch() {
    TORCH_WHY=""
    [ -x "$PYTHON_BIN" ] || { TORCH_WHY="$PYTHON_BIN not found (apt-get install python3-torch)"; return 1; }
    "$PYTHON_BIN" -c 'import torch, numpy' 2>/dev/null ||
        { TORCH_WHY="$PYTHON_BIN cannot import torch and numpy (apt-get install python3-torch, or set PYTHON)"; return 1; }
    return 0
}

# save_once ROOT RANKS [ENV...]: one save on RANKS ranks into a fresh ROOT
# (after a sync, so that no earlier run's dirty pages are flushed inside
# this one); prints its MB/s, or nothing on failure; ckpt_bench's output is
# kept in ROOT.out.
save_once() {
    _save_root=$1
    _save_ranks=$2
    shift 2
    rm -rf "$_save_root"
    sync
    if [ "$_save_ranks" = 1 ]; then
        _save_output=$(env "$@" "$CKPT_BENCH" save "$_save_root" "$CKPT_MB" 2>&1)
    else
        _save_output=$(env "$@" timeout 600 mpirun -n "$_save_ranks" "$CKPT_BENCH" save "$_save_root" "$CKPT_MB" 2>&1)
    fi
    printf '%s\n' "$_save_output" >"$_save_root.out"
    _save_mbps=$(field mb_per_s "$_save_output")
    [ -n "$_save_mbps" ] || show_tail 3 "$_save_output" >&2
    echo "$_save_mbps"
}

# dd_once FLAGS: one dd of the state's size with FLAGS, after a sync; MB/s.
dd_once() {
    rm -f "$SCRATCH/dd.bin"
    sync
    _dd_output=$(LC_ALL=C dd if=/dev/zero of="$SCRATCH/dd.bin" bs=4M count="$((CKPT_MB / 4))" "$@" 2>&1)
    rm -f "$SCRATCH/dd.bin"
    # "N bytes (...) copied, T s, X MB/s": MB/s from bytes and seconds.
    printf '%s\n' "$_dd_output" | awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "copied,") { printf "%.1f\n", $1 / $(i + 1) / 1e6; exit } }'
}

# torch_once: one torch.save + fsync and torch.load (torch_ckpt.py); updates
# the best and the per-round lists (TORCH_*); TORCH_CKPT_WHY on failure.
torch_once() {
    rm -f "$SCRATCH/state.pt"
    sync
    _torch_output=$(timeout 900 "$PYTHON_BIN" "$SCRIPT_DIR/torch_ckpt.py" "$SCRATCH/raw.bin" "$SCRATCH/state.pt" 1 2>&1)
    rm -f "$SCRATCH/state.pt"
    _torch_save=$(field save_mb_per_s "$_torch_output")
    if [ -z "$_torch_save" ] || [ "$(field verified "$_torch_output")" != yes ]; then
        TORCH_CKPT_WHY="torch_ckpt.py failed: $(printf '%s\n' "$_torch_output" | tail -1)"
        return
    fi
    _torch_load=$(field load_mb_per_s "$_torch_output")
    _torch_load_into=$(field into_mb_per_s "$_torch_output")
    TORCH_SAVE_RUNS="$TORCH_SAVE_RUNS $_torch_save"
    TORCH_LOAD_RUNS="$TORCH_LOAD_RUNS $_torch_load"
    TORCH_LOAD_INTO_RUNS="$TORCH_LOAD_INTO_RUNS $_torch_load_into"
    TORCH_SAVE_MBPS=$(maxof "$TORCH_SAVE_MBPS" "$_torch_save")
    TORCH_LOAD_MBPS=$(maxof "$TORCH_LOAD_MBPS" "$_torch_load")
    TORCH_LOAD_INTO_MBPS=$(maxof "$TORCH_LOAD_INTO_MBPS" "$_torch_load_into")
}

# disk_use SAVE_MBPS STORED_BYTES: stored bytes per second over dd
# oflag=direct's rate (1.00: the disk is the limit), or "n/a".
disk_use() {
    awk -v s="${1:-}" -v st="${2:-}" -v r="${RAW_BYTES:-}" -v d="${dd_direct_mbps:-}" \
        'BEGIN { if (s == "" || st == "" || r + 0 == 0 || d + 0 == 0) print "n/a"; else printf "%.2f\n", s * st / r / d }'
}

# ---- set-up ------------------------------------------------------------------

check_settings() {
    case $CKPT_MB in
        '' | *[!0-9]*) echo "bench: BENCH_CKPT_MB must be a whole number of MiB, got '$CKPT_MB'" >&2; exit 2 ;;
    esac
    [ "$CKPT_MB" -ge 4 ] || { echo "bench: BENCH_CKPT_MB must be at least 4" >&2; exit 2; }
    case $PAIR_ROUNDS in
        '' | *[!0-9]*) echo "bench: BENCH_PAIRS must be a whole number, got '$PAIR_ROUNDS'" >&2; exit 2 ;;
    esac
    case $HANG_ROUNDS in
        '' | *[!0-9]* | 0) echo "bench: BENCH_HANG_ROUNDS must be a whole number of at least 1, got '$HANG_ROUNDS'" >&2; exit 2 ;;
    esac
    case $RELAUNCH_ROUNDS in
        '' | *[!0-9]* | 0) echo "bench: BENCH_RELAUNCH_ROUNDS must be a whole number of at least 1, got '$RELAUNCH_ROUNDS'" >&2; exit 2 ;;
    esac
    for program in "$FTRAIN" "$CKPT_BENCH"; do
        [ -x "$program" ] || { echo "bench: $program not built (make all $program)" >&2; exit 1; }
    done
}

cleanup() {
    [ -n "$BACKGROUND_PID" ] && kill -9 "$BACKGROUND_PID" 2>/dev/null
    [ -n "$RELAUNCH_JOB" ] && SLURM_CONF=$LAB/etc/slurm.conf scancel "$RELAUNCH_JOB" 2>/dev/null
    [ "$RELAUNCH_LAB_STARTED" = 1 ] && "$SCRIPT_DIR/../tests/slurm/lab/lab-down.sh" >/dev/null 2>&1
    rm -rf "$SCRATCH"
}

make_scratch() {
    mkdir -p "$BUILD"
    SCRATCH=${BENCH_DIR:-}
    if [ -z "$SCRATCH" ]; then
        SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/ftrain-bench.XXXXXX") || exit 1
    else
        mkdir -p "$SCRATCH" || exit 1
    fi
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

print_header() {
    echo "ftrain benchmarks - $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "machine: $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)),"\
"$(awk '/^MemTotal/ { printf " %.1f GiB memory", $2 / 1048576 }' /proc/meminfo),"\
" scratch $SCRATCH on $(df -PT "$SCRATCH" | awk 'NR == 2 { print $2 " (" $1 ")" }')"
    echo "load: $(uptime | sed 's/.*load average: /load average /') (other processes share this machine)"
    echo "ftrain: $("$FTRAIN" --version 2>&1 | head -1)"
    if have_torch; then
        echo "torch: $("$PYTHON_BIN" -c 'import torch; print(torch.__version__, "threads", torch.get_num_threads())' 2>&1)"
    else
        echo "torch: peer unavailable: $TORCH_WHY"
    fi
    if command -v zstd >/dev/null 2>&1; then
        echo "zstd: $(zstd --version 2>&1 | head -1)"
    else
        echo "zstd: peer unavailable: zstd not installed"
    fi
    echo "mpi: $(mpirun --version 2>&1 | head -1); mpi_yield_when_idle=$OMPI_MCA_mpi_yield_when_idle"
    echo "each figure is the best of $REPEAT run(s) (BENCH_REPEAT) unless it says otherwise"
}

# ---- 1. training throughput -----------------------------------------------------

# keep NAME VALUE: append VALUE ("42000", or "passive:42000") to runs_NAME
# and keep the largest number in best_NAME.
keep() {
    eval "_keep_best=\${best_$1:-}"
    eval "runs_$1=\"\${runs_$1:-} $2\""
    eval "best_$1=$(maxof "$_keep_best" "${2#*:}")"
}

# training_round THREADS: ftrain (1 rank), the GEMM-only bound and PyTorch,
# each once at THREADS threads; keeps their samples/s and ftrain's fraction
# of the bound in this round (keep: frac_THREADS).  PyTorch at 2
# threads runs with OMP_WAIT_POLICY unset and =passive: on a machine where
# other processes take CPU time, OpenMP threads that spin while they wait
# lose their core and the default can be ten times slower.  One thread has
# no one to wait for, so it runs once.
training_round() {
    _round_threads=$1
    _round_output=$(timeout 600 "$FTRAIN" --threads "$_round_threads" --steps "$TRAIN_STEPS" --log-every 100000 2>&1)
    _round_ftrain=$(timing_samples_per_s "$_round_output")
    if [ -n "$_round_ftrain" ]; then keep "ftrain_$_round_threads" "$_round_ftrain"; else show_tail 5 "$_round_output"; fi
    # One run of as many steps as ftrain's, right after it: both sides are
    # sampled alike, and the pair sees the same load.
    if [ -x "$GEMM_BOUND" ]; then
        _round_output=$("$GEMM_BOUND" --threads "$_round_threads" --steps "$TRAIN_STEPS" --repeat 1 2>&1)
        _round_sps=$(field gemm_bound: "$_round_output")
        if [ -n "$_round_sps" ]; then keep "bound_$_round_threads" "$_round_sps"; else show_tail 3 "$_round_output"; fi
        [ -n "$_round_sps" ] && [ -n "$_round_ftrain" ] && keep "frac_$_round_threads" "$(ratio "$_round_ftrain" "$_round_sps")"
    fi
    if [ "$torch_usable" = 1 ]; then
        _round_policies=default
        [ "$_round_threads" = 1 ] || _round_policies="default passive"
        for _round_policy in $_round_policies; do
            if [ "$_round_policy" = passive ]; then
                _round_output=$(OMP_WAIT_POLICY=passive timeout 900 "$PYTHON_BIN" "$SCRIPT_DIR/torch_mlp.py" --steps "$TRAIN_STEPS" --threads "$_round_threads" 2>&1)
            else
                _round_output=$(timeout 900 "$PYTHON_BIN" "$SCRIPT_DIR/torch_mlp.py" --steps "$TRAIN_STEPS" --threads "$_round_threads" 2>&1)
            fi
            _round_sps=$(field torch_mlp: "$_round_output")
            if [ -z "$_round_sps" ]; then
                echo "  peer unavailable: torch_mlp.py failed: $(printf '%s\n' "$_round_output" | tail -1)"
                torch_usable=0
                break
            fi
            keep "torch_$_round_threads" "$_round_policy:$_round_sps"
        done
    fi
}

# best_threads NAME: "S T" for the best samples/s S of NAME over 1 and 2
# threads and the thread count T that gave it ("" when neither ran).
best_threads() {
    eval "_bt_1=\${best_${1}_1:-} _bt_2=\${best_${1}_2:-}"
    if [ -z "$_bt_1$_bt_2" ]; then echo ""; elif [ "$(maxof "$_bt_1" "$_bt_2")" = "$_bt_1" ]; then echo "$_bt_1 1"; else echo "$_bt_2 2"; fi
}

# The 1-rank figures: ftrain and PyTorch at 1 and at 2 threads, in turn, so
# that all four see the same background load; each side's best thread count
# is what a user would get, so best against best is the comparison.
section_1_one_rank() {
    for _s1_name in ftrain_1 ftrain_2 torch_1 torch_2 bound_1 bound_2 frac_1 frac_2; do
        eval "best_$_s1_name='' runs_$_s1_name=''"
    done
    torch_usable=0
    if have_torch; then torch_usable=1; else echo "  peer unavailable: $TORCH_WHY"; fi
    [ -x "$GEMM_BOUND" ] || fail "$GEMM_BOUND not built (make $GEMM_BOUND): no GEMM-only bound"
    echo "  load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    _s1_round=0
    while [ "$_s1_round" -lt "$REPEAT" ]; do
        _s1_round=$((_s1_round + 1))
        training_round 1
        training_round 2
    done
    echo "  load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    for _s1_threads in 1 2; do
        eval "echo \"  ftrain 1 rank x $_s1_threads thread(s) runs:\$runs_ftrain_$_s1_threads samples/s\""
        [ -n "$runs_torch_1$runs_torch_2" ] && eval "echo \"  torch 1 process x $_s1_threads thread(s) runs:\$runs_torch_$_s1_threads samples/s\""
        [ -x "$GEMM_BOUND" ] && eval "echo \"  gemm_bound $_s1_threads thread(s) runs:\$runs_bound_$_s1_threads samples/s; ftrain's fraction per round:\$runs_frac_$_s1_threads\""
    done
    [ -n "$best_ftrain_1" ] || fail "ftrain 1 rank x 1 thread gave no timing line"
    [ -n "$best_ftrain_2" ] || fail "ftrain 1 rank x 2 threads gave no timing line"
    [ -n "$runs_torch_2" ] && echo "    (torch at 2 threads: OMP_WAIT_POLICY unset and =passive, the best is used)"
    echo
    row "" "ftrain" "PyTorch" "ratio"
    row "samples/s, 1 rank x 1 thread" "${best_ftrain_1:-failed}" "${best_torch_1:-n/a}" "$(ratio "$best_ftrain_1" "$best_torch_1")"
    row "samples/s, 1 rank x 2 threads" "${best_ftrain_2:-failed}" "${best_torch_2:-n/a}" "$(ratio "$best_ftrain_2" "$best_torch_2")"
    _s1_f=$(best_threads ftrain) _s1_t=$(best_threads torch)
    ftrain_best_sps=${_s1_f% *} torch_best_sps=${_s1_t% *}
    row "samples/s, each at its best thread count" "${ftrain_best_sps:-failed}${_s1_f:+ (${_s1_f#* }t)}" "${torch_best_sps:-n/a}${_s1_t:+ (${_s1_t#* }t)}" "$(ratio "$ftrain_best_sps" "$torch_best_sps")"
    echo "  target: ftrain >= 1.50x PyTorch, best against best -> $(verdict "$(ratio "$ftrain_best_sps" "$torch_best_sps")" 1.5)"
    echo
    echo "  the GEMM-only bound (gemm_bound: the step's sgemm calls alone, same shapes and threads):"
    row "" "ftrain" "bound" "fraction"
    row "samples/s, 1 rank x 1 thread, best vs best" "${best_ftrain_1:-failed}" "${best_bound_1:-n/a}" "$(ratio "$best_ftrain_1" "$best_bound_1")"
    row "samples/s, 1 rank x 2 threads, best vs best" "${best_ftrain_2:-failed}" "${best_bound_2:-n/a}" "$(ratio "$best_ftrain_2" "$best_bound_2")"
    # shellcheck disable=SC2086 # the lists split into their numbers
    row "fraction, median of the rounds, 1 / 2 threads" "" "" "$(median $runs_frac_1) / $(median $runs_frac_2)"
    echo "  target: ftrain >= 0.80 of the bound at 1 thread, best vs best -> $(verdict "$(ratio "$best_ftrain_1" "$best_bound_1")" 0.8)"
}

section_1_training() {
    heading "1. training throughput (trainer core): MLP 784-256-128-10 ReLU, Adam lr 1e-3, batch 128, Fashion-MNIST, $TRAIN_STEPS steps"
    echo "  samples/s over the training loop only (no data loading, no final evaluation; ftrain's first step"
    echo "  and PyTorch's 3 warm-up steps untimed)"
    section_1_one_rank
    ftrain_1x2_sps=$best_ftrain_2

    ftrain_best 2 --threads 1 --steps "$TRAIN_STEPS" --log-every 100000
    fast_2x1_sps=$BEST_SAMPLES_PER_S
    fast_grad_reduction_ms=$BEST_GRAD_REDUCTION_MS
    fast_control_reduction_ms=$BEST_CONTROL_REDUCTION_MS
    [ -n "$fast_2x1_sps" ] || fail "ftrain 2 ranks x 1 thread gave no timing line"
    echo
    row "samples/s, 2 ranks x 1 thread (fast)" "${fast_2x1_sps:-failed}" "" "$(ratio "$fast_2x1_sps" "$ftrain_1x2_sps") of 1x2"
    ftrain_best 2 --threads 1 --steps "$TRAIN_STEPS" --log-every 100000 --deterministic
    deterministic_2x1_sps=$BEST_SAMPLES_PER_S
    deterministic_grad_reduction_ms=$BEST_GRAD_REDUCTION_MS
    deterministic_control_reduction_ms=$BEST_CONTROL_REDUCTION_MS
    [ -n "$deterministic_2x1_sps" ] || fail "ftrain 2 ranks --deterministic gave no timing line"
    row "samples/s, 2 ranks x 1 thread (--deterministic)" "${deterministic_2x1_sps:-failed}" "" "$(ratio "$deterministic_2x1_sps" "$fast_2x1_sps") of fast"
    echo
    echo "  per-step reduction cost at 2 ranks (ms/step, from the fastest run of each mode):"
    row "gradient reduction, fast (f32 allreduce)" "${fast_grad_reduction_ms:-n/a}" "" ""
    row "gradient reduction, --deterministic (i64)" "${deterministic_grad_reduction_ms:-n/a}" "" "$(ratio "$deterministic_grad_reduction_ms" "$fast_grad_reduction_ms") of fast"
    row "stop/control reduction (6 doubles, MAX), fast" "${fast_control_reduction_ms:-n/a}" "" ""
    row "stop/control reduction, --deterministic" "${deterministic_control_reduction_ms:-n/a}" "" ""
    echo "  (the reduction times include waiting for the slower rank)"
}

# ---- 2-5. checkpoints ------------------------------------------------------------

# check_checkpoint_space: sets CKPT_SPACE_OK to 0, saying so, when the
# scratch disk has too little room for sections 2-5 (some of which are
# wanted).
check_checkpoint_space() {
    need_mb=$((CKPT_MB * 7 + 256))
    scratch_free_mb=$(df -Pm "$SCRATCH" | awk 'NR == 2 { print $4 }')
    CKPT_SPACE_OK=1
    if want 2 || want 3 || want 4 || want 5; then
        if [ "${scratch_free_mb:-0}" -lt "$need_mb" ]; then
            heading "2-5. checkpoints"
            echo "  skipped: $scratch_free_mb MiB free under $SCRATCH, these sections need about $need_mb MiB (lower BENCH_CKPT_MB)"
            CKPT_SPACE_OK=0
        fi
    fi
}

# make_raw_state: the raw state for zstd (section 4) and PyTorch (section
# 5), made first so that torch.save can run inside section 2's rounds,
# beside ftrain's saves; sets TORCH_IN_ROUNDS.
make_raw_state() {
    if [ "$CKPT_SPACE_OK" = 1 ] && (want 4 || want 5); then
        raw_output=$("$CKPT_BENCH" raw "$SCRATCH/raw.bin" "$CKPT_MB" 2>&1) || { fail "ckpt_bench raw: $raw_output"; }
    fi
    TORCH_IN_ROUNDS=0
    if [ "$CKPT_SPACE_OK" = 1 ] && want 5 && [ -f "$SCRATCH/raw.bin" ] && have_torch; then
        TORCH_IN_ROUNDS=1
    fi
}

section_2_checkpoint_save() {
    heading "2. checkpoint save (ckpt): ${CKPT_MB} MiB of float32 state, default options, until committed and fsync'd"
    echo "  state: 3 groups (parameters, Adam m, Adam v) x 4 [rows, 4096] matrices + 4 [4096] biases;"
    echo "  approximately Gaussian floats (sum of 4 uniforms): sigma 0.02 weights, 1e-4 moments, v = square"
    echo "  filesystem: $(df -PT "$SCRATCH" | awk 'NR == 2 { print $2 }'), $scratch_free_mb MiB free before the run"
    echo "  $REPEAT rounds; each round runs every configuration once, in turn, so that all of them"
    echo "  see the same disk; a sync precedes each timed run; the best run of each is compared;"
    echo "  dd conv=fdatasync, 1 rank and 2 ranks run back to back in $PAIR_ROUNDS rounds in all (BENCH_PAIRS);"
    echo "  the targets are judged by the median of the paired per-round ratios"
    # The best of each configuration, and each one's runs (MB/s).
    dd_fdatasync_mbps="" dd_direct_mbps="" save_level0_mbps="" save_buffered_mbps=""
    SAVE_1RANK_MBPS="" SAVE_2RANKS_MBPS="" STORED_BYTES_1RANK="" STORED_BYTES_2RANKS=""
    runs_dd_fdatasync="" runs_dd_direct="" runs_1rank="" runs_2ranks="" runs_level0="" runs_buffered=""
    # The paired per-round ratios: 1 rank / dd conv=fdatasync, 2 ranks / 1 rank.
    ratios_1rank_over_dd="" ratios_2ranks_over_1rank=""
    round=0
    while [ "$round" -lt "$REPEAT" ]; do
        round=$((round + 1))
        dd_mbps=$(dd_once conv=fdatasync)
        dd_direct_round_mbps=$(dd_once oflag=direct conv=fdatasync)
        save_1rank=$(save_once "$SCRATCH/c1" 1)
        save_2ranks=$(save_once "$SCRATCH/c2" 2)
        save_level0=$(save_once "$SCRATCH/c0" 1 BENCH_CKPT_LEVEL=0)
        save_buffered=$(save_once "$SCRATCH/cb" 1 BENCH_CKPT_DIRECT=0)
        [ "$TORCH_IN_ROUNDS" = 1 ] && torch_once
        runs_dd_fdatasync="$runs_dd_fdatasync ${dd_mbps:-failed}"
        runs_dd_direct="$runs_dd_direct ${dd_direct_round_mbps:-failed}"
        runs_1rank="$runs_1rank ${save_1rank:-failed}"
        runs_2ranks="$runs_2ranks ${save_2ranks:-failed}"
        runs_level0="$runs_level0 ${save_level0:-failed}"
        runs_buffered="$runs_buffered ${save_buffered:-failed}"
        ratios_1rank_over_dd="$ratios_1rank_over_dd $(ratio "$save_1rank" "$dd_mbps")"
        ratios_2ranks_over_1rank="$ratios_2ranks_over_1rank $(ratio "$save_2ranks" "$save_1rank")"
        dd_fdatasync_mbps=$(maxof "$dd_fdatasync_mbps" "$dd_mbps")
        dd_direct_mbps=$(maxof "$dd_direct_mbps" "$dd_direct_round_mbps")
        SAVE_1RANK_MBPS=$(maxof "$SAVE_1RANK_MBPS" "$save_1rank")
        SAVE_2RANKS_MBPS=$(maxof "$SAVE_2RANKS_MBPS" "$save_2ranks")
        save_level0_mbps=$(maxof "$save_level0_mbps" "$save_level0")
        save_buffered_mbps=$(maxof "$save_buffered_mbps" "$save_buffered")
    done
    # More pairs for both verdicts: the disk's run-to-run noise is larger
    # than the differences, so one pair decides nothing.  Each extra round
    # runs dd conv=fdatasync, 1 rank, 2 ranks and a second 1-rank save back
    # to back; the order reverses every other round, so that a drifting disk
    # favours none.  The second 1-rank save against the first (an A/A pair,
    # the same configuration twice, as adjacent as 2 ranks and 1 rank are)
    # measures what the disk's noise alone does to a ratio.
    more_runs_1rank="" more_runs_2ranks="" more_runs_dd="" more_runs_1rank_again="" ratios_aa=""
    while [ "$round" -lt "$PAIR_ROUNDS" ]; do
        round=$((round + 1))
        if [ $((round % 2)) = 1 ]; then
            save_2ranks=$(save_once "$SCRATCH/c2" 2)
            save_1rank=$(save_once "$SCRATCH/c1" 1)
            save_1rank_again=$(save_once "$SCRATCH/c1b" 1)
            dd_mbps=$(dd_once conv=fdatasync)
        else
            dd_mbps=$(dd_once conv=fdatasync)
            save_1rank_again=$(save_once "$SCRATCH/c1b" 1)
            save_1rank=$(save_once "$SCRATCH/c1" 1)
            save_2ranks=$(save_once "$SCRATCH/c2" 2)
        fi
        more_runs_1rank="$more_runs_1rank ${save_1rank:-failed}"
        more_runs_2ranks="$more_runs_2ranks ${save_2ranks:-failed}"
        more_runs_dd="$more_runs_dd ${dd_mbps:-failed}"
        more_runs_1rank_again="$more_runs_1rank_again ${save_1rank_again:-failed}"
        ratios_aa="$ratios_aa $(ratio "$save_1rank_again" "$save_1rank")"
        ratios_2ranks_over_1rank="$ratios_2ranks_over_1rank $(ratio "$save_2ranks" "$save_1rank")"
        ratios_1rank_over_dd="$ratios_1rank_over_dd $(ratio "$save_1rank" "$dd_mbps")"
        dd_fdatasync_mbps=$(maxof "$dd_fdatasync_mbps" "$dd_mbps")
        SAVE_1RANK_MBPS=$(maxof "$SAVE_1RANK_MBPS" "$save_1rank")
        SAVE_2RANKS_MBPS=$(maxof "$SAVE_2RANKS_MBPS" "$save_2ranks")
    done
    RAW_BYTES=$(field raw_bytes "$(cat "$SCRATCH/c1.out")")
    STORED_BYTES_1RANK=$(field stored_bytes "$(cat "$SCRATCH/c1.out")")
    STORED_BYTES_2RANKS=$(field stored_bytes "$(cat "$SCRATCH/c2.out")")
    rm -rf "$SCRATCH/c0" "$SCRATCH/cb" "$SCRATCH/c1b"
    echo "  runs, MB/s:"
    echo "    dd if=/dev/zero bs=4M conv=fdatasync (page cache, then flush):$runs_dd_fdatasync"
    echo "    dd if=/dev/zero bs=4M oflag=direct conv=fdatasync:           $runs_dd_direct"
    echo "    ckpt 1 rank (default: level 1, O_DIRECT):                    $runs_1rank"
    echo "    ckpt 2 ranks:                                                $runs_2ranks"
    echo "    ckpt 1 rank, level 0 (stored frames, no zstd):               $runs_level0"
    echo "    ckpt 1 rank, buffered (--ckpt-buffered: page cache, then fsync):$runs_buffered"
    [ -n "$TORCH_SAVE_RUNS" ] && echo "    torch.save + fsync (section 5's peer):                       $TORCH_SAVE_RUNS"
    [ -n "$more_runs_dd" ] && echo "    more rounds, dd conv=fdatasync:                              $more_runs_dd"
    [ -n "$more_runs_1rank" ] && echo "    more rounds, ckpt 1 rank:                                    $more_runs_1rank"
    [ -n "$more_runs_2ranks" ] && echo "    more rounds, ckpt 2 ranks:                                   $more_runs_2ranks"
    [ -n "$more_runs_1rank_again" ] && echo "    more rounds, ckpt 1 rank again (A/A):                        $more_runs_1rank_again"
    echo "    ckpt 1 rank / dd conv=fdatasync, per round:                  $ratios_1rank_over_dd"
    echo "    ckpt 2 ranks / 1 rank, per pair:                             $ratios_2ranks_over_1rank"
    [ -n "$ratios_aa" ] && echo "    ckpt 1 rank again / 1 rank (A/A), per pair:                  $ratios_aa"
    # The median of the paired per-round ratios: each pair ran back to back
    # on the same disk, so it is not swayed by one lucky round as a
    # best-against-best comparison is.
    # shellcheck disable=SC2086
    median_2ranks_over_1rank=$(median $ratios_2ranks_over_1rank)
    # shellcheck disable=SC2086
    median_1rank_over_dd=$(median $ratios_1rank_over_dd)
    # The disk's noise on a paired ratio: the median of |1 - r| over the
    # A/A pairs.  "Not slower" then means: the median 2-rank/1-rank ratio
    # is no further below 1 than two runs of one configuration typically
    # are from each other.
    # shellcheck disable=SC2086
    aa_deviations=$(printf '%s\n' $ratios_aa | grep -E '^[0-9.]+$' | awk '{ d = $1 - 1; if (d < 0) d = -d; print d }')
    # shellcheck disable=SC2086
    aa_noise=$(median $aa_deviations)
    # How the pairs went: how many, in how many 2 ranks were slower, the range.
    # shellcheck disable=SC2086
    pairs_summary=$(printf '%s\n' $ratios_2ranks_over_1rank | grep -v 'n/a' | sort -n | awk '{ v[NR] = $1; if ($1 + 0 < 1) k++ } END { if (NR) printf "%d pairs, 2 ranks slower in %d, ratios %.2f..%.2f\n", NR, k, v[1], v[NR] }')
    [ -n "$SAVE_1RANK_MBPS" ] || fail "ckpt_bench save on 1 rank"
    [ -n "$SAVE_2RANKS_MBPS" ] || fail "ckpt_bench save on 2 ranks"
    [ -n "$save_level0_mbps" ] || fail "ckpt_bench save level 0 on 1 rank"
    [ -n "$save_buffered_mbps" ] || fail "ckpt_bench save buffered on 1 rank"
    [ -n "$dd_fdatasync_mbps" ] || echo "  peer unavailable: dd failed"
    echo
    row "" "ckpt_save" "dd" "ratio"
    row "MB/s (raw state), 1 rank" "${SAVE_1RANK_MBPS:-failed}" "${dd_fdatasync_mbps:-n/a}" "$(ratio "$SAVE_1RANK_MBPS" "$dd_fdatasync_mbps")"
    row "MB/s (raw state), 2 ranks" "${SAVE_2RANKS_MBPS:-failed}" "${dd_fdatasync_mbps:-n/a}" "$(ratio "$SAVE_2RANKS_MBPS" "$dd_fdatasync_mbps")"
    row "MB/s, 1 rank, level 0 (stored)" "${save_level0_mbps:-failed}" "${dd_fdatasync_mbps:-n/a}" "$(ratio "$save_level0_mbps" "$dd_fdatasync_mbps")"
    row "MB/s, 1 rank, buffered" "${save_buffered_mbps:-failed}" "${dd_fdatasync_mbps:-n/a}" "$(ratio "$save_buffered_mbps" "$dd_fdatasync_mbps")"
    row "MB/s, 1 rank, vs dd oflag=direct" "${SAVE_1RANK_MBPS:-failed}" "${dd_direct_mbps:-n/a}" "$(ratio "$SAVE_1RANK_MBPS" "$dd_direct_mbps")"
    # 1 rank against dd: judged, like 2 ranks against 1, by the median of
    # the back-to-back pairs (one lucky dd or save does not decide); the
    # best-against-best ratio is printed beside it.
    # shellcheck disable=SC2086
    n_ratios_1rank_over_dd=$(printf '%s\n' $ratios_1rank_over_dd | grep -cE '^[0-9.]+$')
    echo "  target: 1 rank >= 0.85 of dd conv=fdatasync (median of $n_ratios_1rank_over_dd paired ratios ${median_1rank_over_dd:-n/a};" \
        "best against best $(ratio "$SAVE_1RANK_MBPS" "$dd_fdatasync_mbps")) -> $(verdict "$median_1rank_over_dd" 0.85);" \
        "2 ranks not slower than 1 (median of the paired ratios ${median_2ranks_over_1rank:-n/a}; ${pairs_summary:-no pairs})" \
        "-> strictly (median >= 1.00): $(verdict "$median_2ranks_over_1rank" 1);" \
        "within the disk's noise (median >= 1 - ${aa_noise:-n/a}, the median |1 - r| of the A/A pairs): $(verdict_within_noise "$median_2ranks_over_1rank" "$aa_noise")"
    # How close each save came to the device: stored bytes per second over
    # dd oflag=direct's rate (1.00 = the disk is the limit).
    echo "  stored bytes/s over dd oflag=direct's rate (1.00: the disk is the limit):" \
        "1 rank $(disk_use "$SAVE_1RANK_MBPS" "$STORED_BYTES_1RANK"), 2 ranks $(disk_use "$SAVE_2RANKS_MBPS" "$STORED_BYTES_2RANKS")"
    echo "  (MB = 10^6 bytes of raw state; the checkpoint writes fewer bytes than that: it is compressed)"
    echo "  level 0 keeps checksums and the seek table but skips zstd: for storage faster than the cores"
}

section_3_load_reshard() {
    heading "3. load and reshard N -> M: M readers each read their 1/M byte range (ckpt_read_range), page cache warm"
    row "saved by N -> read by M" "MB/s" "seconds" "checked"
    for saved_read in "1 1" "1 2" "2 1" "2 2" "2 3"; do
        # shellcheck disable=SC2086
        set -- $saved_read
        saved_by=$1 read_by=$2
        # Saves bypass the page cache (O_DIRECT): read the files once, untimed,
        # so that this measures decoding, as torch.load's figure does.
        cat "$SCRATCH/c$saved_by"/step-00000001/* >/dev/null 2>&1
        best_mbps=""
        best_seconds=""
        checked=""
        run=0
        while [ "$run" -lt "$REPEAT" ]; do
            run=$((run + 1))
            if [ "$read_by" = 1 ]; then
                output=$("$CKPT_BENCH" load "$SCRATCH/c$saved_by/step-00000001" 2>&1)
            else
                output=$(timeout 600 mpirun -n "$read_by" "$CKPT_BENCH" load "$SCRATCH/c$saved_by/step-00000001" 2>&1)
            fi
            load_mbps=$(field mb_per_s "$output")
            [ -n "$load_mbps" ] || { show_tail 3 "$output"; continue; }
            checked=$(field verified "$output")
            if [ "$(maxof "$best_mbps" "$load_mbps")" = "$load_mbps" ]; then
                best_mbps=$load_mbps
                best_seconds=$(field seconds "$output")
            fi
        done
        [ -n "$best_mbps" ] || fail "ckpt_bench load $saved_by -> $read_by"
        [ "$checked" = yes ] || [ -z "$best_mbps" ] || fail "ckpt_bench load $saved_by -> $read_by: bytes differ from the saved state"
        row "$saved_by -> $read_by" "${best_mbps:-failed}" "${best_seconds:-}" "${checked:-}"
        [ "$saved_by $read_by" = "1 1" ] && LOAD_1TO1_MBPS=$best_mbps
    done
    echo "  (seconds: from a barrier to every reader holding its range, ckpt_open included;"
    echo "   checked: each reader compared its bytes with the generator afterwards, untimed)"
    # A resume reads into tensors that exist: the same 1 -> 1 load into
    # memory allocated and touched before the timer.
    cat "$SCRATCH/c1"/step-00000001/* >/dev/null 2>&1
    LOAD_INTO_MBPS=""
    load_into_runs=""
    run=0
    while [ "$run" -lt "$REPEAT" ]; do
        run=$((run + 1))
        output=$(BENCH_LOAD_INTO=existing "$CKPT_BENCH" load "$SCRATCH/c1/step-00000001" 2>&1)
        load_mbps=$(field mb_per_s "$output")
        [ -n "$load_mbps" ] && [ "$(field verified "$output")" = yes ] || {
            show_tail 3 "$output"
            continue
        }
        load_into_runs="$load_into_runs $load_mbps"
        LOAD_INTO_MBPS=$(maxof "$LOAD_INTO_MBPS" "$load_mbps")
    done
    [ -n "$LOAD_INTO_MBPS" ] || fail "ckpt_bench load 1 -> 1 into existing memory"
    row "1 -> 1, into existing memory (a resume)" "${LOAD_INTO_MBPS:-failed}" "" ""
    echo "   (runs:$load_into_runs MB/s; the destination was allocated and touched before the timer,"
    echo "   as a resume reads into the model's and optimizer's tensors)"
}

section_4_compression() {
    heading "4. compression ratio (raw bytes / stored bytes) of the same state"
    zstd_ratio=""
    if command -v zstd >/dev/null 2>&1 && [ -f "$SCRATCH/raw.bin" ]; then
        zstd_start=$(now)
        zstd_bytes=$(zstd -1 -q -c "$SCRATCH/raw.bin" | wc -c)
        zstd_seconds=$(elapsed "$zstd_start" "$(now)")
        zstd_ratio=$(ratio "$RAW_BYTES" "$zstd_bytes")
        echo "  zstd -1 -c (one thread) of the raw bytes: $zstd_bytes bytes in $zstd_seconds s"
    else
        echo "  peer unavailable: zstd not installed or no raw file"
    fi
    # The compressor's own ratio: a save with adapt off (every frame
    # compressed); the default saves store frames while the disk is faster
    # than the encoders, so their size depends on the disk of the moment.
    save_once "$SCRATCH/cz" 1 BENCH_CKPT_ADAPT=0 >/dev/null
    stored_bytes_no_adapt=$(field stored_bytes "$(cat "$SCRATCH/cz.out" 2>/dev/null)")
    rm -rf "$SCRATCH/cz"
    [ -n "$stored_bytes_no_adapt" ] || fail "ckpt_bench save with BENCH_CKPT_ADAPT=0"
    echo "  ftrain checkpoint, every frame compressed (adapt off): ${stored_bytes_no_adapt:-failed} bytes in shard files"
    [ -n "$STORED_BYTES_1RANK" ] && echo "  (the default, adaptive saves of section 2 wrote $STORED_BYTES_1RANK bytes (1 rank) and ${STORED_BYTES_2RANKS:-n/a} (2 ranks))"
    row "" "ckpt" "zstd -1" "ratio"
    row "raw / stored" "$(ratio "$RAW_BYTES" "$stored_bytes_no_adapt")" "${zstd_ratio:-n/a}" "$(ratio "$(ratio "$RAW_BYTES" "$stored_bytes_no_adapt")" "$zstd_ratio")"
    echo "  (ckpt: zstd level 1 after a 4-byte shuffle, 4 MiB frames; float mantissas are"
    echo "   random, so only sign/exponent bytes compress)"
}

section_5_torch_checkpoint() {
    heading "5. the same tensors through torch.save / torch.load (file + directory fsync'd; load from page cache)"
    if [ "$TORCH_IN_ROUNDS" != 1 ]; then
        echo "  peer unavailable: ${TORCH_WHY:-no raw file}"
    elif [ -z "$TORCH_SAVE_MBPS" ]; then
        echo "  peer unavailable: $TORCH_CKPT_WHY"
    else
        echo "  torch_ckpt.py ran once in each round of section 2, after ftrain's saves, on the same disk"
        echo "  torch runs, MB/s: save$TORCH_SAVE_RUNS; load$TORCH_LOAD_RUNS; load into existing tensors$TORCH_LOAD_INTO_RUNS (values equal: yes)"
    fi
    row "" "ftrain ckpt" "torch" "ratio"
    row "save MB/s, 1 process" "${SAVE_1RANK_MBPS:-n/a}" "${TORCH_SAVE_MBPS:-n/a}" "$(ratio "$SAVE_1RANK_MBPS" "$TORCH_SAVE_MBPS")"
    row "load MB/s, 1 process (1 -> 1)" "${LOAD_1TO1_MBPS:-n/a}" "${TORCH_LOAD_MBPS:-n/a}" "$(ratio "$LOAD_1TO1_MBPS" "$TORCH_LOAD_MBPS")"
    row "resume MB/s: into existing tensors" "${LOAD_INTO_MBPS:-n/a}" "${TORCH_LOAD_INTO_MBPS:-n/a}" "$(ratio "$LOAD_INTO_MBPS" "$TORCH_LOAD_INTO_MBPS")"
    echo "  (best runs; load: into fresh memory, as torch.load; resume: ckpt_read_range into"
    echo "   memory that exists, against torch.load + copy_ into existing tensors, as"
    echo "   load_state_dict does)"
}

# ---- 6. stop path ------------------------------------------------------------------

# stop_run LOG SIGNAL_RANK: start 2 ranks of section 6's model in the
# background, wait for a logged step, send SIGUSR1 to rank SIGNAL_RANK, wait
# for the exit.  Sets KILL_TO_EXIT_S (seconds from kill to exit) and
# STOP_EXIT_RC; returns 1 when the run did not start training.
stop_run() {
    : >"$1"
    timeout 600 mpirun -n 2 "$FTRAIN" --layers "$STOP_LAYERS" --global-batch 32 --steps 100000 \
        --log-every 1 --run-dir "$STOP_RUN_DIR" >"$1" 2>&1 &
    BACKGROUND_PID=$!
    KILL_TO_EXIT_S=""
    STOP_EXIT_RC=""
    _stop_polls=0
    while [ "$_stop_polls" -lt 3000 ] && ! grep -q '^epoch .* step ' "$1"; do
        kill -0 "$BACKGROUND_PID" 2>/dev/null || break
        sleep 0.1
        _stop_polls=$((_stop_polls + 1))
    done
    _stop_rank_pid=$(sed -n "s/^world: rank $2 .* pid \([0-9]*\).*/\1/p" "$1" | head -1)
    if [ -z "$_stop_rank_pid" ] || ! grep -q '^epoch .* step ' "$1"; then
        kill -9 "$BACKGROUND_PID" 2>/dev/null
        wait "$BACKGROUND_PID" 2>/dev/null
        BACKGROUND_PID=""
        return 1
    fi
    _stop_kill_time=$(now)
    kill -USR1 "$_stop_rank_pid"
    wait "$BACKGROUND_PID"
    STOP_EXIT_RC=$?
    KILL_TO_EXIT_S=$(elapsed "$_stop_kill_time" "$(now)")
    BACKGROUND_PID=""
    return 0
}

section_6_stop_path() {
    if [ -n "${BENCH_STOP_LAYERS:-}" ]; then
        STOP_LAYERS=$BENCH_STOP_LAYERS
    elif [ "$CKPT_MB" -ge 1024 ]; then
        STOP_LAYERS=8192,8192,2048
    else
        # Two equal hidden layers: 12 bytes (parameter + Adam m + v) each.
        STOP_LAYERS=$(awk -v mb="$CKPT_MB" 'BEGIN { w = int(sqrt(mb * 1048576 / 12)); if (w < 16) w = 16; print w "," w }')
    fi
    heading "6. stop path (signals): 2 ranks, MLP 784-${STOP_LAYERS}-10, Adam, batch 32, --run-dir"
    echo "  SIGUSR1 to rank 1 after its first logged step; wall time from kill to mpirun's exit;"
    echo "  then resume on 2 ranks (the resume: line) and stop again (SIGUSR1 to rank 0)"
    STOP_RUN_DIR=$SCRATCH/stop
    section_start=$(now)
    if stop_run "$SCRATCH/stop1.log" 1; then
        echo "  run 1: exit $STOP_EXIT_RC, $KILL_TO_EXIT_S s from kill to exit"
        grep -E '^(train|checkpoint|stop):' "$SCRATCH/stop1.log" | sed 's/^/    /'
    else
        fail "stop run 1 did not start training"
        sed 's/^/    | /' "$SCRATCH/stop1.log" | tail -8
    fi
    if [ "$STOP_EXIT_RC" = 75 ] && stop_run "$SCRATCH/stop2.log" 0; then
        echo "  run 2 (resumed): exit $STOP_EXIT_RC, $KILL_TO_EXIT_S s from kill to exit"
        grep -E '^(resume|checkpoint|stop):' "$SCRATCH/stop2.log" | sed 's/^/    /'
    elif [ "$STOP_EXIT_RC" = 75 ]; then
        fail "resume run did not start training"
        sed 's/^/    | /' "$SCRATCH/stop2.log" | tail -8
    fi
    echo "  section 6 took $(elapsed "$section_start" "$(now)") s; the stop waits for the step in flight to finish;"
    default_ckpt_level=$("$FTRAIN" --help 2>/dev/null | sed -n 's/.*--ckpt-level N.*(default \([0-9]*\)).*/\1/p')
    echo "  ftrain's checkpoints here use its --ckpt-level default (zstd level ${default_ckpt_level:-unknown})"
    rm -rf "$STOP_RUN_DIR"

    # Async saves of the same state: the training stall per save (the
    # snapshot copy plus the commit at a step boundary) beside the
    # synchronous save time of the same run's checkpoints.
    echo
    echo "  async saves: the same model, 2 ranks, --ckpt-every 10 --ckpt-async, 40 steps"
    timeout 900 mpirun -n 2 "$FTRAIN" --layers "$STOP_LAYERS" --global-batch 32 --steps 40 \
        --log-every 1000 --run-dir "$SCRATCH/async" --ckpt-every 10 --ckpt-async >"$SCRATCH/async.log" 2>&1
    grep -E '^(checkpoint|async checkpoints):' "$SCRATCH/async.log" | sed 's/^/    /'
    async_stall_ms=$(sed -n 's/^async checkpoints: .*mean training stall \([0-9.]*\) ms per save/\1/p' "$SCRATCH/async.log")
    final_sync_save_s=$(sed -n 's/^checkpoint: .* committed in \([0-9.]*\) s.*/\1/p' "$SCRATCH/async.log" | tail -1)
    [ -n "$async_stall_ms" ] && [ -n "$final_sync_save_s" ] &&
        echo "  training stall per async save: $async_stall_ms ms; the final synchronous save: $final_sync_save_s s ($(awk -v a="$async_stall_ms" -v b="$final_sync_save_s" 'BEGIN { printf "%.2f", a / 1000 / b }') of it)"
    rm -rf "$SCRATCH/async"
}

# ---- 7. GPU -------------------------------------------------------------------

section_7_gpu() {
    heading "7. GPU: samples/s on one GPU beside PyTorch on the same GPU, NCCL allreduce, checkpoint stall"
    gpu_probe_output=$(timeout 120 "$FTRAIN" --device cuda --data line --steps 1 --quiet 2>&1)
    if [ $? -ne 0 ]; then
        echo "  skipped: $(printf '%s\n' "$gpu_probe_output" | grep -v '^$' | tail -1)"
        return
    fi
    gpu_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    echo "  GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1); ${gpu_count:-?} visible"
    torch_on_gpu=0
    if have_torch && "$PYTHON_BIN" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        torch_on_gpu=1
    else
        echo "  peer unavailable: ${TORCH_WHY:-torch sees no GPU}"
    fi
    echo "  samples/s over the training loop (Fashion-MNIST, Adam); the best of $REPEAT runs each;"
    echo "  ftrain's first step and PyTorch's 3 warm-up steps untimed; PyTorch keeps data and model on the GPU; its best of"
    echo "  Adam's default and fused implementations; float32 matrix products on both sides (no TF32)"
    echo
    row "" "ftrain" "PyTorch" "ratio"
    # global batch, micro-batch, hidden layers, steps, mode (fast or det)
    for config in "128 16 256,128 2000 fast" "128 128 256,128 2000 fast" "4096 4096 4096,4096 300 fast" \
        "4096 4096 4096,4096 300 det"; do
        # shellcheck disable=SC2086
        set -- $config
        global_batch=$1 micro_batch=$2 hidden_layers=$3 gpu_steps=$4 gpu_mode=$5
        det_flag=""
        [ "$gpu_mode" = det ] && det_flag=--deterministic
        # shellcheck disable=SC2086
        ftrain_best 1 --device cuda --global-batch "$global_batch" --micro-batch "$micro_batch" --layers "$hidden_layers" \
            --steps "$gpu_steps" --log-every 1000000 $det_flag
        ftrain_gpu_sps=$BEST_SAMPLES_PER_S
        [ -n "$ftrain_gpu_sps" ] || fail "ftrain --device cuda (batch $global_batch, layers $hidden_layers) gave no timing line"
        # The peer: its fast mode at its best (the issue's bar for both of
        # ftrain's modes), and in deterministic mode beside ftrain's.
        torch_gpu_sps="" torch_det_sps=""
        if [ "$torch_on_gpu" = 1 ]; then
            for torch_variant in "--adam default" "--adam fused" ${det_flag:+"--adam default --deterministic"}; do
                run=0
                while [ "$run" -lt "$REPEAT" ]; do
                    run=$((run + 1))
                    # shellcheck disable=SC2086
                    torch_output=$(timeout 600 "$PYTHON_BIN" "$SCRIPT_DIR/torch_mlp.py" --device cuda --batch "$global_batch" \
                        --layers "$hidden_layers" --steps "$gpu_steps" $torch_variant 2>&1)
                    torch_sps=$(field torch_mlp: "$torch_output")
                    [ -n "$torch_sps" ] || { echo "    | torch $torch_variant: $(printf '%s\n' "$torch_output" | tail -1)"; break; }
                    case $torch_variant in
                    *--deterministic*) torch_det_sps=$(maxof "$torch_det_sps" "$torch_sps") ;;
                    *) torch_gpu_sps=$(maxof "$torch_gpu_sps" "$torch_sps") ;;
                    esac
                done
            done
        fi
        row "batch $global_batch, micro-batch $micro_batch, layers $hidden_layers${det_flag:+ (det)}" "${ftrain_gpu_sps:-failed}" "${torch_gpu_sps:-n/a}" "$(ratio "$ftrain_gpu_sps" "$torch_gpu_sps")"
        if [ -n "$det_flag" ]; then
            row "  (det) beside PyTorch's deterministic mode" "${ftrain_gpu_sps:-failed}" "${torch_det_sps:-n/a}" "$(ratio "$ftrain_gpu_sps" "$torch_det_sps")"
        fi
    done
    ftrain_best 1 --device cuda --global-batch 128 --micro-batch 128 --steps 2000 --log-every 1000000 --deterministic
    row "batch 128, micro-batch 128, --deterministic" "${BEST_SAMPLES_PER_S:-failed}" "" ""

    # Where the wide model's det-over-fast gap goes, phase by phase (the
    # same dims and batch as the wide rows above).
    echo
    echo "  per-phase split of one step (bench/gpu_phases, one GPU, float32 both modes):"
    if [ -x "$GPU_PHASES" ]; then
        phases_output=$(timeout 120 "$GPU_PHASES" --dims 784,4096,4096,10 --batch 4096 --steps 100 \
            --repeat "$REPEAT" 2>&1)
        phases_rc=$?
        # What it printed, measured lines included, then why it stopped.
        [ -n "$phases_output" ] && printf '%s\n' "$phases_output" | sed 's/^/    /'
        if [ "$phases_rc" -ne 0 ]; then
            case $phases_rc in
                124) echo "  not measured in full: gpu_phases ran past 120 s" ;;
                *) echo "  not measured in full: gpu_phases exited $phases_rc" ;;
            esac
        fi
    else
        echo "  not measured: $GPU_PHASES not built (make BUILD=$BUILD bench)"
    fi

    echo
    if [ "${gpu_count:-0}" -ge 2 ]; then
        allreduce_output=$(timeout 600 mpirun -n "$gpu_count" "$FTRAIN" --device cuda --data line --layers 8192,8192,2048 \
            --global-batch $((gpu_count * 8)) --micro-batch 8 --steps 30 --log-every 1000000 2>&1)
        allreduce_params=$(train_param_count "$allreduce_output")
        allreduce_ms=$(timing_grad_reduction_ms "$allreduce_output")
        if [ -n "$allreduce_params" ] && [ -n "$allreduce_ms" ]; then
            echo "  NCCL allreduce of the f32 gradient ($allreduce_params parameters) on $gpu_count GPUs: $allreduce_ms ms/step," \
                "bus bandwidth $(awk -v p="$allreduce_params" -v g="$allreduce_ms" -v n="$gpu_count" 'BEGIN { printf "%.1f", p * 4 * 2 * (n - 1) / n / (g / 1000) / 1e9 }') GB/s"
            echo "  (2(n-1)/n x bytes / time, as nccl-tests report it; the time includes waiting for the slower rank)"
        else
            fail "the $gpu_count-GPU allreduce run gave no timing"
            show_tail 5 "$allreduce_output"
        fi
    else
        echo "  NCCL allreduce bus bandwidth: not measured: it needs 2 GPUs, ${gpu_count:-0} visible"
    fi

    echo
    echo "  checkpoint stall on the GPU: layers 8192,8192,2048 (about 1.08 GB of parameters and Adam"
    echo "  moments), 1 rank, 40 steps, --ckpt-every 10 --ckpt-async, then the final synchronous save"
    timeout 900 "$FTRAIN" --device cuda --layers 8192,8192,2048 --global-batch 128 --micro-batch 128 --steps 40 \
        --log-every 1000 --run-dir "$SCRATCH/gstall" --ckpt-every 10 --ckpt-async >"$SCRATCH/gstall.log" 2>&1 ||
        fail "the GPU checkpoint run failed: $(tail -1 "$SCRATCH/gstall.log")"
    grep -E '^(train|checkpoint|async checkpoints):' "$SCRATCH/gstall.log" | sed 's/^/    /'
    stall_params=$(train_param_count "$(cat "$SCRATCH/gstall.log")")
    gpu_copy_ms=$(sed -n 's/^checkpoint: .* committed in .*(GPU copy \([0-9.]*\) ms).*/\1/p' "$SCRATCH/gstall.log" | tail -1)
    if [ -n "$stall_params" ] && [ -n "$gpu_copy_ms" ]; then
        echo "  device -> pinned host copy of the state ($(awk -v p="$stall_params" 'BEGIN { printf "%.2f", p * 12 / 1e9 }') GB):" \
            "$gpu_copy_ms ms, $(awk -v p="$stall_params" -v c="$gpu_copy_ms" 'BEGIN { printf "%.1f", p * 12 / (c / 1000) / 1e9 }') GB/s"
    fi
    rm -rf "$SCRATCH/gstall"
}

# ---- 8. convergence beside PyTorch --------------------------------------------

# converge_ftrain ARGS...: one ftrain run (one rank, CPU) of ARGS; sets
# CONV_LOSS and CONV_METRIC from its last eval line ("" when it failed).
converge_ftrain() {
    _conv_output=$(timeout 1800 "$FTRAIN" --device cpu --log-every 1000000 "$@" 2>&1)
    _conv_eval=$(printf '%s\n' "$_conv_output" | grep '^eval: epoch ' | tail -1)
    CONV_LOSS=$(field test_loss "$_conv_eval")
    CONV_METRIC=$(field test_r2 "$_conv_eval")
    [ -n "$CONV_METRIC" ] || CONV_METRIC=$(field test_acc "$_conv_eval")
    if [ -z "$CONV_LOSS" ]; then
        fail "ftrain $*"
        show_tail 5 "$_conv_output"
    fi
}

# converge_torch ARGS...: one torch_converge.py run of ARGS; sets
# CONV_LOSS and CONV_METRIC ("" when it failed, saying why).  Passive
# OpenMP waits: threads that spin lose their core on a shared machine.
converge_torch() {
    CONV_LOSS="" CONV_METRIC=""
    [ "$CONV_TORCH" = 1 ] || return
    _conv_output=$(OMP_WAIT_POLICY=passive timeout 1800 "$PYTHON_BIN" "$SCRIPT_DIR/torch_converge.py" "$@" 2>&1)
    CONV_LOSS=$(field test_loss "$_conv_output")
    CONV_METRIC=$(field value "$_conv_output")
    [ -n "$CONV_LOSS" ] || echo "  peer unavailable: torch_converge.py $*: $(printf '%s\n' "$_conv_output" | tail -1)"
}

# converge_row LABEL METRIC FTRAIN_ARGS -- TORCH_ARGS: both sides of one
# workload and their line of the table.
converge_row() {
    _row_label=$1 _row_metric=$2
    shift 2
    _row_ftrain=""
    while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
        _row_ftrain="$_row_ftrain $1"
        shift
    done
    [ "$#" -gt 0 ] && shift
    # shellcheck disable=SC2086
    converge_ftrain $_row_ftrain
    _row_ftrain_loss=$CONV_LOSS _row_ftrain_metric=$CONV_METRIC
    CONV_LOSS="" CONV_METRIC=""
    [ "$#" -gt 0 ] && converge_torch "$@"
    printf '  %-40s %-6s %12s %12s %10s %10s\n' "$_row_label" "$_row_metric" \
        "${_row_ftrain_loss:-failed}" "${CONV_LOSS:-n/a}" "${_row_ftrain_metric:-failed}" "${CONV_METRIC:-n/a}"
}

section_8_convergence() {
    heading "8. convergence beside PyTorch: final test loss and metric, same data, model, batch, optimizer, epochs"
    CONV_TORCH=0
    if have_torch; then
        CONV_TORCH=1
    else
        echo "  peer unavailable: $TORCH_WHY"
    fi
    echo "  ftrain: one rank, fast mode, its defaults (--init torch, seed 42); PyTorch: nn.Linear defaults,"
    echo "  seed 1, bench/torch_converge.py; the same test sets (metric: r2 = R^2 for regression, acc)"
    echo "  line: y = 0.7x + 0.3, 1-1000-1000-1000-1 ReLU, Adam lr 1e-3, batch 128, 50 epochs"
    echo "  sine: y = sin(2 pi x), 1-16-1 tanh, SGD lr 0.01 without momentum, batch 10, 3000 epochs"
    echo "        (30000 steps: plain SGD at this rate needs them to get past the flat start)"
    echo "  fashion-mnist: 784-256-128-10 ReLU, Adam lr 1e-3, batch 128, 5 epochs"
    echo
    printf '  %-40s %-6s %12s %12s %10s %10s\n' "" metric "ftrain loss" "torch loss" ftrain torch
    converge_row "line" r2 --data line --layers 1000,1000,1000 --optimizer adam --lr 0.001 \
        --global-batch 128 --epochs 50 -- --data line --layers 1000,1000,1000 --activation relu \
        --optimizer adam --lr 1e-3 --batch 128 --epochs 50
    converge_row "line, --init kaiming (earlier default)" r2 --data line --layers 1000,1000,1000 \
        --optimizer adam --lr 0.001 --global-batch 128 --epochs 50 --init kaiming
    converge_row "sine" r2 --data sine --layers 16 --activation tanh --optimizer sgd --momentum 0 \
        --lr 0.01 --global-batch 10 --micro-batch 10 --epochs 3000 -- --data sine --layers 16 \
        --activation tanh --optimizer sgd --momentum 0 --lr 0.01 --batch 10 --epochs 3000
    if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
        converge_row "fashion-mnist" acc --data fashion-mnist --layers 256,128 --optimizer adam \
            --lr 0.001 --global-batch 128 --epochs 5 -- --data fashion-mnist --layers 256,128 \
            --activation relu --optimizer adam --lr 1e-3 --batch 128 --epochs 5 --threads 2
    else
        echo "  fashion-mnist: skipped: the data set is not installed (apt-get install dataset-fashion-mnist)"
    fi
}

# ---- 9. hangs and dead ranks -------------------------------------------------------

# The workload of the watchdog's cost: short steps, so that the per-step
# cost of the phase marks (a mutex and a clock read each, five a step) and
# of the watchdog thread is as large a part of a step as it gets.
HANG_COST_RUN="--data line --layers 64,64 --global-batch 32 --micro-batch 8 --deterministic --steps 3000 --log-every 1000000"

# watchdog_cost_run NAME RANKS ARGS...: one run of HANG_COST_RUN on RANKS
# ranks with ARGS in a fresh run directory (heartbeats are written, as in a
# real run); sets WC_SPS to its samples/s ("" when it failed) and appends
# it to hang_sps_NAME, and its param_hash to hang_hashes.
watchdog_cost_run() {
    _wc_name=$1 _wc_ranks=$2
    shift 2
    rm -rf "$SCRATCH/hang-cost"
    # shellcheck disable=SC2086 # the option list splits into words
    if [ "$_wc_ranks" = 1 ]; then
        _wc_output=$(timeout 300 "$FTRAIN" $HANG_COST_RUN --run-dir "$SCRATCH/hang-cost" "$@" 2>&1)
    else
        _wc_output=$(timeout 300 mpirun -n "$_wc_ranks" "$FTRAIN" $HANG_COST_RUN --run-dir "$SCRATCH/hang-cost" "$@" 2>&1)
    fi
    rm -rf "$SCRATCH/hang-cost"
    WC_SPS=$(timing_samples_per_s "$_wc_output")
    if [ -z "$WC_SPS" ]; then
        fail "watchdog cost: $_wc_ranks rank(s) $* gave no timing line"
        show_tail 4 "$_wc_output"
        return
    fi
    eval "hang_sps_$_wc_name=\"\${hang_sps_$_wc_name:-} $WC_SPS\""
    hang_hashes="$hang_hashes $(printf '%s\n' "$_wc_output" | sed -n 's/^done: .*param_hash=\([0-9a-f]*\).*/\1/p')"
}

# spread V...: the smallest of the numbers over the largest, or "n/a".
spread() {
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -n |
        awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR == 0 || hi + 0 == 0) print "n/a"; else printf "%.2f\n", lo / hi }'
}

# ms_per_step SAMPLES_PER_S: milliseconds per step of HANG_COST_RUN's
# global batch of 32, three decimals ("" for "").
ms_per_step() { awk -v s="${1:-}" 'BEGIN { if (s + 0 > 0) printf "%.3f\n", 32 * 1000 / s }'; }

# watchdog_cost RANKS: HANG_ROUNDS rounds of the pair (--hang-timeout 0,
# the default), the order swapped every round, and their figures: the
# medians, and the median of the rounds' paired ratios (default / off),
# which a slow drift of the machine's load moves less.
watchdog_cost() {
    _cost_ranks=$1
    eval "hang_sps_off$_cost_ranks='' hang_sps_on$_cost_ranks=''"
    _cost_pairs=""
    _cost_round=0
    while [ "$_cost_round" -lt "$HANG_ROUNDS" ]; do
        _cost_round=$((_cost_round + 1))
        if [ $((_cost_round % 2)) = 1 ]; then
            watchdog_cost_run "off$_cost_ranks" "$_cost_ranks" --hang-timeout 0
            _cost_off=$WC_SPS
            watchdog_cost_run "on$_cost_ranks" "$_cost_ranks"
            _cost_on=$WC_SPS
        else
            watchdog_cost_run "on$_cost_ranks" "$_cost_ranks"
            _cost_on=$WC_SPS
            watchdog_cost_run "off$_cost_ranks" "$_cost_ranks" --hang-timeout 0
            _cost_off=$WC_SPS
        fi
        _cost_pairs="$_cost_pairs $(ratio "$_cost_on" "$_cost_off")"
    done
    _cost_off_runs="" _cost_on_runs=""
    eval "_cost_off_runs=\$hang_sps_off$_cost_ranks _cost_on_runs=\$hang_sps_on$_cost_ranks"
    echo "  $_cost_ranks rank(s), samples/s runs: check off:$_cost_off_runs; default:$_cost_on_runs;" \
        "paired ratios:$_cost_pairs"
    # shellcheck disable=SC2086 # the lists split into their numbers
    _cost_off=$(median $_cost_off_runs) _cost_on=$(median $_cost_on_runs)
    row "$_cost_ranks rank(s): median samples/s" "${_cost_off:-failed}" "${_cost_on:-failed}" "$(ratio "$_cost_on" "$_cost_off")"
    row "$_cost_ranks rank(s): median ms/step" "$(ms_per_step "$_cost_off")" "$(ms_per_step "$_cost_on")" \
        "$(ratio "$(ms_per_step "$_cost_on")" "$(ms_per_step "$_cost_off")")"
    # shellcheck disable=SC2086
    row "$_cost_ranks rank(s): median of the paired ratios" "" "" "$(median $_cost_pairs)"
    # shellcheck disable=SC2086
    row "$_cost_ranks rank(s): spread, slowest / fastest run" "$(spread $_cost_off_runs)" "$(spread $_cost_on_runs)" ""
}

# failure_run SIGNAL ARGS...: 3 ranks with short steps in the background;
# after 10 logged steps, SIGNAL to rank 1 and wait for mpirun's exit.  Sets
# FAILURE_S (seconds from the signal to the exit) and FAILURE_RC; returns 1
# when the run did not get going.
failure_run() {
    _fr_signal=$1
    shift
    _fr_log=$SCRATCH/hang-failure.log
    rm -rf "$SCRATCH/hang-failure"
    FAILURE_S="" FAILURE_RC=""
    timeout 300 mpirun -n 3 "$FTRAIN" --data line --layers 8 --global-batch 32 --micro-batch 8 \
        --steps 100000 --step-delay-ms 20 --log-every 1 --run-dir "$SCRATCH/hang-failure" "$@" \
        >"$_fr_log" 2>&1 &
    BACKGROUND_PID=$!
    _fr_polls=0
    while [ "$_fr_polls" -lt 600 ] && [ "$(grep -c '^epoch .* step ' "$_fr_log")" -lt 10 ]; do
        kill -0 "$BACKGROUND_PID" 2>/dev/null || break
        sleep 0.05
        _fr_polls=$((_fr_polls + 1))
    done
    _fr_pid=$(sed -n 's/^world: rank 1 .* pid \([0-9]*\).*/\1/p' "$_fr_log" | head -1)
    if [ -z "$_fr_pid" ] || [ "$(grep -c '^epoch .* step ' "$_fr_log")" -lt 10 ]; then
        kill -9 "$BACKGROUND_PID" 2>/dev/null
        wait "$BACKGROUND_PID" 2>/dev/null
        BACKGROUND_PID=""
        show_tail 4 "$(cat "$_fr_log")"
        return 1
    fi
    _fr_t0=$(now)
    kill "-$_fr_signal" "$_fr_pid"
    wait "$BACKGROUND_PID"
    FAILURE_RC=$?
    FAILURE_S=$(elapsed "$_fr_t0" "$(now)")
    BACKGROUND_PID=""
    [ "$_fr_signal" = STOP ] && kill -CONT "$_fr_pid" 2>/dev/null # only if it outlived the job
    rm -rf "$SCRATCH/hang-failure"
    return 0
}

# failure_figures LABEL SIGNAL ARGS...: HANG_ROUNDS failure_runs; prints
# each run, then the median and the max.
failure_figures() {
    _ff_label=$1
    shift
    _ff_runs="" _ff_codes=""
    _ff_round=0
    while [ "$_ff_round" -lt "$HANG_ROUNDS" ]; do
        _ff_round=$((_ff_round + 1))
        if failure_run "$@"; then
            _ff_runs="$_ff_runs $FAILURE_S"
            _ff_codes="$_ff_codes $FAILURE_RC"
        else
            fail "$_ff_label: run $_ff_round did not get going"
        fi
    done
    echo "  $_ff_label: runs (s):${_ff_runs:- none}; exit codes:${_ff_codes:- none}"
    # shellcheck disable=SC2086 # the list splits into its numbers
    _ff_max=$(printf '%s\n' $_ff_runs | sort -n | tail -1)
    # shellcheck disable=SC2086
    row "$_ff_label" "$(median $_ff_runs)" "${_ff_max:-n/a}" ""
}

section_9_hangs() {
    heading "9. hangs and dead ranks: the watchdog's cost per step; how soon a job ends after a rank fails"
    section_start=$(now)
    echo "  watchdog cost: MLP 1-64-64-1 on line, batch 32 (4 x 8), --deterministic, 3000 steps, --run-dir"
    echo "  (heartbeats); --hang-timeout 0 (the check off: the phase marks and heartbeats stay) against the"
    echo "  default limit, in $HANG_ROUNDS rounds of the pair, the order swapped every round; samples/s of the loop"
    hang_hashes=""
    echo
    row "" "check off" "default" "ratio"
    watchdog_cost 1
    watchdog_cost 2
    # shellcheck disable=SC2086 # the list splits into its hashes
    echo "  param_hash of every run: $(printf '%s\n' $hang_hashes | sort -u | tr '\n' ' ' | sed 's/ $//')" \
        "(one value: the watchdog does not change the result)"

    echo
    echo "  a rank that fails: 3 ranks, MLP 1-8-1 on line, steps of about 20 ms (--step-delay-ms 20), --run-dir;"
    echo "  the signal goes to rank 1 after 10 logged steps; seconds from the signal to mpirun's exit, $HANG_ROUNDS runs each"
    row "" "median" "max" ""
    failure_figures "SIGKILL: mpirun ends the job" KILL
    failure_figures "SIGSTOP, --hang-timeout 3: exit 76" STOP --hang-timeout 3
    echo "  section 9 took $(elapsed "$section_start" "$(now)") s"
}

# ---- 10. failure to training again inside the allocation (SLURM) -------------------

# One job of section 10: 2 nodes, one rank each, short steps, a save every
# 5 steps; the fault comes after step 22 (about 2.5 s in, when every rank
# has written its heartbeat), so 2 steps are redone.
RELAUNCH_RUN="--device cpu --data line --layers 8 --global-batch 32 --micro-batch 8 --deterministic --steps 32 --log-every 1 --step-delay-ms 100 --ckpt-every 5"

# relaunch_unavailable: why section 10 cannot run here ("" when it can).
relaunch_unavailable() {
    if [ "$(id -u)" != 0 ]; then
        echo "needs root: the test cluster runs slurmctld and slurmd (tests/slurm/lab/lab-up.sh)"
        return
    fi
    for _ru_command in slurmctld slurmd sbatch srun scontrol scancel squeue munge flock; do
        if ! command -v "$_ru_command" >/dev/null 2>&1; then
            echo "'$_ru_command' not found: SLURM is not installed (tests/slurm/lab/lab-up.sh installs it)"
            return
        fi
    done
}

# json_number LINE KEY: the value of KEY in one metrics.jsonl line.
json_number() { printf '%s\n' "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^\",}]*\).*/\1/p"; }
# job_state JOB: SLURM's state of JOB.
job_state() {
    SLURM_CONF=$LAB/etc/slurm.conf timeout 20 scontrol -o show job "$1" 2>/dev/null |
        tr ' ' '\n' | sed -n 's/^JobState=//p'
}
# job_launchers JOB: the pids of the live srun processes of JOB that launch
# the training (not the supervisor's own steps, the deputy and the RUN_DIR
# probe, told by their job names ftrain-deputy and ftrain-probe), one a line.
job_launchers() {
    for _jl_pid in $(pgrep -x srun); do
        grep -q '^State:[[:space:]]*Z' "/proc/$_jl_pid/status" 2>/dev/null && continue
        { tr '\0' ' ' <"/proc/$_jl_pid/cmdline"; } 2>/dev/null | grep -Eq -- '--job-name=ftrain-(deputy|probe)' && continue
        { tr '\0' '\n' <"/proc/$_jl_pid/environ"; } 2>/dev/null | grep -qx "SLURM_JOB_ID=$1" && echo "$_jl_pid"
    done
}

# relaunch_round NAME FTRAIN_OPTION...: one job with slurm/train.sbatch,
# polled about every 0.1 s until it ends (at most 240 s); sets RR_UNTIL
# RR_RELAUNCH RR_LOAD RR_FIRST RR_TOTAL RR_REDONE (ftrain's recovery
# event), RR_TO_EXIT (the last heartbeat to the first launcher's exit,
# seen from outside), RR_SCRIPT (that exit to the relaunch's launch line
# appearing in the job's output), RR_DRAIN (of it, until the "ftrain
# exited" line appears: the script's copy of the launcher's standard error
# ending), RR_START (the launch line to ftrain's start: srun and MPI
# start-up, the rest of ftrain's "relaunch"), RR_SCRIPT_LOG (the
# supervisor's own time, from its "relaunch after" line), RR_OUTCOME and RR_OUT (the
# job's output); returns 1 when the job did not end with one relaunch and
# a recovery event.
relaunch_round() {
    _rr_name=$1
    shift
    _rr_dir=$SCRATCH/relaunch-$_rr_name
    _rr_out=$_rr_dir.out
    RR_OUT=$_rr_out
    rm -rf "$_rr_dir" "$_rr_out"
    RR_UNTIL="" RR_RELAUNCH="" RR_LOAD="" RR_FIRST="" RR_TOTAL="" RR_REDONE=""
    RR_TO_EXIT="" RR_SCRIPT="" RR_DRAIN="" RR_START="" RR_SCRIPT_LOG="" RR_OUTCOME=""
    # The job gets the cluster's environment, not this script's Open MPI
    # settings for one machine (shared memory only would break across the
    # fake nodes).
    RELAUNCH_JOB=$( (
        unset OMPI_MCA_btl OMPI_MCA_btl_vader_single_copy_mechanism OMPI_MCA_rmaps_base_oversubscribe \
            OMPI_MCA_hwloc_base_binding_policy
        # shellcheck disable=SC1091 # lab-up.sh writes it
        . "$LAB/env"
        # shellcheck disable=SC2030 # for the job only
        # The script execs the ftrain-supervise built beside that ftrain.
        export FTRAIN="$RELAUNCH_FTRAIN" RUN_DIR="$_rr_dir" FTRAIN_TASKS_PER_NODE=1 \
            FTRAIN_ARGS="$RELAUNCH_RUN $*" FTRAIN_SUPERVISE="${RELAUNCH_FTRAIN%/*}/ftrain-supervise"
        timeout 30 sbatch --parsable -N 2 --time=5 -o "$_rr_out" -J "ftrain-bench-$_rr_name" \
            "$SCRIPT_DIR/../slurm/train.sbatch"
    ) 2>"$_rr_out.sbatch" 9>&-)
    if [ -z "$RELAUNCH_JOB" ]; then
        RR_OUTCOME="sbatch failed: $(tail -n 1 "$_rr_out.sbatch")"
        return 1
    fi
    _rr_pids="" _rr_t_exit="" _rr_t_exited="" _rr_t_launch="" _rr_state="" _rr_polls=0
    _rr_deadline=$(($(date +%s) + 240))
    while [ "$(date +%s)" -le "$_rr_deadline" ]; do
        _rr_polls=$((_rr_polls + 1))
        _rr_t=$(now)
        if [ -z "$_rr_pids" ]; then
            _rr_pids=$(job_launchers "$RELAUNCH_JOB")
        elif [ -z "$_rr_t_exit" ]; then
            _rr_live=$(job_launchers "$RELAUNCH_JOB")
            _rr_gone=1
            for _rr_pid in $_rr_pids; do
                case " $(printf '%s\n' "$_rr_live" | tr '\n' ' ') " in *" $_rr_pid "*) _rr_gone=0 ;; esac
            done
            [ "$_rr_gone" = 1 ] && _rr_t_exit=$_rr_t
        fi
        if [ -z "$_rr_t_exited" ] && grep -q 'train\.sbatch\[[0-9_]*\]: ftrain exited with status' "$_rr_out" 2>/dev/null; then
            _rr_t_exited=$_rr_t
        fi
        _rr_launches=$(grep -c 'train\.sbatch\[[0-9_]*\]: launch: ' "$_rr_out" 2>/dev/null)
        if [ -z "$_rr_t_launch" ] && [ "${_rr_launches:-0}" -ge 2 ]; then
            _rr_t_launch=$_rr_t
        fi
        if [ $((_rr_polls % 10)) = 0 ]; then
            _rr_state=$(job_state "$RELAUNCH_JOB")
            case $_rr_state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED) break ;; esac
        fi
        sleep 0.1
    done
    case $_rr_state in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED) RELAUNCH_JOB="" ;;
        *) SLURM_CONF=$LAB/etc/slurm.conf scancel "$RELAUNCH_JOB" 2>/dev/null
           RELAUNCH_JOB=""
           RR_OUTCOME="the job did not end within 240 s (state ${_rr_state:-unknown})"
           return 1 ;;
    esac
    _rr_relaunches=$(grep -c 'train\.sbatch\[[0-9_]*\]: relaunch [0-9]* of at most' "$_rr_out")
    RR_OUTCOME="job $_rr_state, $_rr_relaunches relaunch(es)"
    _rr_event=$(grep '"event":"recovery"' "$_rr_dir/metrics.jsonl" 2>/dev/null | head -n 1)
    [ "$_rr_state" = COMPLETED ] && [ "$_rr_relaunches" = 1 ] && [ -n "$_rr_event" ] || return 1
    RR_UNTIL=$(json_number "$_rr_event" until_end_s)
    RR_RELAUNCH=$(json_number "$_rr_event" relaunch_s)
    RR_LOAD=$(json_number "$_rr_event" load_s)
    RR_FIRST=$(json_number "$_rr_event" first_step_s)
    RR_TOTAL=$(json_number "$_rr_event" seconds)
    RR_REDONE=$(json_number "$_rr_event" steps_redone)
    # The last heartbeat of the failed launch, on this machine's clock: the
    # event's time less the seconds since the failure, plus the detection.
    _rr_last_beat=$(awk -v t="$(json_number "$_rr_event" time)" -v s="$RR_TOTAL" -v u="$RR_UNTIL" \
        'BEGIN { printf "%.3f\n", t - s + u }')
    if [ -n "$_rr_t_exit" ] && [ -n "$_rr_t_launch" ]; then
        RR_TO_EXIT=$(elapsed "$_rr_last_beat" "$_rr_t_exit")
        RR_SCRIPT=$(elapsed "$_rr_t_exit" "$_rr_t_launch")
        [ -n "$_rr_t_exited" ] && RR_DRAIN=$(elapsed "$_rr_t_exit" "$_rr_t_exited")
        # Seen in the wrong order: the relaunch came within one poll (the
        # poll itself takes 0.1 s and more on a loaded machine).
        case $RR_SCRIPT in -*) RR_SCRIPT="n/a" ;; esac
        case $RR_DRAIN in -*) RR_DRAIN="n/a" ;; esac
        RR_START=$(awk -v b="$_rr_last_beat" -v r="$RR_RELAUNCH" -v l="$_rr_t_launch" 'BEGIN { printf "%.3f\n", b + r - l }')
    fi
    # The supervisor's own account of its time (its "relaunch after" line).
    RR_SCRIPT_LOG=$(sed -n 's/.*train\.sbatch\[[0-9_]*\]: relaunch after \([0-9.]*\) s of this supervisor.s own time.*/\1/p' "$_rr_out" | head -n 1)
    return 0
}

# relaunch_row LABEL UNTIL RELAUNCH LOAD FIRST TOTAL REDONE TO_EXIT SCRIPT
# DRAIN START SCRIPT_LOG
relaunch_row() {
    printf '  %-12s %7s %8s %6s %6s %6s %6s | %6s %6s %6s %6s %6s\n' "$@"
}

# relaunch_kind NAME LABEL FTRAIN_OPTION...: RELAUNCH_ROUNDS jobs with the
# fault; a row per job and the medians.
relaunch_kind() {
    _rk_name=$1 _rk_label=$2
    shift 2
    _rk_until="" _rk_relaunch="" _rk_load="" _rk_first="" _rk_total="" _rk_redone=""
    _rk_to_exit="" _rk_script="" _rk_drain="" _rk_start="" _rk_script_log=""
    echo "  $_rk_label ($*):"
    _rk_round=0
    while [ "$_rk_round" -lt "$RELAUNCH_ROUNDS" ]; do
        _rk_round=$((_rk_round + 1))
        if relaunch_round "$_rk_name-$_rk_round" "$@"; then
            relaunch_row "  job $_rk_round" "$RR_UNTIL" "$RR_RELAUNCH" "$RR_LOAD" "$RR_FIRST" "$RR_TOTAL" "$RR_REDONE" \
                "${RR_TO_EXIT:-n/a}" "${RR_SCRIPT:-n/a}" "${RR_DRAIN:-n/a}" "${RR_START:-n/a}" "${RR_SCRIPT_LOG:-n/a}"
            _rk_until="$_rk_until $RR_UNTIL" _rk_relaunch="$_rk_relaunch $RR_RELAUNCH" _rk_load="$_rk_load $RR_LOAD"
            _rk_first="$_rk_first $RR_FIRST" _rk_total="$_rk_total $RR_TOTAL" _rk_redone="$_rk_redone $RR_REDONE"
            _rk_to_exit="$_rk_to_exit ${RR_TO_EXIT:-n/a}" _rk_script="$_rk_script ${RR_SCRIPT:-n/a}"
            _rk_drain="$_rk_drain ${RR_DRAIN:-n/a}"
            _rk_start="$_rk_start ${RR_START:-n/a}" _rk_script_log="$_rk_script_log ${RR_SCRIPT_LOG:-n/a}"
        else
            fail "$_rk_label, job $_rk_round: $RR_OUTCOME"
            show_tail 6 "$(grep -E 'train\.sbatch|error|hang:' "$RR_OUT" 2>/dev/null)"
        fi
    done
    # shellcheck disable=SC2086 # the lists split into their numbers
    relaunch_row "  median" "$(median $_rk_until)" "$(median $_rk_relaunch)" "$(median $_rk_load)" \
        "$(median $_rk_first)" "$(median $_rk_total)" "$(median $_rk_redone)" "$(median $_rk_to_exit)" \
        "$(median $_rk_script)" "$(median $_rk_drain)" "$(median $_rk_start)" "$(median $_rk_script_log)"
}

# relaunch_lab_release: stop the test cluster if this section started it,
# and let the other users of it have the lock.
relaunch_lab_release() {
    if [ "$RELAUNCH_LAB_STARTED" = 1 ]; then
        "$SCRIPT_DIR/../tests/slurm/lab/lab-down.sh" >/dev/null 2>&1 9>&-
        RELAUNCH_LAB_STARTED=0
        echo "  the test cluster was started by this section and is stopped again"
    fi
    exec 9>&-
}

section_10_relaunch() {
    heading "10. failure to training again inside the allocation: slurm/train.sbatch on the SLURM test cluster"
    _s10_why=$(relaunch_unavailable)
    if [ -n "$_s10_why" ]; then
        echo "  skipped: $_s10_why"
        return
    fi
    section_start=$(now)
    # shellcheck disable=SC2031 # only the job's copy of FTRAIN differs
    RELAUNCH_FTRAIN=$(cd "$(dirname "$FTRAIN")" && pwd)/$(basename "$FTRAIN")
    # One test cluster per machine: the SLURM tests take the same lock.
    exec 9>"$LAB.lock"
    if ! flock -w 900 9; then
        fail "the SLURM test cluster's lock $LAB.lock was held by another user for 900 s"
        exec 9>&-
        return
    fi
    _s10_pid=$(cat "$LAB/run/slurmctld.pid" 2>/dev/null)
    if [ -n "$_s10_pid" ] && [ "$(cat "/proc/$_s10_pid/comm" 2>/dev/null)" = slurmctld ]; then
        echo "  test cluster: $LAB (already up)"
    else
        RELAUNCH_LAB_STARTED=1
        echo "  test cluster: $LAB (started for this section)"
    fi
    if ! "$SCRIPT_DIR/../tests/slurm/lab/lab-up.sh" >"$SCRATCH/lab-up.log" 2>&1 9>&-; then
        fail "the test cluster did not come up: $(tail -n 1 "$SCRATCH/lab-up.log")"
        relaunch_lab_release
        return
    fi
    echo "  each job: sbatch -N 2 slurm/train.sbatch, 1 rank per node, MLP 1-8-1 on line, --deterministic, 32 steps"
    echo "  of about 100 ms (--step-delay-ms 100), a save every 5 steps; rank 1 raises its fault after step 22"
    echo "  (--fault), the script relaunches on the node left, and ftrain resumes from step 20 on 1 rank."
    echo "  $RELAUNCH_ROUNDS job(s) per fault (BENCH_RELAUNCH_ROUNDS); seconds."
    echo "  Left of |, ftrain's recovery event (README, \"Lost work and the checkpoint interval\"): from the"
    echo "  failed rank's last heartbeat until the job ended (the last heartbeat of any rank: both to within a"
    echo "  heartbeat period, 1.5 s by default, 0.5 s with --hang-timeout 3), the relaunch (from there to the"
    echo "  new launch's start), the checkpoint load, start-up and first step, the total; the steps redone."
    echo "  Right of |, the relaunch taken apart from outside (this script polls every 0.1 s or so): the last"
    echo "  heartbeat to the first srun's exit; the script, from that exit to its relaunch's \"launch:\" line;"
    echo "  of that, the time until its \"ftrain exited\" line (the copy of srun's standard error ending); then"
    echo "  from the \"launch:\" line to ftrain's start (srun and MPI start-up: the relaunch less the two"
    echo "  before).  Last, the supervisor's own time as it logs it (its \"relaunch after\" line: from seeing the"
    echo "  srun end to starting the next; the outside figure also holds the poll's up to 0.1 s, and is n/a"
    echo "  when the relaunch came within one poll)."
    echo
    relaunch_row "" "until" "" "" "start," "" "steps" "to" "" "of it," "srun," "its"
    relaunch_row "" "job end" "relaunch" "load" "1st" "total" "redone" "srun" "script" "stderr" "MPI" "own"
    relaunch_row "" "" "" "" "step" "" "" "exit" "" "copy" "start" "(log)"
    relaunch_kind kill "SIGKILL" --fault kill@22:1
    relaunch_kind stop "SIGSTOP, a hang" --fault stop@22:1 --hang-timeout 3
    relaunch_lab_release
    echo "  section 10 took $(elapsed "$section_start" "$(now)") s"
}

# ---- 5b. the Python binding beside torch.save / torch.load ------------------------

# The same raw state saved and loaded through python/ftrain_ckpt, beside
# torch.save/torch.load of the same tensors and the bare library calls
# (bench/py_ckpt.py; docs/python.md has a run's figures).
section_5_python_binding() {
    echo
    echo "== 5b. Python binding (python/ftrain_ckpt) beside torch.save / torch.load =="
    if [ ! -f "$SCRATCH/raw.bin" ] || ! have_torch; then
        echo "  skipped: ${TORCH_WHY:-no raw state}"
        return 0
    fi
    FTRAIN_CKPT_LIB="$BUILD/libftrain-ckpt.so.2" timeout 1800 "$PYTHON_BIN" "$SCRIPT_DIR/py_ckpt.py" \
        --raw "$SCRATCH/raw.bin" --repeat "$REPEAT" --dir "$SCRATCH" --ckpt-bench "$CKPT_BENCH" ||
        echo "  py_ckpt.py failed (exit $?)"
    # A PyTorch user's whole model: save_state / load_state beside
    # torch.save + fsync / torch.load + load_state_dict (bench/py_state.py).
    echo "  -- save_state / load_state of a model of $CKPT_MB MiB, then with Adam's state"
    for _ps_opt in "" --optimizer; do
        FTRAIN_CKPT_LIB="$BUILD/libftrain-ckpt.so.2" timeout 1800 "$PYTHON_BIN" "$SCRIPT_DIR/py_state.py" \
            --mb "$CKPT_MB" --repeat "$REPEAT" --dir "$SCRATCH" $_ps_opt ||
            echo "  py_state.py $_ps_opt failed (exit $?)"
    done
    # The node-local save's training stall from PyTorch (fc.LocalTier), in
    # the background and synchronous, 2 processes as nodes a and b
    # (bench/py_local.py; docs/benchmarks.md, the 5b row of the summary).
    echo "  -- LocalTier save of a model of $CKPT_MB MiB per rank, 2 emulated nodes: stall, sync against background"
    FTRAIN_CKPT_LIB="$BUILD/libftrain-ckpt.so.2" timeout 1800 "$PYTHON_BIN" "$SCRIPT_DIR/py_local.py" \
        --mb "$CKPT_MB" --saves "$REPEAT" ||
        echo "  py_local.py failed (exit $?)"
}

# ---- 11. the node-local tier ---------------------------------------------------------

# bench/local_tier.sh: local saves and their stall beside memcpy, dd and the
# shared tier; the partner copy beside MPI point to point (bench/p2p_bw);
# restores from each tier beside torch.load (docs/benchmarks.md).
section_11_local_tier() {
    echo
    echo "== 11. node-local tier (bench/local_tier.sh) =="
    BUILD="$BUILD" BENCH_CKPT_MB="$CKPT_MB" BENCH_REPEAT="$REPEAT" PYTHON="$PYTHON_BIN" \
        sh "$SCRIPT_DIR/local_tier.sh" || echo "  bench/local_tier.sh failed (exit $?)"
}

# ---- main ------------------------------------------------------------------------

main() {
    check_settings
    make_scratch
    print_header
    if want 1; then section_1_training; fi
    # Sections 3-5 use section 2's checkpoints and figures: section 2 runs
    # when any of them is wanted.
    check_checkpoint_space
    make_raw_state
    if [ "$CKPT_SPACE_OK" = 1 ] && (want 2 || want 3 || want 4 || want 5); then section_2_checkpoint_save; fi
    if [ "$CKPT_SPACE_OK" = 1 ] && want 3 && [ -d "$SCRATCH/c2/step-00000001" ]; then section_3_load_reshard; fi
    if [ "$CKPT_SPACE_OK" = 1 ] && want 4; then section_4_compression; fi
    if [ "$CKPT_SPACE_OK" = 1 ] && want 5; then section_5_torch_checkpoint; fi
    if [ "$CKPT_SPACE_OK" = 1 ] && want 5; then section_5_python_binding; fi
    rm -rf "$SCRATCH/c1" "$SCRATCH/c2" "$SCRATCH/raw.bin" "$SCRATCH/raw.bin.json"
    if want 6; then section_6_stop_path; fi
    if want 7; then section_7_gpu; fi
    if want 8; then section_8_convergence; fi
    if want 9; then section_9_hangs; fi
    if want 10; then section_10_relaunch; fi
    if want 11; then section_11_local_tier; fi
    echo
    echo "bench: done ($(uptime | sed 's/.*load average: /load average /'))"
    exit $status
}

main "$@"
