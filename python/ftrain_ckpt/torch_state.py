"""torch_state.py - a model's and an optimizer's state as one checkpoint.

save_state() flattens ``model.state_dict()`` and ``optimizer.state_dict()``
into named tensors, in this order:

    model/<key>                 every tensor of the model's state dict
    optim/<param index>/<key>   every tensor of the optimizer's per-parameter
                                state (Adam's exp_avg, exp_avg_sq, step...)
    extra/<key>                 the caller's own tensors (``extra``)

and saves them with save(): every rank passes the full state (data
parallel), each writes its slice of the flat byte space, one commit.  What
is not a tensor goes into the record under "torch_state": the optimizer's
class and param_groups (lr, betas...), per-parameter state that is not a
tensor, and the model's keys.  The caller's own record (step, epoch, data
position, RNG state...) is stored beside it and is what load_state()
returns.

load_state() works on any world size: every rank reads every tensor it
needs (DDP replicas need all of them).  The model's tensors are read
straight into its parameters and buffers (no temporary copy); the
optimizer's go through optimizer.load_state_dict().

rng_state() / set_rng_state() capture and restore the generators a PyTorch
program draws from (torch's CPU generator, CUDA's when initialized, numpy's
and Python's global ones) as a JSON-serialisable dict for the record.
"""
import base64
import random
import sys

from . import checkpoint as _ck

FORMAT = "ftrain-torch-state"
VERSION = 1
RECORD_KEY = "torch_state"


def _torch():
    import torch
    return torch


def _unwrap(model):
    """The module inside a DistributedDataParallel/DataParallel wrapper."""
    torch = _torch()
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers):
        model = model.module
    return model


def _jsonable(value, where):
    """value as JSON data (tuples become lists), or TypeError naming where."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: {value} cannot be stored in the JSON record")
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"{where}: a {type(value).__name__} is neither a tensor nor JSON data")


def state_tensors(model=None, optimizer=None, extra=None):
    """(tensors, meta): the named tensors save_state() writes and the
    "torch_state" record entry describing the rest."""
    torch = _torch()
    tensors = {}
    meta = {"format": FORMAT, "version": VERSION, "torch_version": torch.__version__}
    if model is not None:
        sd = _unwrap(model).state_dict()
        meta["model_keys"] = list(sd)
        for k, v in sd.items():
            tensors[f"model/{k}"] = v
    if optimizer is not None:
        sd = optimizer.state_dict()
        scalars = {}
        for pid, st in sd["state"].items():
            for k, v in st.items():
                if isinstance(v, torch.Tensor):
                    tensors[f"optim/{pid}/{k}"] = v
                else:
                    scalars.setdefault(str(pid), {})[k] = _jsonable(v, f"optimizer state {pid}.{k}")
        meta["optimizer"] = {
            "class": type(optimizer).__name__,
            "param_groups": _jsonable(sd["param_groups"], "optimizer param_groups"),
            "state_keys": {str(pid): list(st) for pid, st in sd["state"].items()},
            "scalars": scalars,
        }
    if extra:
        meta["extra_keys"] = list(extra)
        for k, v in extra.items():
            tensors[f"extra/{k}"] = v
    return tensors, meta


def save_state(root, step, model=None, optimizer=None, *, record=None, extra=None,
               comm=None, **options):
    """Save the model's and optimizer's state (and ``extra`` tensors) as step
    ``step`` under ``root``; ``record`` (a dict: step, epoch, data position,
    rng_state()...) is stored with it.  Collective like save().  Returns
    the step directory.  Tensors must be on the CPU and of the format's
    dtypes (float32, float64, int64, uint8, int32); others are refused by
    name."""
    record = dict(record or {})
    if RECORD_KEY in record:
        raise ValueError(f"record key '{RECORD_KEY}' is save_state()'s own")
    tensors, meta = state_tensors(model, optimizer, extra)
    record[RECORD_KEY] = meta
    return _ck.save(root, step, tensors, record, comm=comm, **options)


def load_state(source, model=None, optimizer=None, *, extra=None, strict=True):
    """Restore what save_state() saved, on any world size.  ``source``: a
    step directory or an open Checkpoint.  The model's parameters and
    buffers are overwritten in place; the optimizer gets load_state_dict();
    ``extra`` (name -> tensor) is read into in place.  Everything is checked
    before anything is read: with strict, a tensor the model has and the
    checkpoint lacks (or the reverse); always, a shape or dtype that
    differs, an optimizer of another class or other parameter groups, or
    none saved, an ``extra`` name the checkpoint lacks or a tensor it cannot
    be read into.  Each raises one ValueError naming every difference, and
    a refused load leaves the model, the optimizer and ``extra`` untouched.
    Returns the caller's record (without "torch_state")."""
    own = not isinstance(source, _ck.Checkpoint)
    ck = _ck.Checkpoint(source) if own else source
    try:
        meta = ck.record.get(RECORD_KEY)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{ck.path}: not a save_state() checkpoint (no "
                             f"'{RECORD_KEY}' of format {FORMAT} in its record)")
        if meta.get("version") != VERSION:
            raise ValueError(f"{ck.path}: {FORMAT} version {meta.get('version')}, this "
                             f"reader knows {VERSION}")
        model = _unwrap(model) if model is not None else None
        problems = []
        if model is not None:
            problems += _check_model(ck, model, strict)
        if optimizer is not None:
            problems += _check_optimizer(ck, optimizer, meta)
        problems += _check_extra(ck, extra or {})
        if problems:
            raise ValueError(f"{ck.path}: the checkpoint does not match: " + "; ".join(problems))
        # The reads.  The optimizer's state goes into new tensors and
        # load_state_dict() first: if torch refuses it, nothing else changed.
        if optimizer is not None:
            _load_optimizer(ck, optimizer, meta)
        if model is not None:
            _load_model(ck, model)
        for k, t in (extra or {}).items():
            ck.read(f"extra/{k}", out=t)
        record = dict(ck.record)
        del record[RECORD_KEY]
        return record
    finally:
        if own:
            ck.close()


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _check_model(ck, model, strict):
    """What differs between the model and the checkpoint (a list of texts)."""
    sd = model.state_dict()
    problems = []
    if strict:
        have = {n[len("model/"):] for n in ck.tensors if n.startswith("model/")}
        missing = [k for k in sd if k not in have]
        unexpected = sorted(have - set(sd))
        if missing:
            problems.append("missing in the checkpoint: " + ", ".join(missing))
        if unexpected:
            problems.append("not in the model: " + ", ".join(unexpected))
    for k, t in sd.items():
        info = ck.tensors.get(f"model/{k}")
        if info is not None and (tuple(t.shape) != info.shape or
                                 _dtype_name(t) != info.dtype.name):
            problems.append(f"'{k}' is {list(t.shape)} {_dtype_name(t)} in the model, "
                            f"{list(info.shape)} {info.dtype} in the checkpoint")
    return problems


