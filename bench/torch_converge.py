"""torch_converge.py - the PyTorch side of make bench's convergence comparison.

Trains one of the seeds' workloads the way a PyTorch user writes it
(nn.Linear with its default initialisation, the same data, batch, optimizer
and epochs as the ftrain run beside it) and prints one line:

    torch_converge: data D test_loss L metric M value V epochs E torch T

where metric is r2 for the regression sets (line, sine) and acc for
Fashion-MNIST, computed over the same test set ftrain evaluates.

The data sets are made exactly as ftrain's src/nn/data.c makes them:
  line  y = 0.7x + 0.3, train x = i/1000 (i < 1000), test x = 0.0005 + 0.01k
        (k < 100), each value computed in double and rounded to float once;
  sine  y = sin(2 pi x), train x = k/99 (k <= 99), test x = (k + 0.5)/99
        (k < 99);
  fashion-mnist  the IDX files scaled to [0, 1].
Each epoch visits a fresh random permutation in batches of --batch, the last
one partial (ftrain's steps per epoch are ceil(n / batch) too).

Usage: torch_converge.py --data line|sine|fashion-mnist --layers 1000,1000,1000
           --activation relu|tanh --optimizer adam|sgd --lr 1e-3 --batch 128
           --epochs 50 [--momentum 0] [--data-dir DIR] [--seed 1] [--threads 1]
(--momentum: SGD's, PyTorch's default 0; ftrain's --momentum defaults to 0.9,
so a comparison passes it to both.)
Exit status: 0, or 1 with a message on stderr (torch missing, bad data).
"""
import argparse
import math
import os
import sys

# The IDX reader (and its checks) is torch_mlp.py's, beside this script.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_mlp import read_idx  # noqa: E402


def make_data(torch, name, data_dir):
    """(train_x, train_y, test_x, test_y, classification) as ftrain makes them."""
    if name == "line":
        tx = [i / 1000.0 for i in range(1000)]
        vx = [0.0005 + 0.01 * k for k in range(100)]
        f = lambda x: 0.7 * x + 0.3
    elif name == "sine":
        tx = [k / 99.0 for k in range(100)]
        vx = [(k + 0.5) / 99.0 for k in range(99)]
        f = lambda x: math.sin(2.0 * math.pi * x)
    else:
        def load(prefix):
            xi = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"), 3)
            yi = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"), 1)
            x = torch.from_numpy(xi.reshape(xi.shape[0], -1).astype("float32") / 255.0)
            return x, torch.from_numpy(yi.astype("int64"))
        trx, tr_y = load("train")
        tex, te_y = load("t10k")
        return trx, tr_y, tex, te_y, True
    col = lambda v: torch.tensor(v, dtype=torch.float32).reshape(-1, 1)
    return col(tx), col([f(x) for x in tx]), col(vx), col([f(x) for x in vx]), False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="line", choices=["line", "sine", "fashion-mnist"])
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--layers", default="1000,1000,1000")
    ap.add_argument("--activation", default="relu", choices=["relu", "tanh"])
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch_converge: cannot import torch: {e}", file=sys.stderr)
        return 1
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        trx, try_, tex, tey, classification = make_data(torch, a.data, a.data_dir)
    except (OSError, ValueError) as e:
        print(f"torch_converge: {e}", file=sys.stderr)
        return 1
    try:
        widths = [int(w) for w in a.layers.split(",")] if a.layers != "none" else []
    except ValueError:
        print(f"torch_converge: --layers: not a list of widths: {a.layers}", file=sys.stderr)
        return 1
    act = torch.nn.ReLU if a.activation == "relu" else torch.nn.Tanh
    layers, prev = [], trx.shape[1]
    for w in widths:
        layers += [torch.nn.Linear(prev, w), act()]
        prev = w
    layers.append(torch.nn.Linear(prev, 10 if classification else 1))
    model = torch.nn.Sequential(*layers)
    opt = (torch.optim.Adam(model.parameters(), lr=a.lr) if a.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum))
    lossf = torch.nn.CrossEntropyLoss() if classification else torch.nn.MSELoss()
    n = trx.shape[0]
    for _ in range(a.epochs):
        perm = torch.randperm(n)
        for s in range(0, n, a.batch):
            idx = perm[s:s + a.batch]
            opt.zero_grad(set_to_none=True)
            lossf(model(trx[idx]), try_[idx]).backward()
            opt.step()
    with torch.no_grad():
        out = model(tex)
        test_loss = lossf(out, tey).item()
        if classification:
            metric, value = "acc", (out.argmax(1) == tey).float().mean().item()
        else:
            resid = ((out - tey) ** 2).sum().item()
            total = ((tey - tey.mean()) ** 2).sum().item()
            metric, value = "r2", 1.0 - resid / total
    print(f"torch_converge: data {a.data} test_loss {test_loss:.6g} metric {metric} "
          f"value {value:.6f} epochs {a.epochs} torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
