#!/usr/bin/python3
"""py_ckpt.py - the Python binding's checkpoint save and load beside
torch.save / torch.load of the same tensors, and its overhead over the C
library it calls.

The state: with --raw RAWFILE, the tensors `ckpt_bench raw RAWFILE MB`
wrote (RAWFILE.json their table: the state ckpt_bench's own figures use);
otherwise --mb MiB of float32 tensors of 128 MiB each (or fewer MiB),
values N(0, 0.02^2) with full random mantissas, like trained weights.

Timed (each the best of --repeat rounds; building the state is untimed):

  save     fc.save(root, step, tensors, comm=fc.SINGLE), default options
           (zstd level 1, O_DIRECT, fsync'd, committed), and the same
           library call alone (ckpt_save through ctypes with the tensor
           table built before the timer): the difference is what the
           binding adds; torch.save(dict) into a file, flushed and fsync'd
           with its directory.
  load     (best of 2 x --repeat) into fresh memory: fc.Checkpoint(path)
           and read() of every tensor, and torch.load(file).  Most of
           this time is the kernel's for the fresh pages, and it varies
           from one try to the next by more than the binding's share, so
           the overhead is measured on the next line instead.
  into     into tensors that exist (a resume): read(name, out=tensor),
           the same through the bare library calls (ckpt_open,
           ckpt_read_tensor into each tensor's memory), and torch.load +
           copy_.

The page cache is warm for the loads: each file is read once, untimed,
before them (the binding's save writes past the page cache with O_DIRECT).
After the rounds every loaded tensor is compared with the original.
With --ckpt-bench PATH, `PATH save ROOT MB` (the C benchmark: the same
library, its own copy of the state, one rank) runs --repeat times after
the rest, and its best line is printed as it is.

Usage: py_ckpt.py [--raw RAWFILE | --mb 1024] [--repeat 3] [--dir DIR]
                  [--ckpt-bench build/bench/ckpt_bench]
Prints key-value lines (MB are 10^6 bytes of raw state):
  py_ckpt: raw_bytes B tensors N state S repeat R torch V library L
  py_ckpt_save: binding_s S binding_mb_per_s X c_call_s S c_call_mb_per_s X
                overhead_ms D stored_bytes B torch_s S torch_mb_per_s X
                torch_file_bytes B
  py_ckpt_load: into fresh binding_s ... binding_mb_per_s ... torch_s ...
                torch_mb_per_s ... verified yes
  py_ckpt_load: into existing binding_s ... c_calls_s ... overhead_ms ...
                torch_s ... torch_mb_per_s ... verified yes
  ckpt_save: ...   (with --ckpt-bench)
Exit status: 0, or 1 with a message on stderr.
"""
import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def make_state(np, a):
    """{name: float32 array}: from ckpt_bench's raw file, or generated."""
    if a.raw:
        with open(a.raw + ".json") as f:
            table = json.load(f)
        flat = np.fromfile(a.raw, dtype=np.uint8)
        if flat.size != table["total_bytes"]:
            raise ValueError(f"{a.raw}: {flat.size} bytes, its table says {table['total_bytes']}")
        state = {}
        for t in table["tensors"]:
            n = int(np.prod(t["shape"]))
            state[t["name"]] = flat[t["offset"]:t["offset"] + 4 * n].view(np.float32) \
                .reshape(t["shape"]).copy()
        return state, f"raw {a.raw}"
    rng = np.random.default_rng(1)
    left, state, i = a.mb << 20, {}, 0
    while left > 0:
        n = min(left, 128 << 20) // 4
        w = rng.standard_normal(n, dtype=np.float32)
        w *= np.float32(0.02)
        state[f"w{i}"] = w.reshape(-1, 1024) if n % 1024 == 0 else w
        left -= n * 4
        i += 1
    return state, "generated"


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def warm(path):
    """Read a file or a directory's files once (untimed: the page cache)."""
    files = [os.path.join(path, f) for f in os.listdir(path)] if os.path.isdir(path) else [path]
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(16 << 20):
                pass


