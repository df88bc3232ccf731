#!/bin/sh
# bench/run.sh - every benchmark of `make bench` in one go: ftrain's figures
# beside its peers (PyTorch, dd, zstd), with ratios.  See docs/benchmarks.md.
#
#   BUILD=build sh bench/run.sh
#
# Sections: 1 training throughput, 2 checkpoint save, 3 load and reshard,
# 4 compression ratio, 5 torch.save/torch.load, 6 stop path, 7 GPU (skipped
# with the reason when no GPU can be used).
#
# Settings (environment):
#   BUILD               build directory with ftrain and bench/ckpt_bench (build)
#   BENCH_SECTIONS      which sections to run ("1 2 3 4 5 6 7")
#   BENCH_STEPS         training steps for section 1 (400)
#   BENCH_REPEAT        runs per figure; the best is reported (3)
#   BENCH_PAIRS         back-to-back rounds (dd conv=fdatasync, 1 rank, 2
#                       ranks) for section 2's verdicts, judged by the median
#                       of the paired ratios (8; at least BENCH_REPEAT)
#   BENCH_CKPT_MB       checkpoint state size in MiB for sections 2-5 (1024)
#   BENCH_STOP_LAYERS   hidden layers of the section 6 MLP (chosen from
#                       BENCH_CKPT_MB: 8192,8192,2048 for 1024, about 1 GiB of
#                       parameters and Adam moments)
#   BENCH_MPI_YIELD     1 (default): Open MPI ranks yield the CPU while they
#                       wait (mpi_yield_when_idle), 0: they busy-poll
#   BENCH_DIR           scratch directory (default: a new one under $TMPDIR or
#                       /tmp, so that `make clean` cannot pull it away
#                       mid-run); deleted at the end
#   PYTHON              the interpreter with torch (/usr/bin/python3)
#
# A missing peer prints "peer unavailable: <why>" and the run goes on.  Exit
# status: 0 when every ftrain figure was measured, 1 when one failed.
set -u
BUILD=${BUILD:-build}
SECTIONS=${BENCH_SECTIONS:-"1 2 3 4 5 6 7"}
STEPS=${BENCH_STEPS:-400}
REPEAT=${BENCH_REPEAT:-3}
PAIRS=${BENCH_PAIRS:-8}
MB=${BENCH_CKPT_MB:-1024}
PY=${PYTHON:-/usr/bin/python3}
FTRAIN=$BUILD/ftrain
CB=$BUILD/bench/ckpt_bench
HERE=$(dirname "$0")
status=0

# One machine, as root: shared-memory transport, no binding, no network.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_mpi_yield_when_idle=${BENCH_MPI_YIELD:-1}

case $MB in
    '' | *[!0-9]*) echo "bench: BENCH_CKPT_MB must be a whole number of MiB, got '$MB'" >&2; exit 2 ;;
esac
[ "$MB" -ge 4 ] || { echo "bench: BENCH_CKPT_MB must be at least 4" >&2; exit 2; }
case $PAIRS in
    '' | *[!0-9]*) echo "bench: BENCH_PAIRS must be a whole number, got '$PAIRS'" >&2; exit 2 ;;
esac
for f in "$FTRAIN" "$CB"; do
    [ -x "$f" ] || { echo "bench: $f not built (make all $f)" >&2; exit 1; }
done

mkdir -p "$BUILD"
W=${BENCH_DIR:-}
if [ -z "$W" ]; then
    W=$(mktemp -d "${TMPDIR:-/tmp}/ftrain-bench.XXXXXX") || exit 1
else
    mkdir -p "$W" || exit 1
