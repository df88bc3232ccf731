#!/bin/sh
# man_pages.sh - the manual pages in man/ say what the programs and headers
# do: every option of `ftrain --help` is in ftrain.1; every command of
# `ckptctl --help` and every option of each `ckptctl help COMMAND` is in
# ckptctl.1; every option of `ftrain-supervise --help` and every variable
# it reads is in ftrain-supervise.1; every function the public headers
# declare is in libftrain-ckpt.3; every option of `ftrain-plot --help` is in
# ftrain-plot.1; every option of `ftrain-torchrun --help` is in
# ftrain-torchrun.1; and each page renders without a warning (`man
# --warnings`, when man is installed).  tests/house/install.sh renders the
# installed copies.
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
MAN=$SRC/man
CC=${CC:-cc}
[ -x "$BUILD/ftrain" ] && [ -x "$BUILD/ckptctl" ] || skip_all "$BUILD/ftrain or $BUILD/ckptctl not built"

# text PAGE: the page's source with its escapes for '-' undone and font
# changes removed, as the words a reader sees.
text() {
    sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\(+-/+-/g' "$1"
}

# missing WORDS_FILE PAGE: the words of WORDS_FILE that PAGE lacks (whole
# words: "--data" is not found in "--data-dir").
missing() {
    text "$2" >"$T/page.txt"
    while IFS= read -r w; do
        grep -Eq -- "(^|[^a-z0-9-])$w([^a-z0-9-]|\$)" "$T/page.txt" || printf '%s ' "$w"
    done <"$1"
}

"$BUILD/ftrain" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u >"$T/ftrain-opts"
n=$(wc -l <"$T/ftrain-opts" | tr -d ' ')
is "$(missing "$T/ftrain-opts" "$MAN/ftrain.1")" "" "ftrain.1 documents all $n options of ftrain --help"

"$BUILD/ckptctl" --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z]*\) .*/\1/p' >"$T/ckptctl-cmds"
n=$(wc -l <"$T/ckptctl-cmds" | tr -d ' ')
ok "$([ "$n" -ge 8 ]; echo $?)" "ckptctl --help lists $n commands"
is "$(missing "$T/ckptctl-cmds" "$MAN/ckptctl.1")" "" "ckptctl.1 documents every command"
: >"$T/ckptctl-opts"
while read -r c; do
    "$BUILD/ckptctl" help "$c" | grep -o -- '--[a-z][a-z0-9-]*' >>"$T/ckptctl-opts"
done <"$T/ckptctl-cmds"
sort -u "$T/ckptctl-opts" -o "$T/ckptctl-opts"
n=$(wc -l <"$T/ckptctl-opts" | tr -d ' ')
is "$(missing "$T/ckptctl-opts" "$MAN/ckptctl.1")" "" "ckptctl.1 documents all $n options of the commands"

# ftrain-supervise.1: every option of its --help, and every variable it
# reads (the FTRAIN_* names in supervise/, and RUN_DIR).
if [ -x "$BUILD/ftrain-supervise" ]; then
    "$BUILD/ftrain-supervise" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u >"$T/sup-opts"
    n=$(wc -l <"$T/sup-opts" | tr -d ' ')
    ok "$([ "$n" -ge 4 ]; echo $?)" "ftrain-supervise --help lists $n options"
    is "$(missing "$T/sup-opts" "$MAN/ftrain-supervise.1")" "" "ftrain-supervise.1 documents all $n options"
    { grep -oh '"FTRAIN_[A-Z_]*"' "$SRC"/supervise/*.c | tr -d '"'; echo RUN_DIR; } |
        grep -vx 'FTRAIN_LAUNCH_ID\|FTRAIN_RUN_DIR' | sort -u >"$T/sup-vars"
    n=$(wc -l <"$T/sup-vars" | tr -d ' ')
    ok "$([ "$n" -ge 15 ]; echo $?)" "supervise/ reads $n variables"
    is "$(missing "$T/sup-vars" "$MAN/ftrain-supervise.1")" "" "ftrain-supervise.1 documents all $n variables"
else
    skip_n 4 "ftrain-supervise.1" "$BUILD/ftrain-supervise not built"
fi

printf '#include "ftrain/ckpt.h"\n#include "ftrain/ckpt_local.h"\n#include "ftrain/ckpt_stop.h"\n' |
    "$CC" -std=c11 -E -P -I"$SRC/include" -x c - 2>/dev/null |
    grep -o 'ckpt_[a-z0-9_]*[[:space:]]*(' | tr -d ' \t(' | sort -u >"$T/functions"
n=$(wc -l <"$T/functions" | tr -d ' ')
ok "$([ "$n" -ge 40 ]; echo $?)" "the public headers declare $n functions"
is "$(missing "$T/functions" "$MAN/libftrain-ckpt.3")" "" "libftrain-ckpt.3 names every one"

# ftrain-plot is a Python script (scripts/ftrain-plot), run with Debian's python3.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
if [ -n "$PY" ]; then
    "$PY" "$SRC/scripts/ftrain-plot" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u >"$T/plot-opts"
    n=$(wc -l <"$T/plot-opts" | tr -d ' ')
    ok "$([ "$n" -ge 3 ]; echo $?)" "ftrain-plot --help lists $n options"
    is "$(missing "$T/plot-opts" "$MAN/ftrain-plot.1")" "" "ftrain-plot.1 documents every one"
else
    skip_n 2 "ftrain-plot.1 documents the options of ftrain-plot --help" "python3 is not installed"
fi

# ftrain-torchrun (scripts/ftrain-torchrun, ftrain_ckpt.run) takes
# torchrun's options (some spelt with _): the page names each of them.
if [ -n "$PY" ] && "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
    "$PY" "$SRC/scripts/ftrain-torchrun" --help | grep -o -- '--[a-z][a-z0-9_-]*' | sort -u >"$T/tr-opts"
    n=$(wc -l <"$T/tr-opts" | tr -d ' ')
    ok "$([ "$n" -ge 10 ]; echo $?)" "ftrain-torchrun --help lists $n options"
    is "$(missing "$T/tr-opts" "$MAN/ftrain-torchrun.1")" "" "ftrain-torchrun.1 documents every one"
else
    skip_n 2 "ftrain-torchrun.1 documents the options of ftrain-torchrun --help" "python3 with torch is not installed"
fi

if command -v man >/dev/null 2>&1; then
    for page in ftrain.1 ckptctl.1 ftrain-supervise.1 ftrain-plot.1 ftrain-torchrun.1 libftrain-ckpt.3; do
        MANWIDTH=80 man --warnings -l "$MAN/$page" >"$T/out" 2>"$T/err"
        rc=$?
        ok "$([ "$rc" -eq 0 ] && [ ! -s "$T/err" ] && [ -s "$T/out" ]; echo $?)" \
            "man --warnings -l $page: renders, no warning (exit $rc)" || why "$(head -n 20 "$T/err")"
    done
else
    for page in ftrain.1 ckptctl.1 ftrain-supervise.1 ftrain-plot.1 ftrain-torchrun.1 libftrain-ckpt.3; do
        skip "man --warnings -l $page" "man is not installed"
    done
fi

done_testing
