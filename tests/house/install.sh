#!/bin/sh
# install.sh - make install / make uninstall (mk/install.mk) with the
# already-built BUILD: into a staging DESTDIR with PREFIX=/usr/local, install
# only copies (no compiler runs) and every file is there; the installed
# manual pages render without a warning; the installed headers compile
# alone; a program built outside the tree with `pkg-config --cflags --libs
# ftrain-ckpt` (pointed into DESTDIR) writes a 2-tensor checkpoint with
# ckpt_save and reads it back, against the installed shared library, and
# the installed ckptctl verifies it; the installed ftrain trains from outside
# the source tree, and the installed ftrain-plot (run by its own first line)
# prints its --help and plots that run; the installed train.sbatch finds
# the installed ftrain-supervise, which finds the installed ftrain;
# uninstall removes exactly what install wrote; bad PREFIX and DESTDIR are
# refused.  The manual page's first example, compiled as it stands, runs in
# an empty directory.  The Python package goes into a directory on
# python3's sys.path, whatever LIBDIR is (a multiarch one too), or into
# PYTHONDIR when that is given.
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) B=$BUILD ;; *) B=$SRC/$BUILD ;; esac
CC=${CC:-cc}
for f in ftrain ckptctl ftrain-supervise libftrain-ckpt.so.2.0.0 libckpt.a; do
    [ -e "$B/$f" ] || skip_all "$B/$f not built (make BUILD=$BUILD all)"
done
command -v pkg-config >/dev/null 2>&1 || skip_all "pkg-config not installed"
command -v "$CC" >/dev/null 2>&1 || skip_all "$CC not installed"

D=$T/stage
P=/usr/local
DP=$D$P
# make_here TARGET VAR=VALUE...: make in the source tree with the same BUILD
# (as given, so that nothing looks out of date), output in $T/make.out.
make_here() {
    make -C "$SRC" --no-print-directory "$@" BUILD="$BUILD" LDCONFIG=true >"$T/make.out" 2>&1
}

# Files that are not ftrain's: uninstall must leave them.
mkdir -p "$DP/bin" "$DP/lib" "$DP/include/ftrain" "$DP/share/man/man1"
for f in bin/other-tool lib/libother.so include/ftrain/local-addition.h share/man/man1/other.1; do
    echo keep >"$DP/$f"
done

make_here install DESTDIR="$D" PREFIX="$P"
rc=$?
ok "$rc" "make install DESTDIR=... PREFIX=$P (exit $rc)" || why "$(tail -n 20 "$T/make.out")"
ok "$(! grep -Eq -- '( -c | -o |^ar |nvcc)' "$T/make.out"; echo $?)" \
    "  it only copies: nothing is compiled or linked" || why "$(grep -E -- '( -c | -o |^ar )' "$T/make.out" | head -n 5)"

FILES="bin/ftrain bin/ckptctl bin/ftrain-supervise bin/ftrain-plot bin/ftrain-torchrun lib/libftrain-ckpt.so.2.0.0 lib/libftrain-ckpt.a
include/ftrain/ckpt.h include/ftrain/ckpt_local.h include/ftrain/ckpt_stop.h
include/ftrain/exit_codes.h include/ftrain/version.h
lib/pkgconfig/ftrain-ckpt.pc share/man/man1/ftrain.1 share/man/man1/ckptctl.1
share/man/man1/ftrain-supervise.1 share/man/man1/ftrain-plot.1 share/man/man1/ftrain-torchrun.1
share/man/man3/libftrain-ckpt.3 share/ftrain/train.sbatch"
absent=""
for f in $FILES; do [ -f "$DP/$f" ] && [ ! -L "$DP/$f" ] || absent="$absent $f"; done
is "$absent" "" "every file is installed under DESTDIR$P"
is "$(readlink "$DP/lib/libftrain-ckpt.so.2") $(readlink "$DP/lib/libftrain-ckpt.so")" \
    "libftrain-ckpt.so.2.0.0 libftrain-ckpt.so.2" "  with the .so.2 and .so links"