fi
BGPID=""
cleanup() {
    [ -n "$BGPID" ] && kill -9 "$BGPID" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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
# median V...: the median of numbers ("n/a" and "failed" left out), or "".
median() {
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
minof() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }
row() { printf '  %-46s %14s %14s %8s\n' "$@"; }
hdr() { echo; echo "== $* =="; }
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
fail() { echo "  FAILED: $*"; status=1; }

# The timing line of an ftrain run: "timing: S samples/s, gradient reduction
# G ms/step, stop/control reduction C ms/step".
timing_sps() { printf '%s\n' "$1" | sed -n 's/^timing: \([0-9.]*\) samples\/s.*/\1/p'; }
timing_red() { printf '%s\n' "$1" | sed -n 's/^timing: .*gradient reduction \([0-9.]*\) ms.*/\1/p'; }
timing_ctl() { printf '%s\n' "$1" | sed -n 's/^timing: .*control reduction \([0-9.]*\) ms.*/\1/p'; }

# ftrain_best N ARGS...: run ftrain on N ranks REPEAT times; sets BEST_SPS,
# BEST_RED, BEST_CTL from the fastest run and RUNS to the list of samples/s.
ftrain_best() {
    _n=$1
    shift
    BEST_SPS=""
    BEST_RED=""
    BEST_CTL=""
    RUNS=""
    _i=0
    while [ "$_i" -lt "$REPEAT" ]; do
        _i=$((_i + 1))
        if [ "$_n" = 1 ]; then
            _out=$(timeout 600 "$FTRAIN" "$@" 2>&1)
        else
            _out=$(timeout 600 mpirun -n "$_n" "$FTRAIN" "$@" 2>&1)
        fi
        _s=$(timing_sps "$_out")
        if [ -z "$_s" ]; then
            printf '%s\n' "$_out" | tail -5 | sed 's/^/    | /'
            continue
        fi
        RUNS="$RUNS $_s"
        if [ "$(maxof "$BEST_SPS" "$_s")" = "$_s" ]; then
            BEST_SPS=$_s
            BEST_RED=$(timing_red "$_out")
            BEST_CTL=$(timing_ctl "$_out")
        fi
    done
}

have_torch() {
    TORCH_WHY=""
    [ -x "$PY" ] || { TORCH_WHY="$PY not found (apt-get install python3-torch)"; return 1; }
    "$PY" -c 'import torch, numpy' 2>/dev/null ||
        { TORCH_WHY="$PY cannot import torch and numpy (apt-get install python3-torch)"; return 1; }
    return 0
}

# ---- header ------------------------------------------------------------------

echo "ftrain benchmarks - $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine: $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)),"\
"$(awk '/^MemTotal/ { printf " %.1f GiB memory", $2 / 1048576 }' /proc/meminfo),"\
" scratch $W on $(df -PT "$W" | awk 'NR == 2 { print $2 " (" $1 ")" }')"
echo "load: $(uptime | sed 's/.*load average: /load average /') (other processes share this machine)"
echo "ftrain: $("$FTRAIN" --version 2>&1 | head -1)"
if have_torch; then
    echo "torch: $("$PY" -c 'import torch; print(torch.__version__, "threads", torch.get_num_threads())' 2>&1)"
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

# ---- 1. training throughput -----------------------------------------------------

if want 1; then
    hdr "1. training throughput (trainer core): MLP 784-256-128-10 ReLU, Adam lr 1e-3, batch 128, Fashion-MNIST, $STEPS steps"
    echo "  samples/s over the training loop only (no data loading, no final evaluation)"
    # ftrain and PyTorch runs alternate, so both see the same background load.
    F1=""
    FRUNS=""
    T1=""
    TRUNS=""
    torch_ok=0
    if have_torch; then
        torch_ok=1
    else
        echo "  peer unavailable: $TORCH_WHY"
    fi
    _r=0
    while [ "$_r" -lt "$REPEAT" ]; do
        _r=$((_r + 1))
        _out=$(timeout 600 "$FTRAIN" --threads 2 --steps "$STEPS" --log-every 100000 2>&1)
        _s=$(timing_sps "$_out")
        if [ -n "$_s" ]; then
            FRUNS="$FRUNS $_s"
            F1=$(maxof "$F1" "$_s")
        else
            printf '%s\n' "$_out" | tail -5 | sed 's/^/    | /'
        fi
        [ "$torch_ok" = 1 ] || continue
        for policy in default passive; do
            if [ "$policy" = passive ]; then
                _out=$(OMP_WAIT_POLICY=passive timeout 900 "$PY" "$HERE/torch_mlp.py" --steps "$STEPS" --threads 2 2>&1)
            else
                _out=$(timeout 900 "$PY" "$HERE/torch_mlp.py" --steps "$STEPS" --threads 2 2>&1)
            fi
            _s=$(field torch_mlp: "$_out")
            if [ -z "$_s" ]; then
                echo "  peer unavailable: torch_mlp.py failed: $(printf '%s\n' "$_out" | tail -1)"
                torch_ok=0
                break
            fi
            TRUNS="$TRUNS $policy:$_s"
            T1=$(maxof "$T1" "$_s")
        done
    done
    [ -n "$F1" ] || fail "ftrain 1 rank x 2 threads gave no timing line"
    echo "  ftrain 1 rank x 2 threads runs:$FRUNS samples/s"
    [ -n "$TRUNS" ] && echo "  torch 1 process x 2 threads runs:$TRUNS samples/s"
    [ -n "$TRUNS" ] && echo "    (OMP_WAIT_POLICY unset and =passive, in turn with the ftrain runs; the best is used)"
    echo
    row "" "ftrain" "PyTorch" "ratio"
    row "samples/s, 1 rank x 2 threads" "${F1:-failed}" "${T1:-n/a}" "$(ratio "$F1" "$T1")"
    echo "  target: ftrain >= 1.50x PyTorch -> $(awk -v r="$(ratio "$F1" "$T1")" 'BEGIN { if (r == "n/a") print "not measured"; else if (r + 0 >= 1.5) print "met"; else print "NOT met" }')"

    ftrain_best 2 --threads 1 --steps "$STEPS" --log-every 100000
    F2=$BEST_SPS
    F2RED=$BEST_RED
    F2CTL=$BEST_CTL
    [ -n "$F2" ] || fail "ftrain 2 ranks x 1 thread gave no timing line"
    echo
    row "samples/s, 2 ranks x 1 thread (fast)" "${F2:-failed}" "" "$(ratio "$F2" "$F1") of 1x2"
    ftrain_best 2 --threads 1 --steps "$STEPS" --log-every 100000 --deterministic
    D2=$BEST_SPS
    [ -n "$D2" ] || fail "ftrain 2 ranks --deterministic gave no timing line"
    row "samples/s, 2 ranks x 1 thread (--deterministic)" "${D2:-failed}" "" "$(ratio "$D2" "$F2") of fast"
    echo
    echo "  per-step reduction cost at 2 ranks (ms/step, from the fastest run of each mode):"
    row "gradient reduction, fast (f32 allreduce)" "${F2RED:-n/a}" "" ""
    row "gradient reduction, --deterministic (i64)" "${BEST_RED:-n/a}" "" "$(ratio "$BEST_RED" "$F2RED") of fast"
    row "stop/control reduction (5 doubles, MAX), fast" "${F2CTL:-n/a}" "" ""
    row "stop/control reduction, --deterministic" "${BEST_CTL:-n/a}" "" ""
    echo "  (the reduction times include waiting for the slower rank)"
fi

# ---- 2-5. checkpoints ------------------------------------------------------------

need_mb=$((MB * 7 + 256))
free_mb=$(df -Pm "$W" | awk 'NR == 2 { print $4 }')
ckpt_ok=1
if want 2 || want 3 || want 4 || want 5; then
    if [ "${free_mb:-0}" -lt "$need_mb" ]; then
        hdr "2-5. checkpoints"
        echo "  skipped: $free_mb MiB free under $W, these sections need about $need_mb MiB (lower BENCH_CKPT_MB)"
        ckpt_ok=0
    fi
fi

S1=""
S2=""
STORED1=""
RAW=""
# save_once ROOT N [ENV...]: one save on N ranks into a fresh ROOT (after a
# sync, so that no earlier run's dirty pages are flushed inside this one);
# prints its MB/s, or nothing on failure; ckpt_bench's output is kept in
# ROOT.out.
save_once() {
    _root=$1
    _n=$2
    shift 2
    rm -rf "$_root"
    sync
    if [ "$_n" = 1 ]; then
        _out=$(env "$@" "$CB" save "$_root" "$MB" 2>&1)
    else
        _out=$(env "$@" timeout 600 mpirun -n "$_n" "$CB" save "$_root" "$MB" 2>&1)
    fi
    printf '%s\n' "$_out" >"$_root.out"
    _s=$(field mb_per_s "$_out")
    [ -n "$_s" ] || printf '%s\n' "$_out" | tail -3 | sed 's/^/    | /' >&2
    echo "$_s"
}
# dd_once FLAGS: one dd of the state's size with FLAGS, after a sync; MB/s.
dd_once() {
    rm -f "$W/dd.bin"
    sync
    _out=$(LC_ALL=C dd if=/dev/zero of="$W/dd.bin" bs=4M count="$((MB / 4))" "$@" 2>&1)
    rm -f "$W/dd.bin"
    # "N bytes (...) copied, T s, X MB/s": MB/s from bytes and seconds.
    printf '%s\n' "$_out" | awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "copied,") { printf "%.1f\n", $1 / $(i + 1) / 1e6; exit } }'
}

