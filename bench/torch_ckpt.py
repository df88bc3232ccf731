#!/usr/bin/python3
"""torch_ckpt.py - the PyTorch peer of ftrain's checkpoint save and load.

Reads the raw state written by `ckpt_bench raw FILE MB` (FILE holds the flat
bytes, FILE.json the tensor table), builds the same named float32 tensors
(same shapes, same values) and times:

  save  torch.save(dict, f) into OUT, then f.flush() and os.fsync() of the
        file and of its directory, as ckpt_save fsyncs what it commits;
  load  torch.load(OUT) into a fresh dict of tensors (the file was just
        written, so it is read from the page cache, as the ckpt_bench load
        figure is);
  load into existing tensors (a resume): torch.load(OUT), then copy_ of
        each loaded tensor into a tensor that existed and was touched
        before the timer, as model.load_state_dict() and
        optimizer.load_state_dict() put a checkpoint into a live model.

Reading FILE and building the tensors is outside both timers.  After the load
every tensor is compared with the original (untimed).

Usage: torch_ckpt.py RAWFILE OUTFILE [REPEAT]
With REPEAT > 1 the save and the load are each timed REPEAT times (the file
is removed before each save) and the fastest of each is printed.
Prints one line:
    torch_ckpt: raw_bytes B file_bytes F save_s S save_mb_per_s X
                load_s L load_mb_per_s Y into_s E into_mb_per_s Z
                verified yes torch V
MB are 10^6 bytes of raw state.  OUTFILE is left for the caller to delete.
Exit status: 0, or 1 with a message on stderr.
"""
import json
import os
import sys
import time


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and not sys.argv[3].isdigit()):
        print("usage: torch_ckpt.py RAWFILE OUTFILE [REPEAT]", file=sys.stderr)
        return 2
    raw_path, out_path = sys.argv[1], sys.argv[2]
    repeat = max(1, int(sys.argv[3])) if len(sys.argv) == 4 else 1
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"torch_ckpt: cannot import: {e}", file=sys.stderr)
        return 1
    try:
        with open(raw_path + ".json") as f:
            table = json.load(f)
        flat = np.fromfile(raw_path, dtype=np.uint8)
    except (OSError, ValueError) as e:
        print(f"torch_ckpt: {e}", file=sys.stderr)
        return 1
    if flat.size != table["total_bytes"]:
        print(f"torch_ckpt: {raw_path}: {flat.size} bytes, table says "
              f"{table['total_bytes']}", file=sys.stderr)
        return 1

    state = {}
    for t in table["tensors"]:
        n = 1
        for d in t["shape"]:
            n *= d
        off = t["offset"]
        a = flat[off:off + 4 * n].view(np.float32).reshape(t["shape"])
        state[t["name"]] = torch.from_numpy(a.copy())
    del flat
    raw_bytes = sum(v.numel() * v.element_size() for v in state.values())

    # The live model's tensors: allocated and touched before any timer.
    live = {k: torch.zeros_like(v) for k, v in state.items()}
    save_s = load_s = into_s = float("inf")
    loaded = None
    for _ in range(repeat):
        if os.path.exists(out_path):
            os.unlink(out_path)
        t0 = time.perf_counter()
        with open(out_path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        dfd = os.open(os.path.dirname(os.path.abspath(out_path)), os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        save_s = min(save_s, time.perf_counter() - t0)

        loaded = None
        t0 = time.perf_counter()
        loaded = torch.load(out_path)
        load_s = min(load_s, time.perf_counter() - t0)

        loaded = None
        t0 = time.perf_counter()
        loaded = torch.load(out_path)
        with torch.no_grad():
            for k, v in loaded.items():
                live[k].copy_(v)
        into_s = min(into_s, time.perf_counter() - t0)

    ok = loaded.keys() == state.keys() and all(
        torch.equal(loaded[k], state[k]) and torch.equal(live[k], state[k])
        for k in state)
    print(f"torch_ckpt: raw_bytes {raw_bytes} file_bytes {os.path.getsize(out_path)} "
          f"save_s {save_s:.3f} save_mb_per_s {raw_bytes / save_s / 1e6:.1f} "
          f"load_s {load_s:.3f} load_mb_per_s {raw_bytes / load_s / 1e6:.1f} "
          f"into_s {into_s:.3f} into_mb_per_s {raw_bytes / into_s / 1e6:.1f} "
          f"verified {'yes' if ok else 'NO'} torch {torch.__version__}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
