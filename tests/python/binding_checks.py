"""binding_checks.py - one-process checks of the ftrain_ckpt binding, for
tests/python/python_binding.sh.

Usage: binding_checks.py WORKDIR
Prints "plan N" first (N is PLAN below: how many checks a full run makes),
then one line per check, "PASS <name>" or "FAIL <name>: <why>", which the
shell script turns into TAP, failing when the count is not N (so a check
that stops printing is seen); exits 0 when it ran to the end (whatever the
checks said), 1 when it could not run at all.  Adding or removing a check
means changing PLAN.

Checks: save/load round trips of every dtype of the format (numpy arrays and
torch tensors, scalars, empty and 4-D tensors) byte for byte; slices and
byte ranges; zero-copy (the arrays handed to the library are the tensors'
memory); refusals of what the format cannot hold; errors that carry the
library's code, name and message; a flipped byte in a shard raising
CorruptError on read and verify, and latest_good() falling back past it;
list/prune; save_state/load_state of a model and Adam; rng_state; integers
that do not fit their C type refused (never wrapped around), records the
format cannot hold refused before anything is written, a refused load_state
leaving the model untouched, out= refused with a clear message.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ftrain_ckpt as fc  # noqa: E402

# The number of check() calls a full run makes, raises() included.
PLAN = 92
from checks import check, raises, results  # noqa: E402,F401  (tests/python/checks.py)


def flip(path, where=0.5):
    n = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(int(n * where))
        b = f.read(1)
        f.seek(int(n * where))
        f.write(bytes([b[0] ^ 0xFF]))


def every_dtype(rng):
    """A state with every dtype, in numpy and torch form, several shapes."""
    return {
        "np/f32": rng.standard_normal((37, 11)).astype(np.float32),
        "np/f64": rng.standard_normal(1001),
        "np/i64": rng.integers(-2**62, 2**62, size=(3, 4, 5), dtype=np.int64),
        "np/u8": rng.integers(0, 256, size=777, dtype=np.uint8),
        "np/i32": rng.integers(-2**31, 2**31, size=(2, 3, 4, 5), dtype=np.int32),
        "np/scalar": np.array(2.5, dtype=np.float64),
        "np/empty": np.zeros((0, 3), dtype=np.float32),
        "t/f32": torch.randn(64, 64, generator=torch.Generator().manual_seed(1)),
        "t/f64": torch.randn(5, dtype=torch.float64),
        "t/i64": torch.arange(-50, 50, dtype=torch.int64),
        "t/u8": torch.arange(0, 256, dtype=torch.uint8),
        "t/i32": torch.arange(-7, 8, dtype=torch.int32).reshape(3, 5),
        "t/scalar": torch.tensor(7, dtype=torch.int64),
    }


def as_np(v):
    return v.numpy() if isinstance(v, torch.Tensor) else v


def steps_in(root):
    return sorted(e.name for e in fc.list_checkpoints(root)) if os.path.isdir(root) else []


def wrap_checks(work):
    """Integers are range-checked before ctypes sees them: ctypes keeps only
    their low bits (2**32 as a C int is 0)."""
    root = os.path.join(work, "wrap")
    x = {"x": np.zeros(3, np.float32)}
    raises("save(step=2**64+5) is refused, not saved as step 5",
           lambda: fc.save(root, 2**64 + 5, x, comm=fc.SINGLE), ValueError,
           "step 18446744073709551621", "out of range")
    raises("save(step=2**63) is refused (a manifest's step is an int64)",
           lambda: fc.save(root, 2**63, x, comm=fc.SINGLE), ValueError, "step")
    raises("save(step=-1) is refused as negative, not as 2**64-1",
           lambda: fc.save(root, -1, x, comm=fc.SINGLE), ValueError, "step -1 is negative")
    raises("save(step=5.5) is refused, not truncated",
           lambda: fc.save(root, 5.5, x, comm=fc.SINGLE), TypeError, "step", "float")
    raises("level=2**32+3 is refused, not taken as level 3",
           lambda: fc.save(root, 6, x, comm=fc.SINGLE, level=2**32 + 3), ValueError,
           "option level 4294967299", "out of range")
    raises("level=2**40 is refused, not taken as 0 (stored)",
           lambda: fc.save(root, 6, x, comm=fc.SINGLE, level=2**40), ValueError, "option level")
    raises("threads=2**31 is refused naming it, not reported as -2147483648",
           lambda: fc.save(root, 6, x, comm=fc.SINGLE, threads=2**31), ValueError,
           "option threads 2147483648")
    raises("frame_bytes=-1 is refused, not taken as 2**64-1",
           lambda: fc.save(root, 6, x, comm=fc.SINGLE, frame_bytes=-1), ValueError,
           "option frame_bytes -1 is negative")
    check("the refused saves wrote nothing", steps_in(root) == [], steps_in(root))
    raises("step_dirname(2**64+7) is refused, not step-00000007",
           lambda: fc.step_dirname(2**64 + 7), ValueError, "step")
    raises("write_shard(step=2**64+9) is refused", lambda: fc.write_shard(root, 2**64 + 9, x),
           ValueError, "step")
    root = os.path.join(work, "wrap-prune")
    for step in (5, 6, 7):
        fc.save(root, step, x, comm=fc.SINGLE)
    before = steps_in(root)
    removed = None
    try:
        removed = fc.prune(root, 2**32)
    except Exception as e:
        removed = e
    check("prune(keep=2**32) keeps every checkpoint (it is not keep=0)",
          removed == 0 and steps_in(root) == before, f"{removed!r} {steps_in(root)}")
    raises("prune(keep=-2**32) is refused as negative, not taken as keep=0",
           lambda: fc.prune(root, -2**32), ValueError, "keep -4294967296 is negative")
    raises("prune(keep_good=True, keep=-1) is refused",
           lambda: fc.prune(root, -1, keep_good=True), ValueError, "keep -1 is negative")
    check("  and nothing was removed", steps_in(root) == before, steps_in(root))
    with fc.Checkpoint(os.path.join(root, "step-00000005")) as ck:
        raises("read_range(offset=-1) is refused, not read at 2**64-1",
               lambda: ck.read_range(-1, 4), ValueError, "offset -1 is negative")
        raises("set_read_threads(2**32+1) is refused, not taken as 1",
               lambda: ck.set_read_threads(2**32 + 1), ValueError, "threads")
        raises("read_slice(start=0.5) is refused", lambda: ck.read_slice("x", 0.5), TypeError,
               "start")
    guard = fc.StopGuard()
    raises("StopGuard.check(2**64+3) is refused, not agreed as step 3",
           lambda: guard.check(2**64 + 3), ValueError, "step 18446744073709551619")
    raises("StopGuard.check(-1) is refused as negative",
           lambda: guard.check(-1), ValueError, "step -1 is negative")
    check("StopGuard.check(5) still works after them", guard.check(5) is None)


def record_checks(work):
    """A record integer outside int64 is refused in Python, naming it, before
    anything is written."""
    root = os.path.join(work, "rec")
    x = {"x": np.zeros(3, np.float32)}
    for value in (2**63, -2**63 - 1, 2**64 - 1):
        raises(f"a record integer {value} is refused naming its key",
               lambda: fc.save(root, 1, x, record={"seed": value}, comm=fc.SINGLE), ValueError,
               "record['seed']", str(value), "out of range")
    raises("  and one deep inside names its path",
           lambda: fc.save(root, 1, x, record={"rng": {"s": [1, 2**70]}}, comm=fc.SINGLE),
           ValueError, "record['rng']['s'][1]")
    for bad in (float("nan"), float("inf"), -float("inf")):
        raises(f"a record float {bad} deep inside is refused naming its path",
               lambda: fc.save(root, 1, x, record={"deep": {"x": [0.5, bad]}}, comm=fc.SINGLE),
               ValueError, "record['deep']['x'][1]", "not a JSON number")
    raises("a value JSON cannot hold deep inside names its path and type",
           lambda: fc.save(root, 1, x, record={"deep": {"x": object()}}, comm=fc.SINGLE),
           TypeError, "record['deep']['x'] is of type object")
    loop = {"a": []}
    loop["a"].append(loop)
    raises("a record that holds itself is refused naming where",
           lambda: fc.save(root, 1, x, record=loop, comm=fc.SINGLE), ValueError,
           "record['a'][0] holds itself")
    check("  nothing was written (not even a temp dir)",
          not os.path.exists(root) or os.listdir(root) == [],
          os.listdir(root) if os.path.exists(root) else "")
    p = fc.write_shard(root, 2, x)
    raises("PendingSave.commit refuses it too", lambda: p.commit({"seed": 2**63}), ValueError,
           "record['seed']")
    check("  and removes the shard it had written", steps_in(root) == [], steps_in(root))
    p = fc.save(root, 3, x, record={"big": 2**63 - 1, "small": -2**63}, comm=fc.SINGLE)
    with fc.Checkpoint(p) as ck:
        check("the int64 limits themselves are kept",
              ck.record == {"big": 2**63 - 1, "small": -2**63}, ck.record)


def refused_load_checks(work):
    """load_state checks everything (optimizer, extra) before it reads any
    tensor into the model: a refused load leaves the model untouched."""
    torch.manual_seed(3)
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    root = os.path.join(work, "refused")
    p = fc.save_state(root, 1, m, opt, extra={"e": torch.zeros(2)}, comm=fc.SINGLE)
    p_no_opt = fc.save_state(root, 2, m, comm=fc.SINGLE)

    def attempt(name, make_opt, extra=None, source=p, *needles):
        torch.manual_seed(4)
        m2 = torch.nn.Linear(4, 3)
        before = [t.detach().clone() for t in m2.state_dict().values()]
        o2 = make_opt(m2) if make_opt else None
        o_before = o2.state_dict() if o2 else None
        raises(f"load_state with {name} is refused", lambda: fc.load_state(source, m2, o2,
                                                                            extra=extra),
               ValueError, *needles)
        check(f"  and leaves the model untouched ({name})",
              all(torch.equal(a, b) for a, b in zip(before, m2.state_dict().values())))
        if o2 is not None:
            check(f"  and the optimizer ({name})", o2.state_dict()["state"] == o_before["state"])

    attempt("SGD for Adam", lambda mm: torch.optim.SGD(mm.parameters(), lr=0.1), None, p,
            "Adam's, not SGD's")
    attempt("an optimizer that was not saved", lambda mm: torch.optim.Adam(mm.parameters()),
            None, p_no_opt, "no optimizer state was saved")
    attempt("an optimizer of other parameters", lambda mm: torch.optim.Adam([mm.weight]), None,
            p, "parameter group 0 has 1 parameters")
    attempt("an extra name the checkpoint lacks", lambda mm: torch.optim.Adam(mm.parameters()),
            {"nope": torch.zeros(2)}, p, "extra 'nope' is not in the checkpoint")
    attempt("an extra of another size", None, {"e": torch.zeros(3)}, p, "extra 'e'",
            "2 x float32")
    e = torch.ones(2)
    fc.load_state(p, torch.nn.Linear(4, 3), extra={"e": e})
    check("an accepted load still reads extra in place", torch.equal(e, torch.zeros(2)), e)


def out_checks(work):
    """out= must be the memory read into: a clear message, once quoted."""
    root = os.path.join(work, "out")
    p = fc.save(root, 1, {"x": np.arange(16, dtype=np.float32).reshape(4, 4),
                          "w": np.zeros(3, np.float32)}, comm=fc.SINGLE)
    with fc.Checkpoint(p) as ck:
        try:
            ck.read("x", out=torch.empty(4, 4).t())
            msg = "no exception"
        except ValueError as ex:
            msg = str(ex)
        check("a non-contiguous out= is refused, naming the tensor once, not about saving",
              msg.startswith("tensor 'x': out is not contiguous") and "tensor 'tensor" not in msg
              and "saving" not in msg and ".contiguous()" not in msg, msg)
        try:
            ck.read("w", out=torch.empty(3, dtype=torch.float16))
            msg = "no exception"
        except ValueError as ex:
            msg = str(ex)
        check("a float16 out= says what it holds and what the checkpoint has",
              msg == "tensor 'w': out holds 3 x float16, the checkpoint has 3 x float32", msg)
        raises("a non-contiguous numpy out= is refused",
               lambda: ck.read("x", out=np.empty((4, 4), np.float32).T), ValueError,
               "tensor 'x': out is not contiguous")
    f = os.path.join(work, "a-file")
    open(f, "w").close()
    raises("Checkpoint(a regular file) is InvalidArgumentError, not a damaged checkpoint",
           lambda: fc.Checkpoint(f), fc.InvalidArgumentError, "not a directory")
    raises("a tensor name that is not UTF-8 (a lone surrogate) is refused naming it",
           lambda: fc.save(root, 2, {"a\udcff": np.zeros(1, np.float32)}, comm=fc.SINGLE),
           ValueError, "not valid UTF-8")


def main():
    if len(sys.argv) != 2:
        print("usage: binding_checks.py WORKDIR", file=sys.stderr)
        return 1
    print(f"plan {PLAN}", flush=True)
    work = sys.argv[1]
    root = os.path.join(work, "ckpt")
    rng = np.random.default_rng(42)
    state = every_dtype(rng)

    # --- round trips ---------------------------------------------------
    p = fc.save(root, 1, state, record={"epoch": 3, "note": "every dtype"}, comm=fc.SINGLE)
    check("save returns the step directory", p == os.path.join(root, "step-00000001"), p)
    with fc.Checkpoint(p) as ck:
        check("record comes back", ck.record == {"epoch": 3, "note": "every dtype"}, ck.record)
        check("tensor names in save order", list(ck.tensors) == list(state), list(ck.tensors))
        bad = []
        for name, v in state.items():
            a = as_np(v)
            got = ck.read(name)
            if got.dtype != a.dtype or got.shape != a.shape or got.tobytes() != a.tobytes():
                bad.append(f"{name}: {got.dtype}{got.shape} vs {a.dtype}{a.shape}")
        check("every dtype round-trips byte for byte (f32 f64 i64 u8 i32, numpy and torch, "
              "scalar, empty, 4-D)", not bad, "; ".join(bad))
        dtypes = {ck.tensors[n].dtype.name for n in ck.tensors}
        check("the manifest holds all five dtypes",
              dtypes == {"float32", "float64", "int64", "uint8", "int32"}, dtypes)
        t = torch.empty(64, 64)
        r = ck.read("t/f32", out=t)
        check("read into a torch tensor in place", r is t and torch.equal(t, state["t/f32"]))
        s = ck.read_slice("np/f64", 100, 900)
        check("read_slice gives elements [lo, hi) of the flattened tensor",
              s.tobytes() == state["np/f64"][100:900].tobytes())
        info = ck.tensors["np/u8"]
        rr = ck.read_range(info.offset + 5, 10)
        check("read_range gives bytes of the flat space", rr.tobytes() == state["np/u8"][5:15].tobytes())
        raises("an unknown tensor is NotFoundError", lambda: ck.read("nope"), fc.NotFoundError, "nope")
        raises("a wrongly typed out= is refused", lambda: ck.read("np/f32", out=np.empty((37, 11))),
               ValueError, "float32")
        ck.verify()
        check("verify passes on a good checkpoint", True)

    # --- zero copy -----------------------------------------------------
    t = torch.randn(1000)
    a = fc.as_array("t", t)
    check("a CPU tensor is handed over without a copy (same memory)",
          a.ctypes.data == t.data_ptr() and np.shares_memory(a, t.numpy()))
    n = np.arange(12, dtype=np.int32)
    check("a numpy array is handed over as itself", fc.as_array("n", n) is n)

    # --- refusals ------------------------------------------------------
    raises("float16 is refused with the dtypes the format has",
           lambda: fc.save(root, 2, {"h": torch.zeros(3, dtype=torch.float16)}, comm=fc.SINGLE),
           TypeError, "float16", "f32, f64, i64, u8, i32")
    raises("bfloat16 is refused", lambda: fc.save(root, 2, {"h": torch.zeros(3, dtype=torch.bfloat16)},
                                                  comm=fc.SINGLE), TypeError, "bfloat16")
    raises("bool is refused", lambda: fc.save(root, 2, {"b": np.zeros(3, dtype=bool)}, comm=fc.SINGLE),
           TypeError, "bool")
    raises("a big-endian array is refused",
           lambda: fc.save(root, 2, {"be": np.zeros(3, dtype=">f4")}, comm=fc.SINGLE), TypeError, ">f4")
    raises("a non-contiguous tensor is refused, not copied",
           lambda: fc.save(root, 2, {"nc": torch.zeros(4, 4).t()}, comm=fc.SINGLE), ValueError,
           "contiguous")
    raises("5 dimensions are refused", lambda: fc.save(root, 2, {"5d": np.zeros((1,) * 5, np.float32)},
                                                       comm=fc.SINGLE), ValueError, "at most 4")
    raises("a record that is not JSON is refused",
           lambda: fc.save(root, 2, {"x": np.zeros(1, np.float32)}, record={"f": object()},
                           comm=fc.SINGLE), TypeError, "object")
    raises("a control character in a name: InvalidArgumentError with the library's message",
           lambda: fc.save(root, 2, {"a\x01b": np.zeros(1, np.float32)}, comm=fc.SINGLE),
           fc.InvalidArgumentError, "ckpt_layout", "invalid argument")
    check("a refused save left no step behind", not os.path.exists(os.path.join(root, "step-00000002")))

    # --- errors carry the library's code, name and message -----------
    try:
        fc.save(root, 1, {"x": np.zeros(1, np.float32)}, comm=fc.SINGLE)
        check("saving a committed step again is ExistsError", False, "no exception")
    except fc.ExistsError as e:
        check("saving a committed step again is ExistsError with code, name and message",
              e.code == -9 and e.reason == fc.strerror(-9) and "step-00000001" in e.detail
              and e.reason in str(e) and e.detail in str(e), f"{e.code} {e.reason!r} {e.detail!r}")
    try:
        fc.Checkpoint(os.path.join(work, "no-such-dir"))
        check("opening a missing checkpoint is NotFoundError", False, "no exception")
    except fc.NotFoundError as e:
        check("opening a missing checkpoint is NotFoundError naming the path",
              "no-such-dir" in str(e) and str(e).startswith("ckpt_open: "), str(e))
    check("error classes form families", issubclass(fc.CorruptError, fc.BadCheckpointError)
          and issubclass(fc.BadCheckpointError, fc.CkptError)
          and issubclass(fc.InvalidArgumentError, ValueError))

    # --- a corrupted shard ------------------------------------------------
    big = {"w": np.random.default_rng(1).standard_normal(300000).astype(np.float32)}
    fc.save(root, 3, big, comm=fc.SINGLE, level=1)
    p3 = fc.save(root, 4, big, comm=fc.SINGLE, level=1)
    flip(os.path.join(p3, "shard-0.ftsh"), 0.5)
    with fc.Checkpoint(p3) as ck:
        raises("reading a tensor of a corrupted shard raises CorruptError", lambda: ck.read("w"),
               fc.CorruptError, "ckpt_read_tensor", "shard-0.ftsh")
        raises("verify of a corrupted shard raises CorruptError", ck.verify, fc.CorruptError,
               "ckpt_verify")
    skipped = []
    good = fc.latest_good(root, on_skip=lambda name, why: skipped.append((name, why)), comm=fc.SINGLE)
    check("latest_good skips the corrupt step and returns the one before",
          good == os.path.join(root, "step-00000003") and skipped and skipped[0][0] == "step-00000004",
          f"{good} {skipped}")
    entries = fc.list_checkpoints(root, verify=True)
    status = {e.name: e.status for e in entries}
    check("list_checkpoints(verify=True) marks it corrupt",
          status.get("step-00000004") == "corrupt" and status.get("step-00000003") == "committed",
          status)
    check("latest_good of an empty root is None",
          fc.latest_good(os.path.join(work, "empty"), comm=fc.SINGLE) is None)
    removed = fc.prune(root, 1, keep_good=True)
    left = [e.name for e in fc.list_checkpoints(root)]
    check("prune(keep_good=True) keeps the newest good one", "step-00000003" in left, f"{removed} {left}")

    # --- a model and its optimizer ------------------------------------
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
    rng_before = fc.rng_state()
    draws = torch.rand(3)
    sroot = os.path.join(work, "state")
    fc.save_state(sroot, 3, model, opt, record={"step": 3, "rng": rng_before}, comm=fc.SINGLE)
    torch.manual_seed(99)
    model2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-3)
    rec = fc.load_state(fc.latest_good(sroot, comm=fc.SINGLE), model2, opt2)
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                  model2.state_dict().values()))
    check("load_state restores the model's parameters exactly", same)
    s1, s2 = opt.state_dict(), opt2.state_dict()
    same_opt = all(torch.equal(s1["state"][i][k], s2["state"][i][k])
                   for i in s1["state"] for k in s1["state"][i]) and \
        s1["param_groups"][0]["lr"] == s2["param_groups"][0]["lr"]
    check("load_state restores Adam's moments, step and lr", same_opt)
    check("load_state returns the caller's record", rec.get("step") == 3 and "torch_state" not in rec,
          list(rec))
    fc.set_rng_state(rec["rng"])
    check("rng_state round-trips (same draws after restore)", torch.equal(torch.rand(3), draws))
    opt.zero_grad()
    opt2.zero_grad()
    x = torch.randn(5, 4)
    model(x).pow(2).sum().backward()
    model2(x).pow(2).sum().backward()
    opt.step()
    opt2.step()
    check("the next step after load_state is the same step",
          all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters())))
    small = torch.nn.Linear(4, 3)
    raises("load_state into another architecture names the tensor",
           lambda: fc.load_state(fc.latest_good(sroot, comm=fc.SINGLE), torch.nn.Sequential(small)),
           ValueError, "0.weight")

    wrap_checks(work)
    record_checks(work)
    refused_load_checks(work)
    out_checks(work)

    # --- the library's location -----------------------------------------
    check("library_path() says where the library came from", os.path.exists(fc.library_path())
          or fc.library_path() == fc.SONAME, fc.library_path())
    print(f"{len(results)} checks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