# The raw state for zstd (section 4) and PyTorch (section 5), made first so
# that torch.save can run inside section 2's rounds, beside ftrain's saves.
if [ "$ckpt_ok" = 1 ] && (want 4 || want 5); then
    rawout=$("$CB" raw "$W/raw.bin" "$MB" 2>&1) || { fail "ckpt_bench raw: $rawout"; }
fi
TORCH_IN_ROUNDS=0
if [ "$ckpt_ok" = 1 ] && want 5 && [ -f "$W/raw.bin" ] && have_torch; then
    TORCH_IN_ROUNDS=1
fi
TS="" TL="" TE="" TRS="" TRL="" TRE="" TWHY=""
# torch_once: one torch.save + fsync and torch.load (torch_ckpt.py); updates
# the best and the per-round lists; prints its save MB/s.
torch_once() {
    rm -f "$W/state.pt"
    sync
    _out=$(timeout 900 "$PY" "$HERE/torch_ckpt.py" "$W/raw.bin" "$W/state.pt" 1 2>&1)
    rm -f "$W/state.pt"
    _s=$(field save_mb_per_s "$_out")
    if [ -z "$_s" ] || [ "$(field verified "$_out")" != yes ]; then
        TWHY="torch_ckpt.py failed: $(printf '%s\n' "$_out" | tail -1)"
        return
    fi
    _l=$(field load_mb_per_s "$_out")
    _e=$(field into_mb_per_s "$_out")
    TRS="$TRS $_s" TRL="$TRL $_l" TRE="$TRE $_e"
    TS=$(maxof "$TS" "$_s") TL=$(maxof "$TL" "$_l") TE=$(maxof "$TE" "$_e")
}