ok "$([ -x "$DP/bin/ftrain" ] && [ -x "$DP/bin/ckptctl" ] && [ -x "$DP/bin/ftrain-supervise" ] &&
      [ -x "$DP/bin/ftrain-plot" ] && [ -x "$DP/share/ftrain/train.sbatch" ]; echo $?)" \
    "  programs and the batch script executable"
is "$(ls "$DP/include/ftrain" | tr '\n' ' ')" "ckpt.h ckpt_local.h ckpt_stop.h exit_codes.h local-addition.h version.h " \
    "  only the public API's headers"
like "$(cat "$DP/lib/pkgconfig/ftrain-ckpt.pc")" "^prefix=$P\$" "  the .pc file names PREFIX, not DESTDIR"
like "$(grep '^Libs:' "$DP/lib/pkgconfig/ftrain-ckpt.pc")" '^Libs: -L\$\{libdir\} -lftrain-ckpt$' \
    "  and no rpath: $P/lib is the loader's"
like "$(grep '^installed_ftrain=' "$DP/share/ftrain/train.sbatch")" "^installed_ftrain=$P/bin/ftrain\$" \
    "  the batch script's installed ftrain is PREFIX/bin/ftrain"
like "$(grep '^installed_supervise=' "$DP/share/ftrain/train.sbatch")" "^installed_supervise=$P/bin/ftrain-supervise\$" \
    "  and its installed ftrain-supervise PREFIX/bin/ftrain-supervise"

# ---- the manual pages ---------------------------------------------------------
if command -v man >/dev/null 2>&1; then
    for page in man1/ftrain.1 man1/ckptctl.1 man1/ftrain-supervise.1 man1/ftrain-plot.1 man1/ftrain-torchrun.1 man3/libftrain-ckpt.3; do
        MANWIDTH=80 man --warnings -l "$DP/share/man/$page" >"$T/out" 2>"$T/err"
        rc=$?
        ok "$([ "$rc" -eq 0 ] && [ ! -s "$T/err" ] && [ -s "$T/out" ]; echo $?)" \
            "man --warnings -l share/man/$page: renders without a warning" || why "$(head -n 20 "$T/err")"
    done
else
    for page in man1/ftrain.1 man1/ckptctl.1 man1/ftrain-supervise.1 man1/ftrain-plot.1 man1/ftrain-torchrun.1 man3/libftrain-ckpt.3; do
        skip "man --warnings -l share/man/$page" "man is not installed"
    done
fi

# ---- a program outside the tree -----------------------------------------------
PC() { PKG_CONFIG_PATH="$DP/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D" pkg-config "$@"; }
flags=$(PC --cflags --libs ftrain-ckpt 2>"$T/pc.err")
like "$flags" "^-I$DP/include -L$DP/lib -lftrain-ckpt *\$" \
    "pkg-config --cflags --libs ftrain-ckpt: the staged include and lib directories" ||
    why "$(cat "$T/pc.err")"
like "$(PC --static --libs ftrain-ckpt)" "-lzstd -lxxhash -ljansson -larchive -lpthread" \
    "  --static adds zstd, xxhash, jansson, archive and pthread"

mkdir -p "$T/ext"
for h in ckpt.h ckpt_local.h ckpt_stop.h exit_codes.h version.h; do
    printf '#include <ftrain/%s>\nint only_this_header;\n' "$h" >"$T/ext/only.c"
    "$CC" -std=c11 -Wall -Wextra -pedantic -Werror -fsyntax-only $(PC --cflags ftrain-ckpt) \
        "$T/ext/only.c" >"$T/cc.out" 2>&1
    ok "$?" "the installed ftrain/$h compiles alone (-std=c11 -pedantic -Werror)" || why "$(cat "$T/cc.out")"
done

