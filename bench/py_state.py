#!/usr/bin/python3
"""py_state.py - a PyTorch user's checkpoint of a whole model:
ftrain_ckpt.save_state / load_state beside torch.save / torch.load of the
same model, each at its best.

The model: an nn.Sequential of Linear layers of --width (8192 by default)
holding about --mb MiB of float32 parameters (1024: four 8192 x 8192
layers), with trained-like values (N(0, 0.02^2), full random mantissas),
and with --optimizer an Adam whose state (step, exp_avg, exp_avg_sq) has
been filled by one step, which triples what is saved.

Timed (each the best of --repeat rounds):

  save   fc.save_state(dir, step, model[, optimizer]) with its defaults
         (zstd level 1, O_DIRECT, fsync'd, one atomic commit) and stored
         (level=0: no compression, the same durability), against
         torch.save({"model": model.state_dict()[, "optimizer": ...]},
         file) with the file flushed and fsync'd and its directory
         fsync'd (without the fsync torch.save is not durable, so that is
         the peer's honest best for a checkpoint).
  resume (page cache warm, as after a save on the same node) into the
         model and optimizer that exist: fc.load_state(dir, model[,
         optimizer]) against torch.load(file) followed by
         model.load_state_dict (and optimizer.load_state_dict), the way a
         PyTorch script resumes.  torch.load is given its best map:
         mmap=True where this PyTorch has it (2.1 and later), else the
         plain read.

After the rounds the model's parameters are compared with what was saved.

Usage: py_state.py [--mb 1024] [--width 8192] [--optimizer] [--repeat 3]
                   [--dir DIR]
Prints key-value lines (MB are 10^6 bytes of parameters and state):
  py_state: state_bytes B tensors N optimizer yes|no repeat R torch V
  py_state_save: ftrain_s S ftrain_mb_per_s X stored_s S stored_mb_per_s X
                 torch_s S torch_mb_per_s X ratio R (best ftrain / torch)
  py_state_resume: ftrain_s S ftrain_mb_per_s X torch_s S torch_mb_per_s X ratio R torch_map M verified yes
(ratio: the peer's time over ftrain's; above 1 ftrain is ahead.)
Exit status: 0, or 1 with a message on stderr.
"""
import argparse
import inspect
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def warm(path):
    """Read a file, or every file under a directory, once (the page cache)."""
    if os.path.isfile(path):
        paths = [path]
    else:
        paths = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(16 << 20):
                pass


def build(torch, a):
    """The model (and optimizer) of about a.mb MiB of parameters."""
    torch.manual_seed(1)
    per_layer = a.width * a.width * 4
    layers = max(1, (a.mb << 20) // per_layer)
    model = torch.nn.Sequential(*[torch.nn.Linear(a.width, a.width, bias=True)
                                  for _ in range(layers)])
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    opt = None
    if a.optimizer:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        x = torch.randn(4, a.width)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt


def state_bytes(torch, model, opt):
    n = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    if opt is not None:
        for s in opt.state.values():
            n += sum(v.numel() * v.element_size() for v in s.values() if torch.is_tensor(v))
    return n


def best(times):
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--optimizer", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir")
    a = ap.parse_args()
    if a.mb < 1 or a.width < 1 or a.repeat < 1:
        print("py_state.py: --mb, --width and --repeat must be positive", file=sys.stderr)
        return 1
    try:
        import torch
        import ftrain_ckpt as fc
    except ImportError as e:
        print(f"py_state.py: {e}", file=sys.stderr)
        return 1
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    base = tempfile.mkdtemp(prefix="py_state-", dir=a.dir)
    try:
        model, opt = build(torch, a)
        total = state_bytes(torch, model, opt)
        nt = len(model.state_dict()) + (sum(len(s) for s in opt.state.values()) if opt else 0)
        print(f"py_state: state_bytes {total} tensors {nt} optimizer {'yes' if opt else 'no'} "
              f"repeat {a.repeat} torch {torch.__version__}", flush=True)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        mb = total / 1e6
        run = os.path.join(base, "run")
        tfile = os.path.join(base, "model.pt")

        f_save, s_save, t_save = [], [], []
        for r in range(a.repeat):
            shutil.rmtree(run, ignore_errors=True)
            t0 = time.perf_counter()
            fc.save_state(run, 1, model, opt, level=0)
            s_save.append(time.perf_counter() - t0)
            shutil.rmtree(run, ignore_errors=True)
            t0 = time.perf_counter()
            fc.save_state(run, 1, model, opt)
            f_save.append(time.perf_counter() - t0)
            if os.path.exists(tfile):
                os.unlink(tfile)
            t0 = time.perf_counter()
            obj = {"model": model.state_dict()}
            if opt is not None:
                obj["optimizer"] = opt.state_dict()
            with open(tfile, "wb") as fh:
                torch.save(obj, fh)
                fh.flush()
                os.fsync(fh.fileno())
            fsync_dir(base)
            t_save.append(time.perf_counter() - t0)
            print(f"  round {r + 1}: save ftrain {f_save[-1]:.3f} s, stored {s_save[-1]:.3f} s, "
                  f"torch {t_save[-1]:.3f} s", flush=True)
        fs, ss, ts = best(f_save), best(s_save), best(t_save)
        print(f"py_state_save: ftrain_s {fs:.3f} ftrain_mb_per_s {mb / fs:.1f} stored_s {ss:.3f} "
              f"stored_mb_per_s {mb / ss:.1f} torch_s {ts:.3f} torch_mb_per_s {mb / ts:.1f} "
              f"ratio {ts / min(fs, ss):.2f}", flush=True)

        # Resume into the model (and optimizer) that exist: scribble first,
        # so that a load that did nothing cannot pass the check below.
        has_mmap = "mmap" in inspect.signature(torch.load).parameters
        warm(run)
        warm(tfile)
        f_load, t_load = [], []
        for r in range(a.repeat):
            with torch.no_grad():
                for p in model.parameters():
                    p.zero_()
            t0 = time.perf_counter()
            fc.load_state(run, model, opt)
            f_load.append(time.perf_counter() - t0)
            ok = all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
            if not ok:
                print("py_state.py: load_state did not restore the saved parameters",
                      file=sys.stderr)
                return 1
            with torch.no_grad():
                for p in model.parameters():
                    p.zero_()
            t0 = time.perf_counter()
            kw = {"mmap": True} if has_mmap else {}
            obj = torch.load(tfile, **kw)
            model.load_state_dict(obj["model"])
            if opt is not None:
                opt.load_state_dict(obj["optimizer"])
            t_load.append(time.perf_counter() - t0)
            del obj
            print(f"  round {r + 1}: resume ftrain {f_load[-1]:.3f} s, torch {t_load[-1]:.3f} s",
                  flush=True)
        ok = all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
        fl, tl = best(f_load), best(t_load)
        print(f"py_state_resume: ftrain_s {fl:.3f} ftrain_mb_per_s {mb / fl:.1f} torch_s {tl:.3f} "
              f"torch_mb_per_s {mb / tl:.1f} ratio {tl / fl:.2f} "
              f"torch_map {'mmap' if has_mmap else 'read'} verified {'yes' if ok else 'NO'}",
              flush=True)
        return 0 if ok else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
