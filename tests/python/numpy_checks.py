"""numpy_checks.py - the ftrain_ckpt binding used with numpy alone, and
load_state(strict=False), for tests/python/python_numpy.sh.

Usage: numpy_checks.py numpy WORKDIR    (torch must not be importable)
       numpy_checks.py strict WORKDIR   (needs torch)

Prints one line per check, "PASS <name>" or "FAIL <name>: <why>", which the
shell script turns into TAP; its plan holds the number of checks each mode
makes (NUMPY_CHECKS and STRICT_CHECKS below), so a check that stops
printing is seen.  Every check runs whatever the ones before it said (an
exception inside one is its failure).  Exits 0 when it ran to the end, 1
when it could not run at all.

numpy: a world of one with numpy arrays only: save and load of every dtype
the format stores (scalars, empty and 4-D arrays), in-place reads, slices and
byte ranges, the two phases (write_shard, commit), verify, list, latest_good,
prune, refusals, an existing step never replaced, a damaged shard found, and
load_state() of `extra` arrays (the part of it that needs no torch); torch
is never imported.

strict: load_state() of a model whose keys differ from the checkpoint's:
with strict=True a tensor missing on either side is refused and the model is
left untouched; with strict=False the tensors both have are loaded and the
model's others are left as they were; a shape or dtype that differs is
refused either way.
"""
import os
import sys

NUMPY_CHECKS = 42
STRICT_CHECKS = 14

count = 0


def report(name, cond, why=""):
    global count
    count += 1
    print(f"PASS {name}" if cond else f"FAIL {name}: {why}", flush=True)
    return cond


def check(name, fn):
    """fn() returns True, or (False, why); an exception is a failure."""
    try:
        got = fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
        return report(name, False, f"raised {type(e).__name__}: {e}")
    if isinstance(got, tuple):
        return report(name, bool(got[0]), got[1])
    return report(name, bool(got), "")


def raises(name, fn, exc, *needles):
    """fn() must raise exc with every needle in its message."""
    try:
        fn()
    except exc as e:
        missing = [n for n in needles if n not in str(e)]
        return report(name, not missing, f"message lacks {missing}: {e}")
    except Exception as e:  # noqa: BLE001
        return report(name, False, f"raised {type(e).__name__}: {e}, wanted {exc.__name__}")
    return report(name, False, f"no exception, wanted {exc.__name__}")