cat >"$T/ext/roundtrip.c" <<'EOF'
/* Save two tensors with ckpt_save (no collective) and read them back. */
#include <stdio.h>
#include <string.h>
#include <ftrain/ckpt.h>
#include <ftrain/ckpt_stop.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    float w[6] = {1.5f, -2, 3, 4, 5, 6.25f};
    int64_t seen[3] = {640, 1, 42};
    ckpt_tensor_t t[2] = {
        {.name = "model.w", .dtype = CKPT_F32, .ndim = 2, .shape = {2, 3}, .data = w},
        {.name = "data.seen", .dtype = CKPT_I64, .ndim = 1, .shape = {3}, .data = seen},
    };
    ckpt_opts_t opts;
    ckpt_opts_default(&opts);
    if (ckpt_save(argv[1], 7, t, 2, "{\"epoch\":0}", &opts, NULL) != CKPT_OK) {
        fprintf(stderr, "save: %s\n", ckpt_last_error());
        return 1;
    }
    char dir[4096], name[CKPT_FILE_NAME_MAX];
    ckpt_step_dirname(7, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", argv[1], name);
    ckpt_t *c = NULL;
    float w2[6];
    int64_t seen2[3];
    if (ckpt_open(dir, &c) != CKPT_OK || ckpt_read_tensor(c, "model.w", w2, sizeof w2) != CKPT_OK ||
        ckpt_read_tensor(c, "data.seen", seen2, sizeof seen2) != CKPT_OK) {
        fprintf(stderr, "read: %s\n", ckpt_last_error());
        return 1;
    }
    int same = memcmp(w, w2, sizeof w) == 0 && memcmp(seen, seen2, sizeof seen) == 0;
    printf("step %llu, %zu tensors, %s\n", (unsigned long long)ckpt_step(c), ckpt_num_tensors(c),
           same ? "same" : "different");
    ckpt_close(c);
    int64_t stop_step;
    int sig;
    return same && ckpt_stop_agree(NULL, 7, &stop_step, &sig) == CKPT_OK && stop_step == -1 ? 0 : 1;
}
EOF
(cd "$T/ext" && "$CC" -std=c11 -Wall -Wextra -Werror roundtrip.c -o roundtrip $flags) >"$T/cc.out" 2>&1
ok "$?" "a program outside the tree builds with pkg-config's flags alone" || why "$(cat "$T/cc.out")"
is "$(readelf -d "$T/ext/roundtrip" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(libftrain-ckpt[^]]*\)\]/\1/p')" \
    libftrain-ckpt.so.2 "  linked against libftrain-ckpt.so.2 (the SONAME)"
out=$(LD_LIBRARY_PATH="$DP/lib" "$T/ext/roundtrip" "$T/ext/ckpt" 2>&1)
rc=$?
is "$out (exit $rc)" "step 7, 2 tensors, same (exit 0)" \
    "  it saves 2 tensors with ckpt_save and reads them back (installed library)"
like "$(LD_LIBRARY_PATH="$DP/lib" ldd "$T/ext/roundtrip" 2>&1 | grep libftrain-ckpt)" "=> $DP/lib/libftrain-ckpt.so.2 " \
    "  the library loaded is the installed one"
