#!/bin/sh
# docs_match_code.sh - figures that docs and comments quote from the code
# are the code's: the size of the control reduction (CTL_N in train.c) in
# docs/determinism.md and docs/benchmarks.md, and the weights' and biases'
# RNG streams (MODEL_RNG_STREAM, MODEL_BIAS_RNG_STREAM in model.c) in
# src/nn/rng.h and docs/determinism.md; the metrics.jsonl events
# ftrain(1) lists are the ones src/ logs.
# Reads the sources only; nothing is run.
#
# The sources are found by name anywhere under src/ (they may live in
# subfolders such as src/train/); a file that is missing or found twice
# bails out naming it.  A figure that cannot be read from the code or the
# docs fails its check and says so: an empty extraction never compares
# equal to another empty one.
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# src_file VAR NAME: set VAR to the one file called NAME under src/, or
# bail out.
src_file() {
    _f=$(find "$SRC/src" -type f -name "$2" 2>/dev/null)
    case $_f in
    "") echo "Bail out! no $2 under src/: this test reads it (was it renamed?)"; exit 1 ;;
    *"
"*) echo "Bail out! more than one $2 under src/: $(echo "$_f" | tr '\n' ' ')"; exit 1 ;;
    esac
    eval "$1=\$_f"
}
# extracted WHAT VALUE: VALUE is not empty; else the reason goes to stderr.
extracted() {
    [ -n "$2" ] && return 0
    why "could not extract $1"
    return 1
}

src_file TRAIN_C train.c
src_file MODEL_C model.c
plan 6

# The enum's members before CTL_N, counted by their commas.
ctl=$(sed -n 's/^enum { *\(CTL_[A-Z_, ]*\)CTL_N *};.*/\1/p' "$TRAIN_C")
n=$(printf '%s' "$ctl" | tr -cd ',' | wc -c | tr -d ' ')
if extracted "'enum { CTL_... CTL_N };' from ${TRAIN_C#"$SRC"/}" "$ctl"; then
    like "$(cat "$SRC/docs/determinism.md")" "MPI_Allreduce\(MAX\)\` of $n doubles" \
        "docs/determinism.md: the control reduction is CTL_N = $n doubles"
    like "$(cat "$SRC/docs/benchmarks.md")" "the $n-double MAX allreduce" \
        "docs/benchmarks.md: the same"
else
    ok 1 "docs/determinism.md: the control reduction is CTL_N doubles"
    ok 1 "docs/benchmarks.md: the same"
fi

stream=$(sed -n 's/^#define MODEL_RNG_STREAM \(0x[0-9a-f]*\)u*$/\1/p' "$MODEL_C")
bias=$(sed -n 's/^#define MODEL_BIAS_RNG_STREAM \(0x[0-9a-f]*\)u*$/\1/p' "$MODEL_C")
rng_h=$(sed -n 1,12p "$SRC/src/nn/rng.h")
if extracted "'#define MODEL_RNG_STREAM 0x...' from ${MODEL_C#"$SRC"/}" "$stream"; then
    like "$rng_h" "rng_make\(seed, $stream \+ l\)" \
        "rng.h: the weights' streams are MODEL_RNG_STREAM ($stream) + layer, as model.c uses"
else
    ok 1 "rng.h: the weights' streams are MODEL_RNG_STREAM + layer"
fi
if extracted "'#define MODEL_BIAS_RNG_STREAM 0x...' from ${MODEL_C#"$SRC"/}" "$bias"; then
    like "$rng_h" "rng_make\(seed, $bias \+ l\)" \
        "rng.h: the biases' streams are MODEL_BIAS_RNG_STREAM ($bias) + layer, as model.c uses"
else
    ok 1 "rng.h: the biases' streams are MODEL_BIAS_RNG_STREAM + layer"
fi
if [ -n "$stream" ] && [ -n "$bias" ]; then
    like "$(cat "$SRC/docs/determinism.md")" "rng_make\(seed, $stream \+ l\).*rng_make\(seed, $bias \+ l\)" \
        "docs/determinism.md: the same two streams"
else
    ok 1 "docs/determinism.md: the same two streams (not read from model.c)"
fi

# Every event name src/ (any depth) passes to metrics_event (done and exit
# come from one ternary), against ftrain(1)'s FILES entry for metrics.jsonl.
find "$SRC/src" -type f -name '*.c' >"$T/sources"
code_ev=$( (xargs grep -ho 'metrics_event([^,]*, *"[a-z_]*"' <"$T/sources" | sed 's/.*"\([a-z_]*\)"$/\1/'
            xargs grep -ho 'metrics_event([^,]*, [^,"]*? "[a-z_]*" : "[a-z_]*"' <"$T/sources" |
                sed 's/^[^"]*//' | tr -c 'a-z_\n' ' ' | tr ' ' '\n') |
          grep . | sort -u | tr '\n' ' ')
man_ev=$(sed -n '/^\.I DIR\/metrics\.jsonl$/,/^\.TP$/p' "$SRC/man/ftrain.1" | tr '\n' ' ' |
         sed -n 's/.*per event (\([^)]*\)).*/\1/p' | tr -d ',' | tr ' ' '\n' | grep . | sort -u | tr '\n' ' ')
# Both lists must be read: two empty ones are no agreement.
if extracted "any metrics_event(..., \"name\") call from the $(wc -l <"$T/sources" | tr -d ' ') .c files under src/" "$code_ev" &&
    extracted "the 'per event (...)' list of man/ftrain.1's metrics.jsonl entry" "$man_ev"; then
    is "$man_ev" "$code_ev" "ftrain(1): metrics.jsonl's events are those src/ logs"
else
    ok 1 "ftrain(1): metrics.jsonl's events are those src/ logs (a list could not be read)"
fi

done_testing