if [ "$ckpt_ok" = 1 ] && (want 2 || want 3 || want 4 || want 5); then
    hdr "2. checkpoint save (ckpt): ${MB} MiB of float32 state, default options, until committed and fsync'd"
    echo "  state: 3 groups (parameters, Adam m, Adam v) x 4 [rows, 4096] matrices + 4 [4096] biases;"
    echo "  approximately Gaussian floats (sum of 4 uniforms): sigma 0.02 weights, 1e-4 moments, v = square"
    echo "  filesystem: $(df -PT "$W" | awk 'NR == 2 { print $2 }'), $free_mb MiB free before the run"
    echo "  $REPEAT rounds; each round runs every configuration once, in turn, so that all of them"
    echo "  see the same disk; a sync precedes each timed run; the best run of each is compared;"
    echo "  dd conv=fdatasync, 1 rank and 2 ranks run back to back in $PAIRS rounds in all (BENCH_PAIRS);"
    echo "  the targets are judged by the median of the paired per-round ratios"
    DD="" DDD="" S0="" SB="" R1S="" R21="" STORED1="" STORED2=""
    R1="" R2="" R0="" RB="" RD="" RDD=""
    _i=0
    while [ "$_i" -lt "$REPEAT" ]; do
        _i=$((_i + 1))
        d=$(dd_once conv=fdatasync)
        dd2=$(dd_once oflag=direct conv=fdatasync)
        s1=$(save_once "$W/c1" 1)
        s2=$(save_once "$W/c2" 2)
        s0=$(save_once "$W/c0" 1 BENCH_CKPT_LEVEL=0)
        sb=$(save_once "$W/cb" 1 BENCH_CKPT_DIRECT=0)
        [ "$TORCH_IN_ROUNDS" = 1 ] && torch_once
        RD="$RD ${d:-failed}" RDD="$RDD ${dd2:-failed}"
        R1="$R1 ${s1:-failed}" R2="$R2 ${s2:-failed}" R0="$R0 ${s0:-failed}" RB="$RB ${sb:-failed}"
        R1S="$R1S $(ratio "$s1" "$d")"
        R21="$R21 $(ratio "$s2" "$s1")"
        DD=$(maxof "$DD" "$d") DDD=$(maxof "$DDD" "$dd2")
        S1=$(maxof "$S1" "$s1") S2=$(maxof "$S2" "$s2") S0=$(maxof "$S0" "$s0") SB=$(maxof "$SB" "$sb")
    done
    # More pairs for both verdicts: the disk's run-to-run noise is larger
    # than the differences, so one pair decides nothing.  Each extra round
    # runs dd conv=fdatasync, 1 rank, 2 ranks and a second 1-rank save back
    # to back; the order reverses every other round, so that a drifting disk
    # favours none.  The second 1-rank save against the first (an A/A pair,
    # the same configuration twice, as adjacent as 2 ranks and 1 rank are)
    # measures what the disk's noise alone does to a ratio.
    RP1="" RP2="" RPD="" RAA="" R11=""
    _p=$_i
    while [ "$_p" -lt "$PAIRS" ]; do
        _p=$((_p + 1))
        if [ $((_p % 2)) = 1 ]; then
            s2=$(save_once "$W/c2" 2)
            s1=$(save_once "$W/c1" 1)
            s1b=$(save_once "$W/c1b" 1)
            d=$(dd_once conv=fdatasync)
        else
            d=$(dd_once conv=fdatasync)
            s1b=$(save_once "$W/c1b" 1)
            s1=$(save_once "$W/c1" 1)
            s2=$(save_once "$W/c2" 2)
        fi
        RP1="$RP1 ${s1:-failed}" RP2="$RP2 ${s2:-failed}" RPD="$RPD ${d:-failed}"
        RAA="$RAA ${s1b:-failed}"
        R11="$R11 $(ratio "$s1b" "$s1")"
        R21="$R21 $(ratio "$s2" "$s1")"
        R1S="$R1S $(ratio "$s1" "$d")"
        DD=$(maxof "$DD" "$d") S1=$(maxof "$S1" "$s1") S2=$(maxof "$S2" "$s2")
    done
    RAW=$(field raw_bytes "$(cat "$W/c1.out")")
    STORED1=$(field stored_bytes "$(cat "$W/c1.out")")
    STORED2=$(field stored_bytes "$(cat "$W/c2.out")")
    rm -rf "$W/c0" "$W/cb" "$W/c1b"
    echo "  runs, MB/s:"
    echo "    dd if=/dev/zero bs=4M conv=fdatasync (page cache, then flush):$RD"
    echo "    dd if=/dev/zero bs=4M oflag=direct conv=fdatasync:           $RDD"
    echo "    ckpt 1 rank (default: level 1, O_DIRECT):                    $R1"
    echo "    ckpt 2 ranks:                                                $R2"
    echo "    ckpt 1 rank, level 0 (stored frames, no zstd):               $R0"
    echo "    ckpt 1 rank, buffered (--ckpt-buffered: page cache, then fsync):$RB"
    [ -n "$TRS" ] && echo "    torch.save + fsync (section 5's peer):                       $TRS"
    [ -n "$RPD" ] && echo "    more rounds, dd conv=fdatasync:                              $RPD"
    [ -n "$RP1" ] && echo "    more rounds, ckpt 1 rank:                                    $RP1"
    [ -n "$RP2" ] && echo "    more rounds, ckpt 2 ranks:                                   $RP2"
    [ -n "$RAA" ] && echo "    more rounds, ckpt 1 rank again (A/A):                        $RAA"
    echo "    ckpt 1 rank / dd conv=fdatasync, per round:                  $R1S"
    echo "    ckpt 2 ranks / 1 rank, per pair:                             $R21"
    [ -n "$R11" ] && echo "    ckpt 1 rank again / 1 rank (A/A), per pair:                  $R11"
    # The median of the paired per-round ratios: each pair ran back to back
    # on the same disk, so it is not swayed by one lucky round as a
    # best-against-best comparison is.
    M21=$(median $R21)
    M1D=$(median $R1S)
    # The disk's noise on a paired ratio: the median of |1 - r| over the
    # A/A pairs.  "Not slower" then means: the median 2-rank/1-rank ratio
    # is no further below 1 than two runs of one configuration typically
    # are from each other.
    NAA=$(printf '%s
' $R11 | grep -E '^[0-9.]+$' | awk '{ d = $1 - 1; if (d < 0) d = -d; print d }')
    D11=$(median $NAA)
    # How the pairs went: how many, in how many 2 ranks were slower, the range.
    P21=$(printf '%s\n' $R21 | grep -v 'n/a' | sort -n | awk '{ v[NR] = $1; if ($1 + 0 < 1) k++ } END { if (NR) printf "%d pairs, 2 ranks slower in %d, ratios %.2f..%.2f\n", NR, k, v[1], v[NR] }')
    [ -n "$S1" ] || fail "ckpt_bench save on 1 rank"
    [ -n "$S2" ] || fail "ckpt_bench save on 2 ranks"
    [ -n "$S0" ] || fail "ckpt_bench save level 0 on 1 rank"
    [ -n "$SB" ] || fail "ckpt_bench save buffered on 1 rank"
    [ -n "$DD" ] || echo "  peer unavailable: dd failed"
    echo
    row "" "ckpt_save" "dd" "ratio"
    row "MB/s (raw state), 1 rank" "${S1:-failed}" "${DD:-n/a}" "$(ratio "$S1" "$DD")"
    row "MB/s (raw state), 2 ranks" "${S2:-failed}" "${DD:-n/a}" "$(ratio "$S2" "$DD")"
    row "MB/s, 1 rank, level 0 (stored)" "${S0:-failed}" "${DD:-n/a}" "$(ratio "$S0" "$DD")"
    row "MB/s, 1 rank, buffered" "${SB:-failed}" "${DD:-n/a}" "$(ratio "$SB" "$DD")"
    row "MB/s, 1 rank, vs dd oflag=direct" "${S1:-failed}" "${DDD:-n/a}" "$(ratio "$S1" "$DDD")"
    # 1 rank against dd: judged, like 2 ranks against 1, by the median of
    # the back-to-back pairs (one lucky dd or save does not decide); the
    # best-against-best ratio is printed beside it.
    N1D=$(printf '%s\n' $R1S | grep -cE '^[0-9.]+$')
    echo "  target: 1 rank >= 0.85 of dd conv=fdatasync (median of $N1D paired ratios ${M1D:-n/a};" \
        "best against best $(ratio "$S1" "$DD")) -> $(awk -v m="${M1D:-}" 'BEGIN { if (m == "") print "not measured"; else if (m + 0 >= 0.85) print "met"; else print "NOT met" }');" \
        "2 ranks not slower than 1 (median of the paired ratios ${M21:-n/a}; ${P21:-no pairs})" \
        "-> strictly (median >= 1.00): $(awk -v m="${M21:-}" 'BEGIN { if (m == "") print "not measured"; else if (m + 0 >= 1) print "met"; else print "NOT met" }');" \
        "within the disk's noise (median >= 1 - ${D11:-n/a}, the median |1 - r| of the A/A pairs): $(awk -v m="${M21:-}" -v d="${D11:-}" 'BEGIN { if (m == "" || d == "") print "not measured"; else if (m + 0 >= 1 - d) print "met"; else print "NOT met" }')"
    # How close each save came to the device: stored bytes per second over
    # dd oflag=direct's rate (1.00 = the disk is the limit).
    u1=$(awk -v s="${S1:-}" -v st="${STORED1:-}" -v r="${RAW:-}" -v d="${DDD:-}" 'BEGIN { if (s == "" || st == "" || r + 0 == 0 || d + 0 == 0) print "n/a"; else printf "%.2f\n", s * st / r / d }')
    u2=$(awk -v s="${S2:-}" -v st="${STORED2:-}" -v r="${RAW:-}" -v d="${DDD:-}" 'BEGIN { if (s == "" || st == "" || r + 0 == 0 || d + 0 == 0) print "n/a"; else printf "%.2f\n", s * st / r / d }')
    echo "  stored bytes/s over dd oflag=direct's rate (1.00: the disk is the limit): 1 rank $u1, 2 ranks $u2"
    echo "  (MB = 10^6 bytes of raw state; the checkpoint writes fewer bytes than that: it is compressed)"
    echo "  level 0 keeps checksums and the seek table but skips zstd: for storage faster than the cores"
fi

L1=""
LE=""
if [ "$ckpt_ok" = 1 ] && want 3 && [ -d "$W/c2/step-00000001" ]; then
    hdr "3. load and reshard N -> M: M readers each read their 1/M byte range (ckpt_read_range), page cache warm"
    row "saved by N -> read by M" "MB/s" "seconds" "checked"
    for spec in "1 1" "1 2" "2 1" "2 2" "2 3"; do
        set -- $spec
        # Saves bypass the page cache (O_DIRECT): read the files once, untimed,
        # so that this measures decoding, as torch.load's figure does.
        cat "$W/c$1"/step-00000001/* >/dev/null 2>&1
        best=""
        bestsec=""
        chk=""
        _i=0
        while [ "$_i" -lt "$REPEAT" ]; do
            _i=$((_i + 1))
            if [ "$2" = 1 ]; then
                _out=$("$CB" load "$W/c$1/step-00000001" 2>&1)
            else
                _out=$(timeout 600 mpirun -n "$2" "$CB" load "$W/c$1/step-00000001" 2>&1)
            fi
            _s=$(field mb_per_s "$_out")
            [ -n "$_s" ] || { printf '%s\n' "$_out" | tail -3 | sed 's/^/    | /'; continue; }
            chk=$(field verified "$_out")
            if [ "$(maxof "$best" "$_s")" = "$_s" ]; then
                best=$_s
                bestsec=$(field seconds "$_out")
            fi
        done
        [ -n "$best" ] || fail "ckpt_bench load $1 -> $2"
        [ "$chk" = yes ] || [ -z "$best" ] || fail "ckpt_bench load $1 -> $2: bytes differ from the saved state"
        row "$1 -> $2" "${best:-failed}" "${bestsec:-}" "${chk:-}"
        [ "$1 $2" = "1 1" ] && L1=$best
    done
    echo "  (seconds: from a barrier to every reader holding its range, ckpt_open included;"
    echo "   checked: each reader compared its bytes with the generator afterwards, untimed)"
    # A resume reads into tensors that exist: the same 1 -> 1 load into
    # memory allocated and touched before the timer.
    cat "$W/c1"/step-00000001/* >/dev/null 2>&1
    LE=""
    LERUNS=""
    _i=0
    while [ "$_i" -lt "$REPEAT" ]; do
        _i=$((_i + 1))
        _out=$(BENCH_LOAD_INTO=existing "$CB" load "$W/c1/step-00000001" 2>&1)
        _s=$(field mb_per_s "$_out")
        [ -n "$_s" ] && [ "$(field verified "$_out")" = yes ] || {
            printf '%s\n' "$_out" | tail -3 | sed 's/^/    | /'
            continue
        }
        LERUNS="$LERUNS $_s"
        LE=$(maxof "$LE" "$_s")
    done
    [ -n "$LE" ] || fail "ckpt_bench load 1 -> 1 into existing memory"
    row "1 -> 1, into existing memory (a resume)" "${LE:-failed}" "" ""
    echo "   (runs:$LERUNS MB/s; the destination was allocated and touched before the timer,"
    echo "   as a resume reads into the model's and optimizer's tensors)"
fi

if [ "$ckpt_ok" = 1 ] && want 4; then
    hdr "4. compression ratio (raw bytes / stored bytes) of the same state"
    ZR=""
    if command -v zstd >/dev/null 2>&1 && [ -f "$W/raw.bin" ]; then
        t0=$(now)
        zbytes=$(zstd -1 -q -c "$W/raw.bin" | wc -c)
        zt=$(elapsed "$t0" "$(now)")
        ZR=$(ratio "$RAW" "$zbytes")
        echo "  zstd -1 -c (one thread) of the raw bytes: $zbytes bytes in $zt s"
    else
        echo "  peer unavailable: zstd not installed or no raw file"
    fi
    # The compressor's own ratio: a save with adapt off (every frame
    # compressed); the default saves store frames while the disk is faster
    # than the encoders, so their size depends on the disk of the moment.
    save_once "$W/cz" 1 BENCH_CKPT_ADAPT=0 >/dev/null
    STOREDZ=$(field stored_bytes "$(cat "$W/cz.out" 2>/dev/null)")
    rm -rf "$W/cz"
    [ -n "$STOREDZ" ] || fail "ckpt_bench save with BENCH_CKPT_ADAPT=0"
    echo "  ftrain checkpoint, every frame compressed (adapt off): ${STOREDZ:-failed} bytes in shard files"
    [ -n "$STORED1" ] && echo "  (the default, adaptive saves of section 2 wrote $STORED1 bytes (1 rank) and ${STORED2:-n/a} (2 ranks))"
    row "" "ckpt" "zstd -1" "ratio"
    row "raw / stored" "$(ratio "$RAW" "$STOREDZ")" "${ZR:-n/a}" "$(ratio "$(ratio "$RAW" "$STOREDZ")" "$ZR")"
    echo "  (ckpt: zstd level 1 after a 4-byte shuffle, 4 MiB frames; float mantissas are"
    echo "   random, so only sign/exponent bytes compress)"
fi

if [ "$ckpt_ok" = 1 ] && want 5; then
    hdr "5. the same tensors through torch.save / torch.load (file + directory fsync'd; load from page cache)"
    if [ "$TORCH_IN_ROUNDS" != 1 ]; then
        echo "  peer unavailable: ${TORCH_WHY:-no raw file}"
    elif [ -z "$TS" ]; then
        echo "  peer unavailable: $TWHY"
    else
        echo "  torch_ckpt.py ran once in each round of section 2, after ftrain's saves, on the same disk"
        echo "  torch runs, MB/s: save$TRS; load$TRL; load into existing tensors$TRE (values equal: yes)"
    fi
    row "" "ftrain ckpt" "torch" "ratio"
    row "save MB/s, 1 process" "${S1:-n/a}" "${TS:-n/a}" "$(ratio "$S1" "$TS")"
    row "load MB/s, 1 process (1 -> 1)" "${L1:-n/a}" "${TL:-n/a}" "$(ratio "$L1" "$TL")"
    row "resume MB/s: into existing tensors" "${LE:-n/a}" "${TE:-n/a}" "$(ratio "$LE" "$TE")"
    echo "  (best runs; load: into fresh memory, as torch.load; resume: ckpt_read_range into"
    echo "   memory that exists, against torch.load + copy_ into existing tensors, as"
    echo "   load_state_dict does)"
fi
rm -rf "$W/c1" "$W/c2" "$W/raw.bin" "$W/raw.bin.json"

# ---- 6. stop path ------------------------------------------------------------------

if want 6; then
    if [ -n "${BENCH_STOP_LAYERS:-}" ]; then
        LAYERS=$BENCH_STOP_LAYERS
    elif [ "$MB" -ge 1024 ]; then
        LAYERS=8192,8192,2048
    else
        # Two equal hidden layers: 12 bytes (parameter + Adam m + v) each.
        LAYERS=$(awk -v mb="$MB" 'BEGIN { w = int(sqrt(mb * 1048576 / 12)); if (w < 16) w = 16; print w "," w }')
    fi
    hdr "6. stop path (signals): 2 ranks, MLP 784-${LAYERS}-10, Adam, batch 32, --run-dir"
    echo "  SIGUSR1 to rank 1 after its first logged step; wall time from kill to mpirun's exit;"
    echo "  then resume on 2 ranks (the resume: line) and stop again (SIGUSR1 to rank 0)"
    R=$W/stop
    # stop_run LOG SIGRANK: start 2 ranks in the background, wait for a
    # logged step, signal rank SIGRANK, wait for the exit.  Sets KILL_EXIT
    # (seconds from kill to exit), EXIT_RC.
    stop_run() {
        : >"$1"
        timeout 600 mpirun -n 2 "$FTRAIN" --layers "$LAYERS" --global-batch 32 --steps 100000 \
            --log-every 1 --run-dir "$R" >"$1" 2>&1 &
        BGPID=$!
        KILL_EXIT=""
        EXIT_RC=""
        _w=0
        while [ "$_w" -lt 3000 ] && ! grep -q '^epoch .* step ' "$1"; do
            kill -0 "$BGPID" 2>/dev/null || break
            sleep 0.1
            _w=$((_w + 1))
        done
        _pid=$(sed -n "s/^world: rank $2 .* pid \([0-9]*\).*/\1/p" "$1" | head -1)
        if [ -z "$_pid" ] || ! grep -q '^epoch .* step ' "$1"; then
            kill -9 "$BGPID" 2>/dev/null
            wait "$BGPID" 2>/dev/null
            BGPID=""
            return 1
        fi
        t0=$(now)
        kill -USR1 "$_pid"
        wait "$BGPID"
        EXIT_RC=$?
        KILL_EXIT=$(elapsed "$t0" "$(now)")
        BGPID=""
        return 0
    }
    t6=$(now)
    if stop_run "$W/stop1.log" 1; then
        echo "  run 1: exit $EXIT_RC, $KILL_EXIT s from kill to exit"
        grep -E '^(train|checkpoint|stop):' "$W/stop1.log" | sed 's/^/    /'
    else
        fail "stop run 1 did not start training"
        sed 's/^/    | /' "$W/stop1.log" | tail -8
    fi
    if [ "$EXIT_RC" = 75 ] && stop_run "$W/stop2.log" 0; then
        echo "  run 2 (resumed): exit $EXIT_RC, $KILL_EXIT s from kill to exit"
        grep -E '^(resume|checkpoint|stop):' "$W/stop2.log" | sed 's/^/    /'
    elif [ "$EXIT_RC" = 75 ]; then
        fail "resume run did not start training"
        sed 's/^/    | /' "$W/stop2.log" | tail -8
    fi
    echo "  section 6 took $(elapsed "$t6" "$(now)") s; the stop waits for the step in flight to finish;"
    lvl=$("$FTRAIN" --help 2>/dev/null | sed -n 's/.*--ckpt-level N.*(default \([0-9]*\)).*/\1/p')
    echo "  ftrain's checkpoints here use its --ckpt-level default (zstd level ${lvl:-unknown})"
    rm -rf "$R"

    # Async saves of the same state: the training stall per save (the
    # snapshot copy plus the commit at a step boundary) beside the
    # synchronous save time of the same run's checkpoints.
    echo
    echo "  async saves: the same model, 2 ranks, --ckpt-every 10 --ckpt-async, 40 steps"
    timeout 900 mpirun -n 2 "$FTRAIN" --layers "$LAYERS" --global-batch 32 --steps 40 \
        --log-every 1000 --run-dir "$W/async" --ckpt-every 10 --ckpt-async >"$W/async.log" 2>&1
    grep -E '^(checkpoint|async checkpoints):' "$W/async.log" | sed 's/^/    /'
    st=$(sed -n 's/^async checkpoints: .*mean training stall \([0-9.]*\) ms per save/\1/p' "$W/async.log")
    sy=$(sed -n 's/^checkpoint: .* committed in \([0-9.]*\) s.*/\1/p' "$W/async.log" | tail -1)
    [ -n "$st" ] && [ -n "$sy" ] &&
        echo "  training stall per async save: $st ms; the final synchronous save: $sy s ($(awk -v a="$st" -v b="$sy" 'BEGIN { printf "%.2f", a / 1000 / b }') of it)"
    rm -rf "$W/async"
