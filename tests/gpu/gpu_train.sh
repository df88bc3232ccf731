#!/bin/sh
# gpu_train.sh - the GPU path end to end (issue: GPU path).
#
# Without a GPU: --device cuda is refused with the reason and exit 1, and
# --device auto falls back to the CPU and says why; the GPU training checks
# are skipped with the reason.  With a GPU: a 1-GPU Fashion-MNIST run reaches
# the accuracy bar, deterministic param_hash is the same on 1 and 2 ranks
# sharing the GPU(s), and a GPU checkpoint resumes on the CPU and back with
# the state bit-identical (ckptctl diff).
. "$(dirname "$0")/../lib.sh"
need_mpi

"$FTRAIN" --version >"$T/version" 2>&1
ok $? "--version runs"
like "$(cat "$T/version")" "CUDA" "--version says whether CUDA is built in"

"$FTRAIN" --device bogus --data line --steps 1 >"$T/o" 2>"$T/e"
is "$?" 2 "--device bogus: exit 2"
like "$(cat "$T/e")" "--device" "--device bogus: the message names the option"

"$FTRAIN" --data line --layers 8 --steps 2 >"$T/auto" 2>&1
ok $? "--device auto runs"
like "$(grep '^device:' "$T/auto")" "^device: (cpu|cuda): " "--device auto says what it chose and why"

if grep -q '^device: cuda' "$T/auto"; then
    have_gpu=1
else
    have_gpu=0
    "$FTRAIN" --device cuda --data line --steps 2 >"$T/o" 2>"$T/e"
    is "$?" 1 "--device cuda without a GPU: exit 1"
    like "$(cat "$T/e")" "(no GPU|built without CUDA)" "--device cuda without a GPU: says why"
    mpi 2 --device cuda --data line --steps 2 >"$T/o" 2>"$T/e"
    ok "$([ $? -ne 0 ]; echo $?)" "--device cuda on 2 ranks without a GPU: both fail, no hang"
fi

if [ "$have_gpu" = 0 ]; then
    reason="no GPU: $(sed -n 's/^device: cpu: //p' "$T/auto")"
    skip "1-GPU Fashion-MNIST accuracy" "$reason"
    skip "deterministic param_hash equal on 1 and 2 ranks on GPUs" "$reason"
    skip "GPU checkpoint resumes on the CPU and back bit-identically" "$reason"
    skip "GPU: SIGUSR1 mid-run stops with exit 75 and a checkpoint that verifies" "$reason"
    skip "GPU deterministic: stopped and resumed = uninterrupted" "$reason"
    skip "a 1-GPU checkpoint resumes on 2 CPU ranks" "$reason"
    skip "a 3-rank CPU checkpoint resumes on 1 GPU" "$reason"
    skip "GPU: an asynchronous checkpoint (downloaded into its snapshot) equals the synchronous one" "$reason"
    skip "GPU: a rank stalled in a save ends the job with exit 76 within seconds (watchdog, ncclCommAbort)" "$reason"
    done_testing
    exit $?
fi

# 1. Accuracy on one GPU (the CPU path's bar).
mpi 1 --device cuda --epochs 15 --log-every 100000 >"$T/acc" 2>&1
acc=$(sed -n 's/^done: .*test_acc=\([0-9.]*\).*/\1/p' "$T/acc")
ok "$(python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.883 else 1)"; echo $?)" \
    "1-GPU Fashion-MNIST 784-256-128-10 Adam 15 epochs: test_acc $acc >= 0.883"

# 2. Deterministic mode on GPUs: the same bits on 1 and 2 ranks (NCCL needs
# a GPU for each rank: two GPUs).
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -ge 2 ]; then
    D="--device cuda --deterministic --steps 60 --quiet"
    mpi 1 $D >"$T/d1" 2>&1
    mpi 2 $D >"$T/d2" 2>&1
    h1=$(hash_of "$T/d1"); h2=$(hash_of "$T/d2")
    ok "$([ -n "$h1" ] && [ "$h1" = "$h2" ]; echo $?)" "deterministic GPU param_hash 1 rank = 2 ranks ($h1 $h2)"
else
    skip "deterministic param_hash equal on 1 and 2 ranks on GPUs" "${ngpu:-0} GPU(s): 2 ranks need 2"
fi

# 3. GPU -> CPU -> GPU: a checkpoint written on the GPU is loaded on the CPU
# and saved again at once (--resume DIR into another run directory, no step
# to train), then the same from the CPU to the GPU: the tensors must be
# bit-identical each time (ckptctl diff exits 0 only when identical).
R="$T/x"
L="--data line --layers 16 --steps 40 --quiet"
mpi 1 --device cuda $L --run-dir "$R/gpu" >/dev/null 2>&1
mpi 1 --device cpu $L --resume "$R/gpu/ckpt/step-00000040" --run-dir "$R/cpu" >"$T/c" 2>&1
"$BUILD/ckptctl" diff "$R/gpu/ckpt/step-00000040" "$R/cpu/ckpt/step-00000040" >"$T/diff1" 2>&1
ok $? "a GPU checkpoint loaded and saved on the CPU is bit-identical"
mpi 1 --device cuda $L --resume "$R/cpu/ckpt/step-00000040" --run-dir "$R/gpu2" >"$T/g" 2>&1
"$BUILD/ckptctl" diff "$R/cpu/ckpt/step-00000040" "$R/gpu2/ckpt/step-00000040" >"$T/diff2" 2>&1
ok $? "a CPU checkpoint loaded and saved on the GPU is bit-identical"

