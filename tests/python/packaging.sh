#!/bin/sh
# packaging.sh - the Python binding as an installable package
# (python/pyproject.toml, docs/python.md "Installing the package") (TAP).
#
#   1. ftrain_ckpt.__version__ (python/ftrain_ckpt/_version.py, which
#      pyproject.toml reads) is ftrain's version, include/ftrain/version.h:
#      red when the two drift apart;
#   2. py.typed is there, and the public API carries type hints;
#   3. `pip install --no-build-isolation --no-index` of a copy of python/
#      into a venv (--system-site-packages, for numpy and torch) works
#      offline on the system's setuptools, compiles nothing, and installs
#      the package with py.typed and ftrain's version as its metadata; the
#      installed package, run outside the source tree, finds the library
#      through FTRAIN_CKPT_LIB and through the dynamic loader
#      (LD_LIBRARY_PATH), saves and reads back a checkpoint, and without
#      either says where it looked; pip installs the command
#      ftrain-torchrun (ftrain_ckpt.run), which answers --help and refuses
#      a call without a script (exit 2).
#
# Part 3 skips, saying why, when the python ($PYTHON, default
# /usr/bin/python3) has no venv or pip module, numpy, or setuptools 61 or
# later; everything skips when the library is not built.
. "$(dirname "$0")/../lib.sh"

