#!/bin/sh
# docs_match_code.sh - figures that docs and comments quote from the code
# are the code's: the size of the control reduction (CTL_N in src/train.c)
# in docs/determinism.md and docs/benchmarks.md, and the weights' and
# biases' RNG streams (MODEL_RNG_STREAM, MODEL_BIAS_RNG_STREAM in
# src/model.c) in include/ftrain/rng.h and docs/determinism.md; the
# metrics.jsonl events ftrain(1) lists are the ones src/ logs.
# Reads the sources only; nothing is run.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
plan 6

n=$(sed -n 's/^enum { *\(CTL_[A-Z_, ]*\)CTL_N *};.*/\1/p' "$SRC/src/train.c" | tr -cd ',' | wc -c)
like "$(cat "$SRC/docs/determinism.md")" "MPI_Allreduce\(MAX\)\` of $n doubles" \
    "docs/determinism.md: the control reduction is CTL_N = $n doubles"
like "$(cat "$SRC/docs/benchmarks.md")" "the $n-double MAX allreduce" \
    "docs/benchmarks.md: the same"
stream=$(sed -n 's/^#define MODEL_RNG_STREAM \(0x[0-9a-f]*\)u*$/\1/p' "$SRC/src/model.c")
like "$(sed -n 1,12p "$SRC/include/ftrain/rng.h")" "rng_make\(seed, $stream \+ l\)" \
    "rng.h: the weights' streams are MODEL_RNG_STREAM ($stream) + layer, as model.c uses"
bias=$(sed -n 's/^#define MODEL_BIAS_RNG_STREAM \(0x[0-9a-f]*\)u*$/\1/p' "$SRC/src/model.c")
like "$(sed -n 1,12p "$SRC/include/ftrain/rng.h")" "rng_make\(seed, ${bias:-none} \+ l\)" \
    "rng.h: the biases' streams are MODEL_BIAS_RNG_STREAM ($bias) + layer, as model.c uses"
like "$(cat "$SRC/docs/determinism.md")" "rng_make\(seed, $stream \+ l\).*rng_make\(seed, ${bias:-none} \+ l\)" \
    "docs/determinism.md: the same two streams"

# Every event name src/ passes to metrics_event (done and exit come from
# one ternary), against ftrain(1)'s FILES entry for metrics.jsonl.
code_ev=$( (grep -ho 'metrics_event([^,]*, *"[a-z_]*"' "$SRC"/src/*.c | sed 's/.*"\([a-z_]*\)"$/\1/'
            grep -ho 'metrics_event([^,]*, [^,"]*? "[a-z_]*" : "[a-z_]*"' "$SRC"/src/*.c |
                sed 's/^[^"]*//' | tr -c 'a-z_\n' ' ' | tr ' ' '\n') |
          grep . | sort -u | tr '\n' ' ')
man_ev=$(sed -n '/^\.I DIR\/metrics\.jsonl$/,/^\.TP$/p' "$SRC/man/ftrain.1" | tr '\n' ' ' |
         sed -n 's/.*per event (\([^)]*\)).*/\1/p' | tr -d ',' | tr ' ' '\n' | grep . | sort -u | tr '\n' ' ')
is "$man_ev" "$code_ev" "ftrain(1): metrics.jsonl's events are those src/ logs"

done_testing
