#!/bin/sh
# python_numpy.sh - the Python binding (python/ftrain_ckpt, docs/python.md)
# with numpy alone, and load_state(strict=False) (TAP).
#
#   1. numpy only (tests/python/numpy_checks.py numpy), with torch hidden: a
#      directory first on PYTHONPATH holds a torch.py that raises
#      ImportError, so these checks pass on a machine without torch and
#      show that none of them needs it: save and load of numpy arrays of
#      every dtype in a world of one, in-place reads, slices, byte ranges,
#      the two phases, an existing step never replaced, refusals, list,
#      latest_good past a damaged shard, prune, and load_state of `extra`
#      arrays (a refused one reading nothing).
#   2. load_state(strict=False) (numpy_checks.py strict; a model is a torch
#      module, so this part needs torch and skips, saying so, without it):
#      what strict=True refuses (a tensor missing in the checkpoint or in
#      the model) strict=False loads, leaving the model's other tensors as
#      they were; a shape or dtype that differs is refused either way.
#
# Skips, with the reason, when the python ($PYTHON, default /usr/bin/python3)
# lacks numpy, or when the library is not built ($BUILD/libftrain-ckpt.so.2,
# or FTRAIN_CKPT_LIB).
. "$(dirname "$0")/../lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
need_python numpy
need_ckpt_lib
pkg=$(cd "$here/../../python" && pwd)

# The checks each part makes (numpy_checks.py's NUMPY_CHECKS and
# STRICT_CHECKS, each stated by its "plan" line), one for each part's count
# of them (tests/lib.sh's tap_from) and one for its run to its end.
NUMPY_CHECKS=42
STRICT_CHECKS=14
plan $((NUMPY_CHECKS + 2 + STRICT_CHECKS + 2))

# ---- 1. numpy only, torch hidden -------------------------------------------------
mkdir -p "$T/notorch" "$T/np"
cat >"$T/notorch/torch.py" <<'PYEOF'
raise ImportError("torch is hidden by tests/python/python_numpy.sh: these checks must not need it")
PYEOF
PYTHONPATH="$T/notorch:$pkg" timeout -k 5 120 "$PY" "$here/numpy_checks.py" numpy "$T/np" \
    >"$T/np.out" 2>&1
rc=$?
tap_from "$T/np.out" "numpy_checks.py numpy"
ok $rc "numpy_checks.py numpy ran to its end with torch hidden" || why "$(tail -n 20 "$T/np.out")"

# ---- 2. load_state(strict=False) -------------------------------------------------
mkdir -p "$T/strict"
if "$PY" -c 'import torch' 2>/dev/null; then
    PYTHONPATH="$pkg" timeout -k 5 120 "$PY" "$here/numpy_checks.py" strict "$T/strict" \
        >"$T/strict.out" 2>&1
    rc=$?
    tap_from "$T/strict.out" "numpy_checks.py strict"
    ok $rc "numpy_checks.py strict ran to its end" || why "$(tail -n 20 "$T/strict.out")"
else
    i=0
    while [ "$i" -le $((STRICT_CHECKS + 1)) ]; do
        skip "load_state strict check $i" "$PY has no torch (apt-get install python3-torch): a model is a torch module"
        i=$((i + 1))
    done
fi

done_testing