PY=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
[ -x "$PY" ] || skip_all "$PY not found (set PYTHON)"
case $BUILD in /*) bdir=$BUILD ;; *) bdir=$(pwd)/$BUILD ;; esac
[ -f "$bdir/libftrain-ckpt.so.2" ] ||
    skip_all "$BUILD/libftrain-ckpt.so.2 not built (make $BUILD/libftrain-ckpt.so.2)"
lib=$bdir/libftrain-ckpt.so.2
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source tree
plan 15

# ---- 1. the version --------------------------------------------------------------
hv=$(sed -n 's/^#define FTRAIN_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
    "$top/include/ftrain/version.h" | paste -sd. -)
pv=$(cd "$T" && PYTHONPATH=$top/python "$PY" -c 'import ftrain_ckpt as fc; print(fc.__version__)' 2>&1)
is "$pv" "$hv" "ftrain_ckpt.__version__ is ftrain's version (include/ftrain/version.h: $hv)"
like "$(cat "$top/python/pyproject.toml")" 'version = \{attr = "ftrain_ckpt._version.__version__"\}' \
    "pyproject.toml takes the package's version from ftrain_ckpt/_version.py"

# ---- 2. typed ----------------------------------------------------------------------
ok "$([ -f "$top/python/ftrain_ckpt/py.typed" ]; echo $?)" "python/ftrain_ckpt/py.typed is there"
out=$(cd "$T" && PYTHONPATH=$top/python "$PY" -c '
import inspect, ftrain_ckpt as fc
names = ["save", "write_shard", "latest_good", "resume_point", "checkpoint_root", "list_checkpoints",
         "prune", "verify", "step_path", "save_state", "load_state", "rng_state", "set_rng_state",
         "exit_now", "hold_stop_signals", "parse_signal"]
bare = [n for n in names if inspect.signature(getattr(fc, n)).return_annotation is inspect.Signature.empty]
for cls, meths in ((fc.Checkpoint, ["read", "read_slice", "read_range", "verify", "close"]),
                   (fc.StopGuard, ["check"]),
                   (fc.Watchdog, ["phase", "step", "where", "close"])):
    bare += [f"{cls.__name__}.{m}" for m in meths
             if inspect.signature(getattr(cls, m)).return_annotation is inspect.Signature.empty]
print(" ".join(bare) or "all typed")' 2>&1)
is "$out" "all typed" "the public functions and methods carry type hints"

# ---- 3. pip install into a venv, offline -----------------------------------------------
if ! "$PY" -c 'import venv, numpy' 2>/dev/null; then
    skip_n 11 "pip install" "$PY has no venv module or no numpy (apt-get install python3-venv python3-numpy)"
    exit 0
fi
if ! "$PY" -c 'import sys, setuptools; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' 2>/dev/null; then
    skip_n 11 "pip install" "$PY has no setuptools 61 or later (apt-get install python3-setuptools)"
    exit 0
fi
if ! "$PY" -m venv --system-site-packages "$T/venv" >"$T/venv.out" 2>&1 || [ ! -x "$T/venv/bin/pip" ]; then
    skip_n 11 "pip install" "python3 -m venv made no venv with pip (apt-get install python3-venv): $(tail -n 1 "$T/venv.out")"
    exit 0
fi
V=$T/venv/bin/python3
# A copy of python/: pip builds in the directory it is given (build/, egg-info).
mkdir -p "$T/src" && cp -R "$top/python" "$T/src/python" && rm -rf "$T/src/python/build" \
    "$T/src/python/"*.egg-info
(cd "$T" && PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$V" -m pip install \
    --no-build-isolation --no-index ./src/python) >"$T/pip.out" 2>&1
rc=$?
ok $rc "pip install --no-build-isolation --no-index ./python into a venv (exit $rc)" ||
    why "$(tail -n 15 "$T/pip.out")"
site=$("$V" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ok "$([ -f "$site/ftrain_ckpt/__init__.py" ] && [ -f "$site/ftrain_ckpt/py.typed" ]; echo $?)" \
    "the package is in the venv, with py.typed"
sos=$(find "$site/ftrain_ckpt" -name '*.so*' | wc -l)
is "$sos" 0 "nothing compiled: no shared object in the installed package"
mv=$(cd "$T" && "$V" -c 'from importlib.metadata import version; print(version("ftrain-ckpt"))' 2>&1)
is "$mv" "$hv" "the installed distribution's version is ftrain's ($hv)"

# Outside the source tree, with no PYTHONPATH: the venv's copy is the one imported.
pycode='import sys, numpy as np, ftrain_ckpt as fc
assert fc.__file__.startswith(sys.argv[2]), fc.__file__
p = fc.save(sys.argv[1], 5, {"w": np.arange(6, dtype=np.float32)}, comm=fc.SINGLE)
with fc.Checkpoint(fc.resume_point(sys.argv[1], comm=fc.SINGLE)) as ck:
    print(fc.__version__, ck.step, ck.read("w").tolist() == list(range(6)), fc.library_path())'
out=$(cd "$T" && FTRAIN_CKPT_LIB=$lib "$V" -c "$pycode" "$T/r1" "$site" 2>&1)
is "$out" "$hv 5 True $lib" "installed: FTRAIN_CKPT_LIB finds the library; save, resume_point, read"
out=$(cd "$T" && env -u FTRAIN_CKPT_LIB LD_LIBRARY_PATH=$bdir "$V" -c "$pycode" "$T/r2" "$site" 2>&1)
is "$out" "$hv 5 True libftrain-ckpt.so.2" "installed: the dynamic loader finds it (LD_LIBRARY_PATH)"
if ldconfig -p 2>/dev/null | grep -q 'libftrain-ckpt\.so\.2'; then
    skip "installed: no library anywhere" "libftrain-ckpt.so.2 is installed on this system"
else
    out=$(cd "$T" && env -u FTRAIN_CKPT_LIB -u LD_LIBRARY_PATH "$V" -c 'import ftrain_ckpt as fc
try:
    fc.library_path()
except fc.LibraryNotFoundError as e:
    print(e)' 2>&1)
    like "$out" "cannot load libftrain-ckpt.so.2; tried: .*FTRAIN_CKPT_LIB to its path" \
        "installed, no library: LibraryNotFoundError says where it looked and what to do"
fi
out=$(cd "$T" && env -u FTRAIN_CKPT_LIB "$V" -c 'import ftrain_ckpt as fc; print(fc.__version__, fc.EXIT_HANG, fc.Watchdog.__module__)' 2>&1)
is "$out" "$hv 76 ftrain_ckpt.watchdog" "installed: import needs no library (lazy loading); the watchdog is there and needs none either"
like "$(cat "$T/pip.out")" "Successfully installed ftrain-ckpt-$hv" "pip reports ftrain-ckpt-$hv installed"
if [ ! -x "$T/venv/bin/ftrain-torchrun" ]; then
    ok 1 "pip installed the command ftrain-torchrun (no $T/venv/bin/ftrain-torchrun)"
    ok 1 "ftrain-torchrun without a script"
elif ! "$V" -c 'import torch.distributed.run' 2>/dev/null; then
    ok 0 "pip installed the command ftrain-torchrun"
    skip "ftrain-torchrun --help" "no torch with torch.distributed (apt-get install python3-torch)"
else
    out=$(cd "$T" && "$T/venv/bin/ftrain-torchrun" --help 2>&1)
    like "$(printf '%s\n' "$out" | head -n 1) $(printf '%s\n' "$out" | grep '^exit status:')" \
        "^usage: ftrain-torchrun .* exit status: 0 every worker exited 0; 75" \
        "pip installed the command ftrain-torchrun; --help answers"
    out=$(cd "$T" && "$T/venv/bin/ftrain-torchrun" 2>&1)
    rc=$?
    like "$rc $(printf '%s\n' "$out" | tail -n 1)" \
        "^2 ftrain-torchrun: error: the following arguments are required: training_script" \
        "ftrain-torchrun without a script: exit 2, saying so"
fi