(cd "$T" && "$DP/bin/ckptctl" verify "$T/ext/ckpt") >"$T/out" 2>&1
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^step-00000007: ok (1 shard,' "$T/out"; echo $?)" \
    "the installed ckptctl verifies it (exit $rc)" || why "$(cat "$T/out")"
# Where python3 looks: its sys.path, and the site directories it adds there
# once they exist.
on_path() {
    /usr/bin/python3 -c 'import site, sys; sys.exit(sys.argv[1] not in sys.path + site.getsitepackages())' "$1"
}
# The installed Python binding, with Debian's python3 (numpy only; no torch
# needed to read), finds the installed library and reads the same checkpoint.
PYDIR=$(find "$DP/lib" -path '*-packages/ftrain_ckpt' -type d 2>/dev/null | head -n 1)
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    pyfinal=${PYDIR#$D}
    on_path "${pyfinal%/ftrain_ckpt}"
    ok $? "the Python package is installed in a directory on python3's sys.path ($pyfinal)"
    out=$(cd "$T" && PYTHONPATH="${PYDIR%/ftrain_ckpt}" FTRAIN_CKPT_LIB="$DP/lib/libftrain-ckpt.so.2" \
        PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c 'import sys, ftrain_ckpt as fc
import os
c = fc.Checkpoint(sys.argv[1]); c.verify(); print(c.step, len(c.tensors), fc.__file__.startswith(sys.argv[2]),
      fc.__version__, os.path.isfile(os.path.join(sys.argv[2], "py.typed")))' \
        "$T/ext/ckpt/step-00000007" "$PYDIR" 2>&1)
    # ftrain's version, from the header: the package's __version__ is it.
    hv=$(sed -n 's/^#define FTRAIN_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/ftrain/version.h |
        paste -sd. -)
    is "$out" "7 2 True $hv True" \
        "the installed Python package (${PYDIR#$DP}) reads and verifies it; __version__ $hv, py.typed" ||
        why "$out"
else
    skip "installed Python package" "/usr/bin/python3 with numpy is not installed"
fi

# What install would do with a multiarch LIBDIR, and with PYTHONDIR given.
make_here -n install DESTDIR="$T/multi" PREFIX=/usr LIBDIR=/usr/lib/x86_64-linux-gnu
pyline=$(grep "python/ftrain_ckpt/.*\.py" "$T/make.out")
pyto=$(printf '%s\n' "$pyline" | sed -n "s|.* '$T/multi\(/.*\)/ftrain_ckpt/'\$|\1|p")
like "$(grep 'libftrain-ckpt.so.2.0.0' "$T/make.out" | head -n 1)" "$T/multi/usr/lib/x86_64-linux-gnu/" \
    "make install LIBDIR=<multiarch>: the library goes into LIBDIR"
if [ -x /usr/bin/python3 ]; then
    ok "$([ -n "$pyto" ] && on_path "$pyto"; echo $?)" \
        "  the Python package into a directory on python3's sys.path (${pyto:-none}), not LIBDIR's" ||
        why "$pyline"
else
    skip "the Python package on python3's sys.path with a multiarch LIBDIR" "/usr/bin/python3 is not installed"
fi
make_here -n install DESTDIR="$T/multi" PREFIX=/usr PYTHONDIR=/opt/py/site
like "$(grep "python/ftrain_ckpt/.*\.py" "$T/make.out")" "'$T/multi/opt/py/site/ftrain_ckpt/'\$" \
    "  PYTHONDIR=... puts it there"

# ---- the manual page's example, as it stands ------------------------------------
# The first EXAMPLE of libftrain-ckpt(3), unescaped from roff, compiled with
# pkg-config's flags and run in an empty directory (twice: a committed step
# is never overwritten).
sed -n '/^\.SH EXAMPLES/,/^\.SH SEE ALSO/p' "$DP/share/man/man3/libftrain-ckpt.3" |
    awk '/^\.EX/ { n++; next } /^\.EE/ { if (n == 1) exit } n == 1' |
    sed -e 's/\\e/\\/g' -e 's/\\-/-/g' >"$T/ext/man_ex.c"
mkdir -p "$T/man_run"
(cd "$T/ext" && "$CC" -std=c11 -Wall -Wextra -pedantic -Werror man_ex.c -o man_ex $flags) >"$T/cc.out" 2>&1
ok "$?" "the manual page's first example compiles as it stands (-std=c11 -pedantic -Werror)" ||
    why "$(cat "$T/cc.out")" "$(cat "$T/ext/man_ex.c")"
out=$(cd "$T/man_run" && LD_LIBRARY_PATH="$DP/lib" "$T/ext/man_ex" 2>&1)
rc=$?
is "$out (exit $rc)" "w[5] = 6 (exit 0)" "  and runs in an empty directory"
out=$(cd "$T/man_run" && LD_LIBRARY_PATH="$DP/lib" "$T/ext/man_ex" 2>&1)
rc=$?
like "$out (exit $rc)" "already exists.*\(exit 1\)\$" "  run again, it says the step exists and fails"

# ---- the installed ftrain and train.sbatch, outside the tree --------------------
(cd "$T" && timeout -k 5 120 "$DP/bin/ftrain" --device cpu --data line --layers 8 --steps 6 \
    --ckpt-every 3 --run-dir "$T/run" --quiet) >"$T/out" 2>&1
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^done: step=6 ' "$T/out"; echo $?)" \
    "the installed ftrain trains, run from outside the source tree (exit $rc)" || why "$(cat "$T/out")"
(cd "$T" && "$DP/bin/ckptctl" list "$T/run") >"$T/out" 2>&1
like "$(cat "$T/out")" "step-00000006 .*committed LATEST" "  and the installed ckptctl lists its run directory"
# ftrain-plot is a Python script: its first line is the interpreter
# install chose (Debian's python3, else the one on PATH).
if [ -x /usr/bin/python3 ]; then want_py='#!/usr/bin/python3'; else want_py='#!/usr/bin/env python3'; fi
is "$(head -n 1 "$DP/bin/ftrain-plot")" "$want_py" "the installed ftrain-plot runs with $want_py"
(cd "$T" && "$DP/bin/ftrain-plot" --help) >"$T/out" 2>&1
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^usage: ftrain-plot RUN_DIR' "$T/out"; echo $?)" \
    "  it runs: --help prints its usage, exit 0 (exit $rc)" || why "$(cat "$T/out")"
(cd "$T" && "$DP/bin/ftrain-plot" "$T/run") >"$T/out" 2>&1
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^<svg ' "$T/run/loss.svg"; echo $?)" \
    "  and plots the installed ftrain's run directory to RUN_DIR/loss.svg (exit $rc)" || why "$(cat "$T/out")"

# A real prefix, to run the installed script as SLURM would: it must find
# the installed ftrain with no FTRAIN, no build/ in the submit directory,
# and no ftrain on PATH (srun is a stub that records its command line).
P2=$T/prefix
make_here install PREFIX="$P2"
ok "$?" "make install PREFIX=<a temporary prefix> (no DESTDIR)" || why "$(tail -n 20 "$T/make.out")"
mkdir -p "$T/stub" "$T/submit"
printf '#!/bin/sh\necho "srun $*" >>"%s/srun.log"\nexit 0\n' "$T" >"$T/stub/srun"
chmod +x "$T/stub/srun"
(cd "$T/submit" && env -u FTRAIN -u FTRAIN_PROGRAM PATH="$T/stub:/usr/bin:/bin" SLURM_JOB_ID=7 \
    SLURM_SUBMIT_DIR="$T/submit" RUN_DIR="$T/submit/run" bash "$P2/share/ftrain/train.sbatch" --steps 1) \
    >"$T/out" 2>&1
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q " $P2/bin/ftrain --run-dir $T/submit/run" "$T/srun.log" &&
    grep -q 'train.sbatch\[7\]: done: training finished' "$T/out"; echo $?)" \
    "the installed train.sbatch runs the installed ftrain-supervise, which launches the installed ftrain (exit $rc)" || why "$(cat "$T/out" "$T/srun.log" 2>&1)"
# A PREFIX the loader does not search: the .pc file's Libs carry its
# rpath, so a program built with pkg-config's flags runs without
# LD_LIBRARY_PATH; the Python package finds the library installed with it.
like "$(grep '^Libs:' "$P2/lib/pkgconfig/ftrain-ckpt.pc")" '^Libs: -L\$\{libdir\} -Wl,-rpath,\$\{libdir\} -lftrain-ckpt$' \
    "  its .pc file gives the rpath of a LIBDIR outside the loader's paths"
(cd "$T/ext" && "$CC" -std=c11 -Wall -Wextra -Werror roundtrip.c -o roundtrip2 \
    $(PKG_CONFIG_PATH="$P2/lib/pkgconfig" pkg-config --cflags --libs ftrain-ckpt)) >"$T/cc.out" 2>&1 &&
    out=$(cd "$T/ext" && env -u LD_LIBRARY_PATH ./roundtrip2 "$T/ext/ckpt2" 2>&1)
rc=$?
is "$out (exit $rc)" "step 7, 2 tensors, same (exit 0)" \
    "  a program built with its pkg-config flags runs without LD_LIBRARY_PATH" || why "$(cat "$T/cc.out")"
PYDIR2=$(find "$P2/lib" -path '*-packages/ftrain_ckpt' -type d 2>/dev/null | head -n 1)
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null && [ -n "$PYDIR2" ]; then
    out=$(cd "$T" && env -u FTRAIN_CKPT_LIB -u LD_LIBRARY_PATH PYTHONPATH="${PYDIR2%/ftrain_ckpt}" \
        PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c 'import sys, ftrain_ckpt as fc
c = fc.Checkpoint(sys.argv[1]); c.verify(); print(c.step, fc.library_path())' "$T/ext/ckpt2/step-00000007" 2>&1)
    is "$out" "7 $P2/lib/libftrain-ckpt.so.2" \
        "  the installed Python package loads the library installed with it (no FTRAIN_CKPT_LIB)" || why "$out"
else
    skip "the installed Python package finds its library" "/usr/bin/python3 with numpy is not installed"
fi
# ftrain-torchrun imports the package installed with it (PYTHONDIR written
# into it), from anywhere, with no PYTHONPATH.
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
    out=$(cd "$T" && env -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 "$P2/bin/ftrain-torchrun" --help 2>&1)
    rc=$?
    ok "$([ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q 'ftrain-torchrun' &&
        grep -q "^PACKAGE_DIR = \"${PYDIR2%/ftrain_ckpt}\"$" "$P2/bin/ftrain-torchrun"; echo $?)" \
        "  the installed ftrain-torchrun runs from outside the tree with the installed package (exit $rc)" ||
        why "$out" "$(grep '^PACKAGE_DIR' "$P2/bin/ftrain-torchrun")"
else
    skip "the installed ftrain-torchrun runs" "/usr/bin/python3 with torch is not installed"
fi
make_here uninstall PREFIX="$P2"
ok "$([ $? -eq 0 ] && [ -z "$(find "$P2" ! -type d)" ]; echo $?)" "  make uninstall PREFIX=<it> removes it all" ||
    why "$(find "$P2" ! -type d)"

# ---- uninstall ------------------------------------------------------------------
make_here uninstall DESTDIR="$D" PREFIX="$P"
rc=$?
ok "$rc" "make uninstall DESTDIR=... PREFIX=$P (exit $rc)" || why "$(tail -n 20 "$T/make.out")"
is "$(cd "$D" && find . ! -type d | sort | tr '\n' ' ')" \
    "./usr/local/bin/other-tool ./usr/local/include/ftrain/local-addition.h ./usr/local/lib/libother.so ./usr/local/share/man/man1/other.1 " \
    "  every file it installed is gone, and only those"
like "$(cat "$T/make.out")" "kept '$DP/include/ftrain': it holds files ftrain did not install" \
    "  a directory of ftrain's that holds other files is kept, saying so"
ok "$([ ! -e "$DP/share/ftrain" ]; echo $?)" "  its own empty directory (share/ftrain) is removed"
ok "$([ ! -e "$DP/bin/ftrain-plot" ] && [ ! -e "$DP/share/man/man1/ftrain-plot.1" ]; echo $?)" \
    "  bin/ftrain-plot and its manual page are removed"

# ---- bad directories ------------------------------------------------------------
make_here install DESTDIR="$T/bad" PREFIX=usr/local
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q "install: PREFIX must be an absolute path, not 'usr/local'" "$T/make.out" &&
    [ ! -e "$T/bad" ]; echo $?)" "a relative PREFIX is refused (exit $rc), nothing written" || why "$(cat "$T/make.out")"
make_here install DESTDIR=stage PREFIX=/usr/local
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q "install: DESTDIR must be empty or an absolute path, not 'stage'" "$T/make.out"; echo $?)" \
    "a relative DESTDIR is refused (exit $rc)" || why "$(cat "$T/make.out")"
make_here uninstall DESTDIR="$T/bad" PREFIX="/opt/a b"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q "uninstall: PREFIX '/opt/a b' holds a character other than" "$T/make.out"; echo $?)" \
    "a PREFIX with a blank is refused (exit $rc)" || why "$(cat "$T/make.out")"

done_testing