def du(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw")
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir")
    ap.add_argument("--ckpt-bench")
    a = ap.parse_args()
    try:
        import numpy as np
        import torch
        import ftrain_ckpt as fc
        from ftrain_ckpt import _lib, checkpoint as ckm
        lib = _lib.load()
    except (ImportError, OSError) as e:
        print(f"py_ckpt: {e}", file=sys.stderr)
        return 1
    try:
        state, origin = make_state(np, a)
    except (OSError, ValueError, KeyError) as e:
        print(f"py_ckpt: {e}", file=sys.stderr)
        return 1
    raw = sum(v.nbytes for v in state.values())
    mb = raw / 1e6
    work = tempfile.mkdtemp(prefix="py_ckpt.", dir=a.dir)
    root = os.path.join(work, "ckpt")
    tfile = os.path.join(work, "state.pt")
    tstate = {k: torch.from_numpy(v) for k, v in state.items()}  # views, no copy
    rounds = max(1, a.repeat)
    best = {k: float("inf") for k in ("b_save", "c_save", "t_save", "b_load", "t_load",
                                      "b_into", "c_into", "t_into")}
    ok = True
    try:
        step = 0
        for rnd in range(rounds):
            # save: the binding, the library call alone, torch.save
            for kind in (("b_save", "c_save") if rnd % 2 == 0 else ("c_save", "b_save")):
                step += 1
                if kind == "b_save":
                    t0 = time.perf_counter()
                    path = fc.save(root, step, state, comm=fc.SINGLE)
                    dt = time.perf_counter() - t0
                else:
                    table, n, keep, _total = ckm._table(state)
                    opts = ckm._default_options()
                    c_step = step
                    t0 = time.perf_counter()
                    rc = lib.ckpt_save(os.fsencode(root), step, table, n, b"{}",
                                       ctypes.byref(opts), None)
                    dt = time.perf_counter() - t0
                    del keep
                    if rc != 0:
                        raise fc.errors.error(rc, "ckpt_save")
                best[kind] = min(best[kind], dt)
            # Keep the binding's checkpoint of this round; drop the other.
            shutil.rmtree(fc.step_path(root, c_step))
            if os.path.exists(tfile):
                os.unlink(tfile)
            t0 = time.perf_counter()
            with open(tfile, "wb") as f:
                torch.save(tstate, f)
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(work)
            best["t_save"] = min(best["t_save"], time.perf_counter() - t0)
            stored = du(path)
            # Untimed: one load of each, so that the page cache holds both
            # files and the first timed load pays no first-touch cost.
            warm(path)
            warm(tfile)
            with fc.Checkpoint(path) as ck:
                ck.load()
            torch.load(tfile)
            names = [k.encode() for k in state]
            live = {k: torch.zeros_like(v) for k, v in tstate.items()}  # touched, untimed

            def b_load():
                with fc.Checkpoint(path) as ck:
                    return {k: ck.read(k) for k in ck.tensors}

            def t_load():
                return torch.load(tfile)

            def same(got):
                """got (numpy arrays, raw bytes or tensors) equals the state."""
                if got is None or list(got) != list(state):
                    return False
                for k, v in state.items():
                    g = got[k]
                    g = g.numpy() if isinstance(g, torch.Tensor) else g
                    if g.tobytes() != v.tobytes():
                        return False
                return True

            def b_into():
                with fc.Checkpoint(path) as ck:
                    for k, v in live.items():
                        ck.read(k, out=v)
                return True

            def c_into():
                h = ctypes.c_void_p()
                fc.errors.check(lib.ckpt_open(os.fsencode(path), ctypes.byref(h)), "ckpt_open")
                rc = 0
                for k, v in zip(names, live.values()):
                    rc = rc or lib.ckpt_read_tensor(h, k, v.data_ptr(), v.numel() * 4)
                lib.ckpt_close(h)
                return rc == 0

            def t_into():
                got = torch.load(tfile)
                with torch.no_grad():
                    for k, v in got.items():
                        live[k].copy_(v)
                return True

            # The three ways in turn, twice per round, the order rotated: a
            # load's system time (fresh pages) varies with the machine's
            # state more than between the ways.
            for group in ((b_load, t_load), (b_into, c_into, t_into)) * 2:
                shift = rnd % len(group)
                for fn in group[shift:] + group[:shift]:
                    if fn in (b_into, c_into, t_into):
                        for v in live.values():
                            v.zero_()
                    t0 = time.perf_counter()
                    got = fn()
                    dt = time.perf_counter() - t0
                    best[fn.__name__] = min(best[fn.__name__], dt)
                    if fn in (b_into, c_into, t_into):
                        ok &= bool(got) and all(torch.equal(live[k], v) for k, v in tstate.items())
                    else:
                        ok &= same(got)
                    del got
            live = None  # free before the next round
            shutil.rmtree(path)
        tbytes = os.path.getsize(tfile)
    except (fc.CkptError, OSError) as e:
        print(f"py_ckpt: {e}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 1

    def pair(b, c):
        return (f"binding_s {best[b]:.3f} binding_mb_per_s {mb / best[b]:.1f} "
                f"c_calls_s {best[c]:.3f} c_calls_mb_per_s {mb / best[c]:.1f} "
                f"overhead_ms {1e3 * (best[b] - best[c]):.1f}")

    print(f"py_ckpt: raw_bytes {raw} tensors {len(state)} state {origin} repeat {rounds} "
          f"torch {torch.__version__} numpy {np.__version__} library {fc.library_path()}")
    print(f"py_ckpt: note: saves best of {rounds}, loads best of {2 * rounds}; loads from a warm page cache (each file read "
          f"once before); saves fsync'd, the binding's with O_DIRECT; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"py_ckpt_save: {pair('b_save', 'c_save').replace('c_calls', 'c_call')} "
          f"stored_bytes {stored} torch_s {best['t_save']:.3f} "
          f"torch_mb_per_s {mb / best['t_save']:.1f} torch_file_bytes {tbytes}")
    v = "yes" if ok else "NO"
    print(f"py_ckpt_load: into fresh binding_s {best['b_load']:.3f} binding_mb_per_s "
          f"{mb / best['b_load']:.1f} torch_s {best['t_load']:.3f} "
          f"torch_mb_per_s {mb / best['t_load']:.1f} verified {v}")
    print(f"py_ckpt_load: into existing {pair('b_into', 'c_into')} torch_s {best['t_into']:.3f} "
          f"torch_mb_per_s {mb / best['t_into']:.1f} verified {v}")

    if a.ckpt_bench:
        lines = []
        for i in range(rounds):
            croot = os.path.join(work, f"cb{i}")
            r = subprocess.run([a.ckpt_bench, "save", croot, str(raw >> 20)],
                               capture_output=True, text=True)
            lines += [l for l in r.stdout.splitlines() if l.startswith("ckpt_save:")]
            shutil.rmtree(croot, ignore_errors=True)
        if lines:
            print(max(lines, key=lambda l: float(l.split("mb_per_s ")[1].split()[0])))
        else:
            print(f"py_ckpt: {a.ckpt_bench} save printed no figure: {r.stderr.strip()[-200:]}",
                  file=sys.stderr)
            ok = False
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
