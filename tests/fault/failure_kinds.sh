#!/bin/sh
# failure_kinds.sh - a failure of the training loop leaves a failure record
# (docs/failure-records.md) whose kind says what failed, so that the
# supervisor decides from it: data that cannot be read is bad_data, a
# diverged run nan, another architecture resume_refused; each with exit 1
# and its message, and the record's message is the one printed.  A run
# that ends well leaves no record.
. "$(dirname "$0")/../lib.sh"
need_mpi
plan 8

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