def _load_model(ck, model):
    """Read every tensor the checkpoint has into the model (checked)."""
    torch = _torch()
    with torch.no_grad():
        for k, t in model.state_dict().items():
            name = f"model/{k}"
            if name not in ck.tensors:
                continue
            if t.device.type == "cpu" and t.is_contiguous():
                ck.read(name, out=t)  # straight into the parameter's memory
            else:
                t.copy_(torch.from_numpy(ck.read(name)))


def _check_optimizer(ck, optimizer, meta):
    """What keeps the saved optimizer state from loading into ``optimizer``:
    what torch's load_state_dict() checks (the groups), and that every
    per-parameter value is in the checkpoint."""
    om = meta.get("optimizer")
    if om is None:
        return ["no optimizer state was saved"]
    if om.get("class") != type(optimizer).__name__:
        return [f"the optimizer state is {om.get('class')}'s, not "
                f"{type(optimizer).__name__}'s"]
    saved, groups = om.get("param_groups") or [], optimizer.param_groups
    if len(saved) != len(groups):
        return [f"the optimizer has {len(groups)} parameter groups, the checkpoint "
                f"{len(saved)}"]
    problems = []
    for i, (g, sg) in enumerate(zip(groups, saved)):
        if len(g["params"]) != len(sg.get("params", ())):
            problems.append(f"optimizer parameter group {i} has {len(g['params'])} "
                            f"parameters, the checkpoint's {len(sg.get('params', ()))}")
    scalars = om.get("scalars", {})
    for pid, keys in om.get("state_keys", {}).items():
        for k in keys:
            if f"optim/{pid}/{k}" not in ck.tensors and k not in scalars.get(pid, {}):
                problems.append(f"optimizer state {pid}.{k} is not in the checkpoint")
    return problems


def _check_extra(ck, extra):
    """Whether each ``extra`` tensor is in the checkpoint and can be read into."""
    problems = []
    for k, t in extra.items():
        info = ck.tensors.get(f"extra/{k}")
        if info is None:
            problems.append(f"extra '{k}' is not in the checkpoint")
            continue
        count = 1
        for n in info.shape:
            count *= n
        try:
            ck._dest(t, info.dtype, count, f"extra '{k}'")
        except (TypeError, ValueError) as e:
            problems.append(str(e))
    return problems


def _load_optimizer(ck, optimizer, meta):
    """Read the optimizer's state into new tensors, then load_state_dict()."""
    torch = _torch()
    om = meta["optimizer"]
    state = {}
    for pid, keys in om["state_keys"].items():
        st = {}
        for k in keys:
            name = f"optim/{pid}/{k}"
            if name in ck.tensors:
                st[k] = torch.from_numpy(ck.read(name))
            else:
                st[k] = om["scalars"][pid][k]
        state[int(pid)] = st
    optimizer.load_state_dict({"state": state, "param_groups": om["param_groups"]})


def rng_state():
    """The random generators' states as JSON data: torch (CPU, and CUDA's
    when initialized), numpy's global RandomState (when numpy is loaded)
    and Python's random."""
    torch = _torch()
    b64 = lambda raw: base64.b64encode(bytes(raw)).decode("ascii")  # noqa: E731
    st = {"torch": b64(torch.get_rng_state().numpy().tobytes())}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = [b64(s.numpy().tobytes()) for s in torch.cuda.get_rng_state_all()]
    np = sys.modules.get("numpy")
    if np is not None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        st["numpy"] = {"kind": kind, "keys": b64(keys.astype("<u4").tobytes()), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}
    version, internal, gauss_next = random.getstate()
    st["python"] = {"version": version, "state": list(internal), "gauss_next": gauss_next}
    return st


def set_rng_state(st):
    """Restore what rng_state() returned."""
    torch = _torch()
    raw = lambda s: bytearray(base64.b64decode(s))  # noqa: E731
    torch.set_rng_state(torch.frombuffer(raw(st["torch"]), dtype=torch.uint8).clone())
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(
            [torch.frombuffer(raw(s), dtype=torch.uint8).clone() for s in st["cuda"]])
    if "numpy" in st:
        import numpy as np
        n = st["numpy"]
        keys = np.frombuffer(bytes(raw(n["keys"])), dtype="<u4").astype(np.uint32)
        np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["gauss"]))
    if "python" in st:
        p = st["python"]
        random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))
