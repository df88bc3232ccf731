#!/bin/sh
# shared_lib.sh - the checkpoint library as a shared library,
# $BUILD/libftrain-ckpt.so.2.0.0: its SONAME is libftrain-ckpt.so.2 and the
# .so.2 and .so links lead to it; it exports exactly the functions that the
# public headers (include/ftrain/ckpt.h, ckpt_local.h, ckpt_stop.h) declare,
# as the compiler reads them, and nothing else: none of the internal ckpt_*
# helpers its files share (which the static libckpt.a does hold); it needs
# no MPI, BLAS or CUDA library; and a program linked against it (-L$BUILD
# -lftrain-ckpt) runs.
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
SO=$BUILD/libftrain-ckpt.so.2.0.0
CC=${CC:-cc}
[ -f "$SO" ] || skip_all "$SO not built (make $SO)"
for tool in nm readelf "$CC"; do
    command -v "$tool" >/dev/null 2>&1 || skip_all "$tool not installed"
done
plan 9

is "$(readelf -d "$SO" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')" libftrain-ckpt.so.2 \
    "SONAME is libftrain-ckpt.so.2"
is "$(readlink "$BUILD/libftrain-ckpt.so.2") $(readlink "$BUILD/libftrain-ckpt.so")" \
    "libftrain-ckpt.so.2.0.0 libftrain-ckpt.so.2" \
    "links: libftrain-ckpt.so.2 -> libftrain-ckpt.so.2.0.0, libftrain-ckpt.so -> libftrain-ckpt.so.2"

# The functions the headers declare: the preprocessed headers (no comments,
# no HowTo examples) hold a name followed by "(" only where one is declared.
printf '#include "ftrain/ckpt.h"\n#include "ftrain/ckpt_local.h"\n#include "ftrain/ckpt_stop.h"\n' |
    "$CC" -std=c11 -E -P -I"$SRC/include" -x c - >"$T/headers.i" 2>"$T/cpp.err"
grep -o 'ckpt_[a-z0-9_]*[[:space:]]*(' "$T/headers.i" | tr -d ' \t(' | sort -u >"$T/declared"
n_declared=$(wc -l <"$T/declared" | tr -d ' ')
ok "$([ "$n_declared" -ge 40 ]; echo $?)" "the public headers declare $n_declared functions" ||
    why "$(cat "$T/cpp.err")"

nm -D --defined-only "$SO" | awk '{ print $NF }' | sort -u >"$T/exported"
is "$(comm -3 "$T/declared" "$T/exported" | tr -s ' \t\n' ' ')" "" \
    "the .so exports exactly the declared functions (left: declared only; right: exported only)"
is "$(grep -c -v '^ckpt_' "$T/exported")" 0 "  and no symbol that is not ckpt_*"

# Internal helpers: in the static archive, hidden in the shared library.
internal="ckpt_seterr ckpt_path_join ckpt_mkdir_p ckpt_write_file_atomic ckpt_create_fresh"
in_a="" in_so=""
for f in $internal; do
    nm "$BUILD/libckpt.a" 2>/dev/null | grep -q " T $f\$" && in_a="$in_a $f"
    grep -qx "$f" "$T/exported" && in_so="$in_so $f"
done
is "$in_a" " $(echo $internal)" "internal helpers are defined in libckpt.a:$in_a"
is "$in_so" "" "  and none is exported by the .so"

needed=$(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
ok "$(printf '%s\n' "$needed" | grep -Eqi 'mpi|blas|cuda|cublas|nccl'; [ $? -ne 0 ]; echo $?)" \
    "it needs no MPI, BLAS or CUDA library (needs: $needed)"

# A program linked against the shared library alone: the stop path and an
# error name through the exported API.
cat >"$T/use.c" <<'EOF'
#include <signal.h>
#include <stdio.h>
#include "ftrain/ckpt_stop.h"
int main(void)
{
    int64_t stop_step;
    int sig;
    if (ckpt_stop_install(SIGUSR1) != CKPT_OK)
        return 1;
    raise(SIGUSR1);
    if (ckpt_stop_agree(NULL, 3, &stop_step, &sig) != CKPT_OK)
        return 1;
    printf("%lld %d %s\n", (long long)stop_step, sig == SIGUSR1, ckpt_strerror(CKPT_ECORRUPT));
    return 0;
}
EOF
"$CC" -std=c11 -Wall -Wextra -I"$SRC/include" "$T/use.c" -o "$T/use" -L"$BUILD" -lftrain-ckpt \
    >"$T/cc.out" 2>&1 &&
    out=$(LD_LIBRARY_PATH="$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$T/use" 2>&1)
like "${out:-$(cat "$T/cc.out")}" "^3 1 checksum mismatch" \
    "a program linked with -lftrain-ckpt runs: stop at step 3 on USR1, error names"

done_testing