fi

# ---- 7. GPU -------------------------------------------------------------------

if want 7; then
    hdr "7. GPU: samples/s on one GPU beside PyTorch on the same GPU, NCCL allreduce, checkpoint stall"
    _out=$(timeout 120 "$FTRAIN" --device cuda --data line --steps 1 --quiet 2>&1)
    if [ $? -ne 0 ]; then
        echo "  skipped: $(printf '%s\n' "$_out" | grep -v '^$' | tail -1)"
    else
        NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
        echo "  GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1); ${NGPU:-?} visible"
        gtorch=0
        if have_torch && "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
            gtorch=1
        else
            echo "  peer unavailable: ${TORCH_WHY:-torch sees no GPU}"
        fi
        echo "  samples/s over the training loop (Fashion-MNIST, Adam); the best of $REPEAT runs each;"
        echo "  PyTorch keeps data and model on the GPU and runs 3 untimed warm-up steps"
        echo
        row "" "ftrain" "PyTorch" "ratio"
        # global batch, micro-batch, hidden layers, steps
        for cfg in "128 16 256,128 2000" "128 128 256,128 2000" "4096 4096 4096,4096 300"; do
            set -- $cfg
            gb=$1 mb=$2 gl=$3 gs=$4
            ftrain_best 1 --device cuda --global-batch "$gb" --micro-batch "$mb" --layers "$gl" \
                --steps "$gs" --log-every 1000000
            GF=$BEST_SPS
            [ -n "$GF" ] || fail "ftrain --device cuda (batch $gb, layers $gl) gave no timing line"
            GT=""
            if [ "$gtorch" = 1 ]; then
                _i=0
                while [ "$_i" -lt "$REPEAT" ]; do
                    _i=$((_i + 1))
                    _o=$(timeout 600 "$PY" "$HERE/torch_mlp.py" --device cuda --batch "$gb" --layers "$gl" --steps "$gs" 2>&1)
                    _s=$(field torch_mlp: "$_o")
                    [ -n "$_s" ] || { echo "    | torch: $(printf '%s\n' "$_o" | tail -1)"; break; }
                    GT=$(maxof "$GT" "$_s")
                done
            fi
            row "batch $gb, micro-batch $mb, layers $gl" "${GF:-failed}" "${GT:-n/a}" "$(ratio "$GF" "$GT")"
        done
        ftrain_best 1 --device cuda --global-batch 128 --micro-batch 128 --steps 2000 --log-every 1000000 --deterministic
        row "batch 128, micro-batch 128, --deterministic" "${BEST_SPS:-failed}" "" ""

        echo
        if [ "${NGPU:-0}" -ge 2 ]; then
            _o=$(timeout 600 mpirun -n "$NGPU" "$FTRAIN" --device cuda --data line --layers 8192,8192,2048 \
                --global-batch $((NGPU * 8)) --micro-batch 8 --steps 30 --log-every 1000000 2>&1)
            _p=$(printf '%s\n' "$_o" | sed -n 's/^train: .*, \([0-9]*\) parameters,.*/\1/p')
            _g=$(timing_red "$_o")
            if [ -n "$_p" ] && [ -n "$_g" ]; then
                echo "  NCCL allreduce of the f32 gradient ($_p parameters) on $NGPU GPUs: $_g ms/step," \
                    "bus bandwidth $(awk -v p="$_p" -v g="$_g" -v n="$NGPU" 'BEGIN { printf "%.1f", p * 4 * 2 * (n - 1) / n / (g / 1000) / 1e9 }') GB/s"
                echo "  (2(n-1)/n x bytes / time, as nccl-tests report it; the time includes waiting for the slower rank)"
            else
                fail "the $NGPU-GPU allreduce run gave no timing"
                printf '%s\n' "$_o" | tail -5 | sed 's/^/    | /'
            fi
        else
            echo "  NCCL allreduce bus bandwidth: not measured: it needs 2 GPUs, ${NGPU:-0} visible"
        fi

        echo
        echo "  checkpoint stall on the GPU: layers 8192,8192,2048 (about 1.08 GB of parameters and Adam"
        echo "  moments), 1 rank, 40 steps, --ckpt-every 10 --ckpt-async, then the final synchronous save"
        timeout 900 "$FTRAIN" --device cuda --layers 8192,8192,2048 --global-batch 128 --micro-batch 128 --steps 40 \
            --log-every 1000 --run-dir "$W/gstall" --ckpt-every 10 --ckpt-async >"$W/gstall.log" 2>&1 ||
            fail "the GPU checkpoint run failed: $(tail -1 "$W/gstall.log")"
        grep -E '^(train|checkpoint|async checkpoints):' "$W/gstall.log" | sed 's/^/    /'
        _p=$(sed -n 's/^train: .*, \([0-9]*\) parameters,.*/\1/p' "$W/gstall.log")
        _c=$(sed -n 's/^checkpoint: .* committed in .*(GPU copy \([0-9.]*\) ms).*/\1/p' "$W/gstall.log" | tail -1)
        if [ -n "$_p" ] && [ -n "$_c" ]; then
            echo "  device -> pinned host copy of the state ($(awk -v p="$_p" 'BEGIN { printf "%.2f", p * 12 / 1e9 }') GB):" \
                "$_c ms, $(awk -v p="$_p" -v c="$_c" 'BEGIN { printf "%.1f", p * 12 / (c / 1000) / 1e9 }') GB/s"
        fi
        rm -rf "$W/gstall"
    fi
fi

echo
echo "bench: done ($(uptime | sed 's/.*load average: /load average /'))"
exit $status
