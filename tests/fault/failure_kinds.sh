#!/bin/sh
# failure_kinds.sh - a failure of the training loop leaves a failure record
# (docs/failure-records.md) whose kind says what failed, so that the
# supervisor decides from it: data that cannot be read is bad_data, a
# diverged run nan, another architecture resume_refused; each with exit 1
# and its message, and the record's message is the one printed.  A run
# that ends well leaves no record.  A peer whose process is gone (SIGKILL,
# and a launcher that keeps the others running) is named in peer_lost
# records: at once by its neighbours in the liveness ring, or, with
# --no-liveness, by the ranks that waited for it past the hang limit; a
# stopped one (SIGSTOP: alive) in hang records.
. "$(dirname "$0")/../lib.sh"
need_mpi
plan 14

# kind_of DIR: the kind of the one record under DIR/failures ("" if none,
# "many" if more than one).
kind_of() {
    set -- "$1"/failures/*.json
    [ -f "$1" ] || { echo ""; return; }
    [ $# -eq 1 ] || { echo many; return; }
    sed -n 's/.*"kind":"\([a-z_]*\)".*/\1/p' "$1"
}
message_of() { sed -n 's/.*"message":"\(.*\)"}$/\1/p' "$1"/failures/*.json; }

run "$FTRAIN" --device cpu --data fashion-mnist --data-dir "$T/nodata" --steps 2 --run-dir "$T/data"
is "$rc $(kind_of "$T/data")" "1 bad_data" "data that cannot be read: exit 1, a bad_data record" ||
    why "$(cat "$T/err")" "$(cat "$T"/data/failures/*.json 2>/dev/null)"
like "$(message_of "$T/data")" "nodata/train-images-idx3-ubyte.gz: cannot open" "  its message names the file"

run "$FTRAIN" --device cpu --data line --layers 8 --optimizer sgd --lr 1000 --steps 200 --run-dir "$T/div"
is "$rc $(kind_of "$T/div")" "1 nan" "a diverged run: exit 1, a nan record" ||
    why "$(cat "$T/err")" "$(cat "$T"/div/failures/*.json 2>/dev/null)"
like "$(message_of "$T/div")" "training diverged" "  its message is the one printed"

run "$FTRAIN" --device cpu --data line --layers 8 --steps 4 --run-dir "$T/arch"
is "$rc $(kind_of "$T/arch")" "0 " "a run that ends well: no record"
run "$FTRAIN" --device cpu --data line --layers 9 --steps 8 --run-dir "$T/arch"
is "$rc $(kind_of "$T/arch")" "1 resume_refused" "a resume of another architecture: exit 1, a resume_refused record" ||
    why "$(cat "$T/err")"

mpi 2 --data line --layers 8 --optimizer sgd --lr 1000 --steps 200 --run-dir "$T/div2" >"$T/out" 2>"$T/err"
rc=$?
n=$(ls "$T"/div2/failures/*.json 2>/dev/null | wc -l)
is "$rc $n" "1 1" "2 ranks diverging: one record (rank 0's; the other's message is the same)" ||
    why "$(cat "$T/err")"
is "$(kind_of "$T/div2")" nan "  of kind nan"

# lost SIG DIR [OPTION...]: 3 ranks under mpirun --enable-recovery, which
# keeps the others running when a rank dies (as a launcher that does not
# notice would); rank 1 gets SIG once the run trains; waits for the job's
# end; took: seconds from the signal to that end.
lost() {
    _sig=$1 _dir=$2
    shift 2
    timeout -k 5 90 sh "$LAUNCH" mpirun --oversubscribe --enable-recovery -n 3 "$FTRAIN" --device cpu \
        --data line --layers 8 --steps 2000 --step-delay-ms 100 --log-every 1 --hang-timeout 5 \
        --run-dir "$_dir" "$@" >"$_dir.out" 2>"$_dir.err" &
    _job=$!
    track_bg "$_job"
    victim="" took=none
    if wait_for 30 progress_ge "$_dir.out" 3; then
        victim=$(rank_pid "$_dir.out" 1)
        _t0=$(now)
        [ -n "$victim" ] && kill -"$_sig" "$victim"
    fi
    wait "$_job"
    [ -n "$victim" ] && took=$(secs "$_t0" "$(now)")
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
}
# kinds DIR: "KIND:CULPRIT_RANK xCOUNT" for the records under DIR/failures.
kinds() {
    for f in "$1"/failures/*.json; do
        [ -f "$f" ] && printf '%s\n' "$(sed -n 's/.*"kind":"\([a-z_]*\)".*"culprit":{"rank":\(-\{0,1\}[0-9]*\),.*/\1:\2/p' "$f")"
    done | sort | uniq -c | awk '{ print $2 " x" $1 }' | paste -sd' ' -
}
# The liveness ring (the default): rank 1's neighbours (ranks 0 and 2) read
# the end of its connections, without its goodbye, within a tick.
lost KILL "$T/gone"
k=$(kinds "$T/gone")
like "$k" '^peer_lost:1 x[12]$' "a rank SIGKILLed, the others kept running: their records are peer_lost, naming rank 1 ($k)" ||
    why "victim ${victim:-none}" "$(grep -E 'hang:|peer lost:' "$T/gone.err" | head -n 4)"
grep -q "^ftrain: peer lost: rank 1 (host [^ ]*, pid ${victim:-x}) is gone: its connection closed without a goodbye" "$T/gone.err" &&
    below "$took" 4
ok $? "  the liveness ring named it, and the job ended ${took} s after the kill (below 4 s; the hang limit is 5 s)" ||
    why "$(grep -E 'rank 1|peer lost' "$T/gone.err" | head -n 3)"
# Without it (--no-liveness) the heartbeats do, after the hang limit: a
# silent rank whose pid is gone on this host.
lost KILL "$T/gone-hb" --no-liveness
k=$(kinds "$T/gone-hb")
like "$k" '^peer_lost:1 x[12]$' "--no-liveness: the same kill, the records still peer_lost naming rank 1 ($k)" ||
    why "victim ${victim:-none}" "$(grep 'hang:' "$T/gone-hb.err" | head -n 4)"
grep -q "rank 1 (host [^ ]*, pid ${victim:-x}) stopped making progress: .*(its process is gone: no such pid on this host)" "$T/gone-hb.err" &&
    ! grep -q 'peer lost:' "$T/gone-hb.err" && ! below "$took" 5
ok $? "  by the heartbeats after the hang limit (${took} s): its process is gone" ||
    why "$(grep 'rank 1' "$T/gone-hb.err" | head -n 3)"
lost STOP "$T/stopped"
k=$(kinds "$T/stopped")
like "$k" '^hang:1 x[12]$' "a rank SIGSTOPped (alive): hang records naming rank 1 ($k)" ||
    why "victim ${victim:-none}" "$(grep 'hang:' "$T/stopped.err" | head -n 4)"
grep -q "rank 1 (host [^ ]*, pid ${victim:-x}) stopped making progress: .*(the process is stopped, dead or cut off)" "$T/stopped.err"
ok $? "  the report does not call it gone" || why "$(grep 'rank 1' "$T/stopped.err" | head -n 3)"
