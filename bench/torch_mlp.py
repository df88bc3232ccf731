#!/usr/bin/python3
"""torch_mlp.py - the PyTorch peer of ftrain's training throughput figure.

Trains the same model as `ftrain --threads 2 --steps N`: an MLP 784-256-128-10
with ReLU, cross-entropy loss, Adam (lr 1e-3, PyTorch defaults otherwise),
global batch 128, Fashion-MNIST scaled to [0, 1], one process with
torch.set_num_threads(THREADS).  Each step draws its batch from a per-epoch
random permutation (as ftrain does), so the timed loop includes the batch
gather, forward, backward and optimizer update; data loading and model
creation are outside the timer, as they are in ftrain's samples/s.

Usage: torch_mlp.py [--steps 400] [--threads 2] [--batch 128]
                    [--layers 256,128] [--device cpu|cuda]
                    [--adam default|foreach|fused] [--deterministic]
                    [--data-dir /usr/share/datasets/fashion-mnist] [--random]
Prints one line:
    torch_mlp: <samples/s> samples/s steps S batch B threads T data D
               device X adam A deterministic 0|1 loss L torch V
--adam picks torch.optim.Adam's implementation (default: PyTorch's own
choice; fused is one kernel for all tensors on the GPU).  --deterministic
sets torch.use_deterministic_algorithms(True) and the cuBLAS workspace
setting it requires (CUBLAS_WORKSPACE_CONFIG=:4096:8).  Matrix products are
float32 throughout (allow_tf32 off, matmul precision "highest"): no TF32.
--random uses same-shaped random data instead of Fashion-MNIST.
--device cuda keeps the data set, the model and the permutation on the GPU
(as ftrain --device cuda does) and synchronises before reading the clock at
both ends.  On either device 3 warm-up steps run untimed (cuBLAS, the
caching allocator and the thread pools start lazily), as ftrain keeps its
first step out of its samples/s.
Exit status: 0, or 1 with a message on stderr (torch missing, data unreadable).
"""
import argparse
import gzip
import os
import struct
import sys
import time


def read_idx(path, want_ndim):
    """Read an IDX file (gzip'd) into a numpy array, checking its header."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise ValueError(f"{path}: too short for an IDX header")
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08 or ndim != want_ndim:
        raise ValueError(f"{path}: not an unsigned-byte IDX file of {want_ndim} dims")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    n = 1
    for d in dims:
        n *= d
    body = raw[4 + 4 * ndim:]
    if len(body) != n:
        raise ValueError(f"{path}: {len(body)} data bytes, header says {n}")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--random", action="store_true")
    ap.add_argument("--layers", default="256,128")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--adam", default="default", choices=["default", "foreach", "fused"])
    ap.add_argument("--deterministic", action="store_true")
    a = ap.parse_args()
    if a.deterministic:
        # cuBLAS reads it when its handle is made: before torch touches CUDA.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        import torch
    except ImportError as e:
        print(f"torch_mlp: cannot import torch: {e}", file=sys.stderr)
        return 1

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if a.deterministic:
        torch.use_deterministic_algorithms(True)
    data = "random"
    if a.random:
        x = torch.rand(60000, 784)
        y = torch.randint(0, 10, (60000,))
    else:
        try:
            xi = read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz"), 3)
            yi = read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz"), 1)
        except (OSError, ValueError) as e:
            print(f"torch_mlp: {e}", file=sys.stderr)
            return 1
        x = torch.from_numpy(xi.reshape(xi.shape[0], -1).astype("float32") / 255.0)
        y = torch.from_numpy(yi.astype("int64"))
        data = "fashion-mnist"
    n = x.shape[0]

    try:
        widths = [int(w) for w in a.layers.split(",")] if a.layers != "none" else []
    except ValueError:
        print(f"torch_mlp: --layers: not a list of widths: {a.layers}", file=sys.stderr)
        return 1
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_mlp: --device cuda: torch sees no GPU", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    layers, prev = [], 784
    for w in widths:
        layers += [torch.nn.Linear(prev, w), torch.nn.ReLU()]
        prev = w
    layers.append(torch.nn.Linear(prev, 10))
    model = torch.nn.Sequential(*layers).to(dev)
    x, y = x.to(dev), y.to(dev)
    adam_kw = {}
    if a.adam == "foreach":
        adam_kw["foreach"] = True
    elif a.adam == "fused":
        adam_kw["fused"] = True
    try:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, **adam_kw)
    except (RuntimeError, TypeError, ValueError) as e:
        print(f"torch_mlp: --adam {a.adam}: {e}", file=sys.stderr)
        return 1
    lossf = torch.nn.CrossEntropyLoss()
    spe = n // a.batch

    def step_once(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        step_once(x[:a.batch], y[:a.batch])
    sync()

    # The timed loop: as ftrain's samples/s, from the first step to the last.
    t0 = time.perf_counter()
    perm = None
    loss = None
    for step in range(a.steps):
        j = step % spe
        if j == 0:
            perm = torch.randperm(n, device=dev)
        idx = perm[j * a.batch:(j + 1) * a.batch]
        loss = step_once(x[idx], y[idx])
    sync()
    dt = time.perf_counter() - t0
    print(f"torch_mlp: {a.steps * a.batch / dt:.0f} samples/s steps {a.steps} "
          f"batch {a.batch} threads {a.threads} data {data} device {a.device} "
          f"adam {a.adam} deterministic {int(a.deterministic)} "
          f"loss {loss.item():.4f} torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
