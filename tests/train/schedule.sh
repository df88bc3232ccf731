#!/bin/sh
# schedule.sh - the learning-rate schedule: the cosine schedule's rate is
# what the progress lines log; a cosine run resumed with another total
# number of steps is allowed and warned about (naming both totals), with the
# same total it is not, and neither is a constant schedule.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
LINE="--data line --global-batch 32 --micro-batch 8 --lr 0.01"

# ---- the cosine schedule's rate is logged ------------------------------
mpi 1 $LINE --schedule cosine --lr 0.1 --steps 6 --log-every 1 >"$T/cos.out" 2>&1
rates=$(sed -n 's/^epoch .* lr \([0-9.e+-]*\) .*/\1/p' "$T/cos.out" | tr '\n' ' ')
is "$rates" "1.00e-01 9.33e-02 7.50e-02 5.00e-02 2.50e-02 6.70e-03 " \
    "cosine over 6 steps: the logged rates follow the schedule"

# ---- a cosine schedule resumed with another total --------------------------
d="$T/cos"
COS="--data line --layers 8 --schedule cosine --lr 0.1"
mpi 1 $COS --steps 4 --run-dir "$d" >"$d.out" 2>&1
mpi 1 $COS --steps 4 --run-dir "$d" >"$T/cos-same.out" 2>"$T/cos-same.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && ! grep -q 'warning' "$T/cos-same.err"; echo $?)" \
    "cosine, resumed with the same total: no warning" || why "$(cat "$T/cos-same.err")"
mpi 1 $COS --steps 40 --run-dir "$d" >"$T/cos-long.out" 2>"$T/cos-long.err"
rc=$?
is "$rc" 0 "cosine, resumed with --steps 40 after 4: allowed"
like "$(cat "$T/cos-long.err")" "warning: resume: this run has 40 steps in all, the checkpoint's run had 4; the cosine learning-rate schedule" \
    "  and warned about, naming both totals" || why "$(cat "$T/cos-long.err")"
d="$T/const"
mpi 1 --data line --layers 8 --steps 4 --run-dir "$d" >"$d.out" 2>&1
mpi 1 --data line --layers 8 --steps 8 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
ok "$([ "$rc" -eq 0 ] && ! grep -q 'warning' "$d.reserr"; echo $?)" \
    "constant schedule, resumed with another total: no warning" || why "$(cat "$d.reserr")"

done_testing