# 4. The stop path on the GPU, deterministic: SIGUSR1 mid-run gives exit 75
# and a checkpoint that verifies; resumed on the GPU, the run ends with the
# uninterrupted run's param_hash.
G="--device cuda --data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic --epochs 2"
mpi 1 $G --quiet >"$T/gref" 2>&1
GREF=$(hash_of "$T/gref")
D="$T/gstop"
mpi_bg 1 $G --log-every 1 --step-delay-ms 30 --run-dir "$D" >"$D.out" 2>"$D.err"
_steps() { [ "$(grep -c '^epoch [0-9]*/[0-9]* step ' "$1")" -ge "$2" ]; }
if wait_for 60 _steps "$D.out" 5; then
    kill -USR1 "$(rank_pid "$D.out" 0)"
else
    why "the GPU run did not reach step 5 in 60 s" "$(tail -n 5 "$D.out" "$D.err")"
fi
wait "$MPI_PID"
rc=$?
MPI_PID=
"$BUILD/ckptctl" verify "$D/ckpt" >"$T/gv" 2>&1
v=$?
ok "$([ "$rc" = 75 ] && [ "$v" = 0 ] && grep -q '^stop: signal USR1' "$D.out"; echo $?)" \
    "GPU: SIGUSR1 mid-run stops with exit 75 and a checkpoint that verifies ($(grep -o 'GPU copy [0-9.]* ms' "$D.out" | tail -n 1))" ||
    why "exit $rc, verify $v" "$(tail -n 5 "$D.out" "$D.err" "$T/gv")"
cp -a "$D" "$D.cpu"
mpi 1 $G --quiet --run-dir "$D" >"$D.res" 2>&1
ok "$([ -n "$GREF" ] && grep -q '^resume: ' "$D.res" && [ "$(hash_of "$D.res")" = "$GREF" ]; echo $?)" \
    "GPU deterministic: stopped, resumed on the GPU, same param_hash as uninterrupted ($GREF)" ||
    why "$(grep -E '^(resume|done)' "$D.res")"

# 5. World size 1 (GPU) -> 2 (CPU), and 3 (CPU) -> 1 (GPU).
mpi 2 --device cpu $(echo "$G" | sed 's/--device cuda//') --quiet --run-dir "$D.cpu" >"$T/g2c" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -q '^resume: .* world 1 -> 2' "$T/g2c" && [ -n "$(hash_of "$T/g2c")" ]; echo $?)" \
    "a 1-GPU checkpoint resumes on 2 CPU ranks to the end" || why "exit $rc" "$(tail -n 5 "$T/g2c")"
C="$T/c3"
mpi 3 --device cpu --data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01 --steps 20 --quiet --run-dir "$C" >"$T/c3.out" 2>&1
mpi 1 --device cuda --data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01 --steps 40 --quiet --run-dir "$C" >"$T/c2g" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -q '^resume: .* world 3 -> 1' "$T/c2g" && grep -q '^done: step=40 ' "$T/c2g"; echo $?)" \
    "a 3-rank CPU checkpoint resumes on 1 GPU to the end" || why "exit $rc" "$(tail -n 5 "$T/c3.out" "$T/c2g")"

# 6. --ckpt-async on the GPU downloads the state straight into the page-locked
# snapshot: its checkpoint must be the synchronous save's of the same step.
A="--device cuda --data line --layers 64,64 --steps 30 --ckpt-every 10 --ckpt-keep 5 --log-every 1000"
mpi 1 $A --ckpt-async --run-dir "$T/async" >"$T/async.out" 2>&1
ra=$?
mpi 1 $A --run-dir "$T/sync" >"$T/sync.out" 2>&1
rs=$?
"$BUILD/ckptctl" diff "$T/async/ckpt/step-00000010" "$T/sync/ckpt/step-00000010" >"$T/adiff" 2>&1
rd=$?
ok "$([ "$ra" = 0 ] && [ "$rs" = 0 ] && [ "$rd" = 0 ] && grep -q '^async checkpoints: [1-9]' "$T/async.out"; echo $?)" \
    "GPU: an asynchronous checkpoint (downloaded into its snapshot) equals the synchronous one" ||
    why "exit $ra/$rs" "$(tail -n 5 "$T/async.out" "$T/adiff")"
# 7. A hang on the GPU: the rank stalls in its second save's fsync (the
# stallio shim); the watchdog ends the job with exit 76 within its bound,
# aborting the NCCL communicator from its own thread on the way
# (comm_abort: ncclCommAbort), which must not wait on the GPU.
if ! have_shim stallio; then
    skip "GPU: a rank stalled in a save ends the job with exit 76 within seconds (watchdog, ncclCommAbort)" "$SHIM_WHY"
else
    h0=$(date +%s.%N)
    timeout -k 5 60 sh "$LAUNCH" mpirun --oversubscribe -n 1 -x LD_PRELOAD="$SHIM" -x STALLIO_RANK=0 \
        -x STALLIO_OP=fsync -x STALLIO_AFTER=1 -x STALLIO_SECONDS=120 \
        "$FTRAIN" --device cuda --data line --layers 16 --steps 60 --ckpt-every 5 \
        --hang-timeout 3 --run-dir "$T/hang" >"$T/hang.out" 2>"$T/hang.err"
    rc=$?
    took=$(awk -v a="$h0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    ok "$([ "$rc" = 76 ] && awk -v t="$took" 'BEGIN { exit !(t < 30) }' &&
        grep -q '^ftrain: hang: rank 0 .* checkpoint save' "$T/hang.err"; echo $?)" \
        "GPU: a rank stalled in a save ends the job with exit 76 within seconds (watchdog, ncclCommAbort; $took s)" ||
        why "exit $rc after $took s" "$(tail -n 5 "$T/hang.out" "$T/hang.err")"
fi
done_testing