def numpy_mode(work):
    try:
        import torch  # noqa: F401
        torch_blocked = (False, "torch imported: the check would not show that torch is unneeded")
    except ImportError as e:
        torch_blocked = (True, str(e))
    report("torch cannot be imported in this process", *torch_blocked)

    import numpy as np
    import ftrain_ckpt as fc

    report("the library is found", os.path.exists(fc.library_path()), fc.library_path())
    report("the default collective is this process alone (no torch.distributed)",
           fc.default_comm() is fc.SINGLE, repr(fc.default_comm()))

    rng = np.random.default_rng(7)
    arrays = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f64": rng.standard_normal(5),
        "i64": rng.integers(-2**62, 2**62, size=(2, 2, 2), dtype=np.int64),
        "u8": rng.integers(0, 256, size=7, dtype=np.uint8),
        "i32": rng.integers(-2**31, 2**31, size=(1, 2, 1, 3), dtype=np.int32),
        "scalar": np.array(3.25, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    root = os.path.join(work, "ckpt")
    record = {"epoch": 3, "cursor": 640, "note": "numpy only", "loss": [0.5, 0.25]}
    path = fc.save(root, 1, arrays, record=record)
    report("save returns the step directory", path == os.path.join(root, "step-00000001"), path)

    ck = fc.Checkpoint(path)
    report("the checkpoint has step 1, one shard and the record",
           ck.step == 1 and ck.world_size == 1 and ck.record == record,
           f"{ck.step} {ck.world_size} {ck.record}")
    report("its tensors are the dict's, in its order", list(ck.tensors) == list(arrays),
           list(ck.tensors))
    infos = {n: (i.dtype.name, i.shape) for n, i in ck.tensors.items()}
    want = {n: (a.dtype.name, a.shape) for n, a in arrays.items()}
    report("each tensor has its array's dtype and shape", infos == want, f"{infos} != {want}")
    for name, a in arrays.items():
        check(f"read('{name}') gives the array back, byte for byte",
              lambda a=a, name=name: (lambda r: (r.dtype == a.dtype and r.shape == a.shape and
                                                 r.tobytes() == a.tobytes(), repr(r)))(ck.read(name)))
    check("read_range of each tensor's bytes is the array's memory",
          lambda: all(bytes(ck.read_range(i.offset, i.nbytes)) == arrays[n].tobytes()
                      for n, i in ck.tensors.items()))
    out = np.zeros((2, 2, 2), dtype=np.int64)
    check("read(out=) fills an existing array in place and returns it",
          lambda: ck.read("i64", out=out) is out and np.array_equal(out, arrays["i64"]))
    check("read_slice gives elements [2, 6) of the flattened array",
          lambda: np.array_equal(ck.read_slice("i32", 2, 6), arrays["i32"].reshape(-1)[2:6]))
    check("load() gives every array", lambda: (lambda d: list(d) == list(arrays) and all(
        np.array_equal(d[n], arrays[n]) for n in arrays))(ck.load()))
    check("verify() re-reads every byte without complaint", lambda: ck.verify() is None)
    ck.close()
    raises("a wrong out= dtype is refused, naming both", lambda: fc.Checkpoint(path).read(
        "f32", out=np.zeros(6, dtype=np.float64)), ValueError, "float64", "float32")

    # The two phases, as a training loop with a background writer runs them.
    b = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "step": np.array(2, np.int64)}
    pending = fc.write_shard(root, 2, b)
    report("write_shard (phase one) wrote this rank's shard", pending.ok)
    p2 = pending.commit({"epoch": 4})
    check("commit (phase two) makes step 2, which reads back",
          lambda: p2 == fc.step_path(root, 2) and np.array_equal(fc.Checkpoint(p2).read("w"), b["w"]))

    # An existing step is never replaced.
    raises("saving step 1 again raises ExistsError", lambda: fc.save(root, 1, b), fc.ExistsError,
           "already exists")
    check("  and step 1 still holds its own arrays", lambda: np.array_equal(
        fc.Checkpoint(path).read("f64"), arrays["f64"]))

    # What the format cannot hold is refused before anything is written.
    before = sorted(os.listdir(root))
    raises("a float16 array is refused, naming it", lambda: fc.save(
        root, 3, {"h": np.zeros(2, np.float16)}), TypeError, "'h'", "float16")
    raises("a big-endian array is refused", lambda: fc.save(
        root, 3, {"be": np.zeros(2, ">f4")}), TypeError, "'be'")
    raises("a non-contiguous array is refused", lambda: fc.save(
        root, 3, {"t": np.zeros((4, 4), np.float32)[:, 1]}), ValueError, "'t'", "contiguous")
    raises("a record with a NaN is refused", lambda: fc.save(
        root, 3, b, record={"loss": float("nan")}), ValueError, "record['loss']")
    report("the refused saves wrote nothing", sorted(os.listdir(root)) == before,
           f"{before} -> {sorted(os.listdir(root))}")

    # Managing the root.
    entries = fc.list_checkpoints(root, verify=True)
    report("list_checkpoints: steps 1 and 2, committed, 2 the latest",
           [(e.step, e.status, e.is_latest) for e in entries] ==
           [(1, "committed", False), (2, "committed", True)], entries)
    report("latest_good is step 2", fc.latest_good(root) == p2, fc.latest_good(root))
    shard = os.path.join(p2, "shard-0.ftsh")
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(shard, "wb") as f:
        f.write(data)
    raises("a flipped byte in step 2's shard: verify raises CorruptError",
           lambda: fc.verify(p2), fc.CorruptError)
    report("  and latest_good falls back to step 1", fc.latest_good(root) == path,
           fc.latest_good(root))
    removed = fc.prune(root, 1, keep_good=True)
    left = sorted(e.name for e in fc.list_checkpoints(root))
    report("prune(keep=1, keep_good=True) keeps step 2 (newest) and step 1 (newest good)",
           removed == 0 and left == ["step-00000001", "step-00000002"], f"{removed} {left}")
    report("prune(keep=1) then removes step 1", fc.prune(root, 1) == 1 and
           [e.name for e in fc.list_checkpoints(root)] == ["step-00000002"],
           [e.name for e in fc.list_checkpoints(root)])

    # load_state with `extra` only: numpy arrays in, no model, no torch.  The
    # checkpoint is laid out as save_state lays out extra tensors
    # ("extra/<key>", the "torch_state" record entry).
    sroot = os.path.join(work, "state")
    meta = {"format": "ftrain-torch-state", "version": 1, "extra_keys": ["a", "b"]}
    a0 = np.linspace(0, 1, 6).astype(np.float32)
    b0 = np.arange(3, dtype=np.int64)
    spath = fc.save(sroot, 5, {"extra/a": a0, "extra/b": b0},
                    record={"torch_state": meta, "epoch": 2})
    a, bb = np.zeros(6, np.float32), np.zeros(3, np.int64)
    check("load_state(extra=numpy arrays) reads them in place and returns the caller's record",
          lambda: (lambda rec: (rec == {"epoch": 2} and np.array_equal(a, a0) and
                                np.array_equal(bb, b0), f"{rec} {a} {bb}"))(
              fc.load_state(spath, extra={"a": a, "b": bb})))
    a[:] = 0
    raises("load_state with an extra the checkpoint lacks is refused, naming it",
           lambda: fc.load_state(spath, extra={"a": a, "zz": np.zeros(1)}), ValueError,
           "extra 'zz' is not in the checkpoint")
    report("  and reads nothing (the good extra is left as it was)", not a.any(), a)
    raises("strict=False does not waive a missing extra (strict is about the model)",
           lambda: fc.load_state(spath, extra={"zz": np.zeros(1)}, strict=False), ValueError,
           "extra 'zz'")
    raises("an extra of another dtype is refused, saying what it is",
           lambda: fc.load_state(spath, extra={"a": np.zeros(6, np.float64)}), ValueError,
           "float64", "float32")
    raises("load_state of a plain save's checkpoint (step 2) is refused: no save_state record",
           lambda: fc.load_state(p2, extra={}), ValueError, "not a save_state() checkpoint")

    report("torch was never imported", "torch" not in sys.modules or sys.modules["torch"] is None,
           sys.modules.get("torch"))
    return NUMPY_CHECKS


def strict_mode(work):
    import torch
    import ftrain_ckpt as fc

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        """a -> b, and optionally a third layer c; `wide` changes a's shape."""

        def __init__(self, a=True, b=True, c=False, wide=False):
            super().__init__()
            if a:
                self.a = torch.nn.Linear(3, 5 if wide else 4)
            if b:
                self.b = torch.nn.Linear(4, 2)
            if c:
                self.c = torch.nn.Linear(2, 2)

    def state(m):
        return {k: v.clone() for k, v in m.state_dict().items()}

    def same(m, want, keys=None):
        sd = m.state_dict()
        keys = list(want) if keys is None else keys
        diff = [k for k in keys if not torch.equal(sd[k], want[k])]
        return (not diff, f"differ: {diff}")

    src = Net()
    saved = state(src)
    root = os.path.join(work, "ckpt")
    path = fc.save_state(root, 1, src, record={"step": 1})

    # The model has a layer the checkpoint lacks.
    more = Net(c=True)
    own = state(more)
    raises("strict: a model key missing in the checkpoint is refused, naming it",
           lambda: fc.load_state(path, more), ValueError, "missing in the checkpoint: c.weight, c.bias")
    check("  and the model is untouched", lambda: same(more, own))
    check("strict=False: the same load is accepted, returning the record",
          lambda: fc.load_state(path, more, strict=False) == {"step": 1})
    check("  the tensors both have are the checkpoint's", lambda: same(more, saved))
    check("  and the model's own layer c is left as it was",
          lambda: same(more, own, ["c.weight", "c.bias"]))

    # The checkpoint has a layer the model lacks.
    less = Net(b=False)
    own = state(less)
    raises("strict: a checkpoint tensor the model lacks is refused, naming it",
           lambda: fc.load_state(path, less), ValueError, "not in the model: b.bias, b.weight")
    check("  and the model is untouched", lambda: same(less, own))
    check("strict=False: the same load is accepted", lambda: fc.load_state(path, less, strict=False)
          == {"step": 1})
    check("  and loads the layer both have", lambda: same(less, saved, ["a.weight", "a.bias"]))

    # Shapes and dtypes are checked whatever strict says.
    wide = Net(c=True, wide=True)
    own = state(wide)
    raises("strict=False: a shape that differs is refused, naming it",
           lambda: fc.load_state(path, wide, strict=False), ValueError,
           "'a.weight' is [5, 3] float32 in the model, [4, 3] float32 in the checkpoint")
    check("  and the model is untouched (not even the tensors that match)", lambda: same(wide, own))
    dbl = Net().double()
    own = state(dbl)
    raises("strict=False: a dtype that differs is refused, naming it",
           lambda: fc.load_state(path, dbl, strict=False), ValueError, "float64 in the model")
    check("  and the model is untouched", lambda: same(dbl, own))
    # Both sides differ at once: strict=False accepts, strict names both.
    raises("strict: keys missing on both sides are named in one error",
           lambda: fc.load_state(path, Net(b=False, c=True)), ValueError,
           "missing in the checkpoint: c.weight, c.bias", "not in the model: b.bias, b.weight")
    return STRICT_CHECKS


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("numpy", "strict"):
        print(__doc__, file=sys.stderr)
        return 1
    print(f"plan {NUMPY_CHECKS if sys.argv[1] == 'numpy' else STRICT_CHECKS}", flush=True)
    planned = numpy_mode(sys.argv[2]) if sys.argv[1] == "numpy" else strict_mode(sys.argv[2])
    if count != planned:
        print(f"FAIL {sys.argv[1]}: {count} checks ran, {planned} planned (update the count)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
