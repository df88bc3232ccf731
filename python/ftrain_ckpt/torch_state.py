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
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

import base64
import copy
import os
import random
import sys
from collections.abc import Mapping, MutableMapping

from . import checkpoint as _ck
from .checkpoint import PathArg
from .comm import Comm

FORMAT = "ftrain-torch-state"
VERSION = 2  # 2: "objects" (state=); version 1 is read too
READ_VERSIONS = (1, 2)
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


def state_tensors(model: Any = None, optimizer: Any = None,
                  extra: Optional[Mapping[str, Any]] = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
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


def save_state(root: PathArg, step: int, model: Any = None, optimizer: Any = None, *,
               state: Optional[Mapping[str, Any]] = None,
               record: Optional[Mapping[str, Any]] = None,
               extra: Optional[Mapping[str, Any]] = None, comm: Optional[Comm] = None,
               **options: int) -> str:
    """Save a training run's whole state as step ``step`` under ``root`` (a
    checkpoint root, or a run directory standing for its ckpt/): the
    model's and optimizer's state, ``extra`` tensors, and ``state``, a
    mapping of name -> anything with state_dict()/load_state_dict() (an LR
    scheduler, a GradScaler, a ResumableSampler, a second optimizer, the
    caller's own object) or a plain value (JSON data: numbers, strings,
    lists, dicts...).  A stateful object's tensors are stored as tensors
    (state/<name>/...), the rest of its state_dict() as JSON in the record.
    ``record`` (a dict) is stored beside it and is what load_state()
    returns.  Collective like save().  Returns the step directory.  Tensors
    must be on the CPU and of the format's dtypes (float32, float64, int64,
    uint8, int32); others are refused by name, before anything is written."""
    record = dict(record or {})
    if RECORD_KEY in record:
        raise ValueError(f"record key '{RECORD_KEY}' is save_state()'s own")
    tensors, meta = state_tensors(model, optimizer, extra)
    if state:
        objects = _encode_state(state, tensors)
        meta["objects"] = objects
    record[RECORD_KEY] = meta
    return _ck.save(root, step, tensors, record, comm=comm, **options)


def _resolve_source(source):
    """A step directory (or an open Checkpoint) from what load_state() was
    given: a step directory, a Checkpoint, or a checkpoint root / run
    directory (its newest good checkpoint).  None and an empty root are
    refused with a message saying what to do."""
    if source is None:
        raise ValueError("load_state: no checkpoint to load (the source is None): on a fresh "
                         "run resume_point() and latest_good() return None; start from "
                         "scratch instead of loading")
    if isinstance(source, _ck.Checkpoint):
        return source
    path = os.fspath(source)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "manifest.json")) and \
            not os.path.basename(os.path.normpath(path)).startswith("step-"):
        found = _ck.resume_point(path, comm=_ck._comm.SINGLE)
        if found is None:
            raise ValueError(f"load_state: '{path}' holds no checkpoint (a fresh run: "
                             f"resume_point() returns None for it; start from scratch)")
        return found
    return path


def load_state(source: Union[PathArg, "_ck.Checkpoint", None], model: Any = None,
               optimizer: Any = None, *, state: Optional[Mapping[str, Any]] = None,
               extra: Optional[Mapping[str, Any]] = None, strict: bool = True) -> Dict[str, Any]:
    """Restore what save_state() saved, on any world size.  ``source``: a
    step directory, an open Checkpoint, or a checkpoint root or run
    directory (its newest checkpoint that verifies; resume_point() says
    whether there is one).  The model's parameters and buffers are
    overwritten in place; the optimizer gets load_state_dict(); each
    stateful object of ``state`` gets load_state_dict() with what was saved
    under its name, and each plain value of ``state`` (a dict) is replaced
    by the saved one; ``extra`` (name -> tensor) is read into in place.

    Everything is checked before anything changes, and every difference is
    named in one ValueError: with strict (the default), a tensor the model
    has and the checkpoint lacks (or the reverse), a ``state`` name the
    checkpoint lacks or one it has that ``state`` does not, a key of an
    object's state_dict() that only one side has; always, a shape or dtype
    that differs, an optimizer of another class or other parameter groups,
    or none saved, a ``state`` entry saved as an object and given as a value
    (or the reverse) or of another class, an ``extra`` name the checkpoint
    lacks or a tensor it cannot be read into.  An object whose
    load_state_dict() raises is put back as it was, and so is every object
    loaded before it: a refused load leaves everything untouched.
    Returns the caller's record (without "torch_state")."""
    source = _resolve_source(source)
    own = not isinstance(source, _ck.Checkpoint)
    ck = _ck.Checkpoint(source) if own else source
    try:
        meta = ck.record.get(RECORD_KEY)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{ck.path}: not a save_state() checkpoint (no "
                             f"'{RECORD_KEY}' of format {FORMAT} in its record)")
        if meta.get("version") not in READ_VERSIONS:
            raise ValueError(f"{ck.path}: {FORMAT} version {meta.get('version')}, this "
                             f"reader knows {', '.join(map(str, READ_VERSIONS))}")
        if state is not None and not isinstance(state, Mapping):
            raise TypeError(f"load_state: state must be a mapping of name -> object or "
                            f"value, not a {type(state).__name__}")
        state = state if state is not None else {}
        model = _unwrap(model) if model is not None else None
        problems = []
        if model is not None:
            problems += _check_model(ck, model, strict)
        if optimizer is not None:
            problems += _check_optimizer(ck, optimizer, meta)
        problems += _check_state(ck, state, meta.get("objects") or {}, strict)
        problems += _check_extra(ck, extra or {})
        if problems:
            raise ValueError(f"{ck.path}: the checkpoint does not match: " + "; ".join(problems))
        # Decode every object's and value's state first (new tensors), then
        # load: objects (put back as they were if any refuses), the
        # optimizer (torch checks before it changes anything), the model.
        saved = meta.get("objects") or {}
        decoded = {name: _decode(ck, saved[name]["value"]) for name in state if name in saved}
        loaded = _load_objects(ck, state, saved, decoded)
        if optimizer is not None:
            try:
                _load_optimizer(ck, optimizer, meta)
            except BaseException:
                _roll_back(loaded)
                raise
        if model is not None:
            _load_model(ck, model)
        for k, t in (extra or {}).items():
            ck.read(f"extra/{k}", out=t)
        for name, value in decoded.items():
            if saved[name]["kind"] == "value":
                state[name] = value
        record = dict(ck.record)
        del record[RECORD_KEY]
        return record
    finally:
        if own:
            ck.close()


# ---- state=: stateful objects and plain values -----------------------------
#
# An object's state_dict() (or a plain value) is stored as JSON in the
# record, its tensors as tensors named state/<name>/<n> that the JSON
# points to.  What JSON cannot say is tagged, so that it comes back as it
# was: {"__tensor__": name} (a torch tensor), {"__ndarray__": name} (a numpy
# array), {"__tuple__": [...]}, {"__dict__": [[key, value], ...]} (a dict
# with keys that are not all strings, such as an optimizer's parameter
# indices), {"__float__": "nan" | "inf" | "-inf"}.
_TAGS = ("__tensor__", "__ndarray__", "__tuple__", "__dict__", "__float__")


def _is_stateful(v):
    return callable(getattr(v, "state_dict", None)) and \
        callable(getattr(v, "load_state_dict", None))


def _encode_state(state, tensors):
    if not isinstance(state, Mapping):
        raise TypeError(f"save_state: state must be a mapping of name -> object or value, "
                        f"not a {type(state).__name__}")
    out = {}
    for name, v in state.items():
        if not isinstance(name, str) or not name or "/" in name or len(name) > 64:
            raise ValueError(f"save_state: state name {name!r} must be a string of 1-64 "
                             f"characters without '/'")
        where, prefix = f"state['{name}']", f"state/{name}"
        if _is_stateful(v):
            sd = v.state_dict()
            out[name] = {"kind": "object", "class": type(v).__name__,
                         "value": _encode(sd, f"{where}.state_dict()", prefix, tensors)}
        else:
            out[name] = {"kind": "value", "value": _encode(v, where, prefix, tensors)}
    return out


def _encode(v, where, prefix, tensors):
    torch = _torch()
    np = sys.modules.get("numpy")
    if isinstance(v, torch.Tensor) or (np is not None and isinstance(v, np.ndarray)):
        name = f"{prefix}/{sum(1 for k in tensors if k.startswith(prefix + '/'))}"
        try:
            _ck.as_array(name, v)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{where}: {e}") from None
        tensors[name] = v
        return {"__tensor__" if isinstance(v, torch.Tensor) else "__ndarray__": name}
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return {"__float__": repr(v)}
        return v
    if isinstance(v, tuple):
        return {"__tuple__": [_encode(x, f"{where}[{i}]", prefix, tensors)
                              for i, x in enumerate(v)]}
    if isinstance(v, list):
        return [_encode(x, f"{where}[{i}]", prefix, tensors) for i, x in enumerate(v)]
    if isinstance(v, Mapping):
        if all(isinstance(k, str) and k not in _TAGS for k in v):
            return {k: _encode(x, f"{where}['{k}']", prefix, tensors) for k, x in v.items()}
        return {"__dict__": [[_encode(k, f"{where} key {k!r}", prefix, tensors),
                              _encode(x, f"{where}[{k!r}]", prefix, tensors)]
                             for k, x in v.items()]}
    raise TypeError(f"{where}: a {type(v).__name__} is neither a tensor nor JSON data "
                    f"(numbers, strings, lists, dicts)")


def _decode(ck, v):
    if isinstance(v, list):
        return [_decode(ck, x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) == 1:
        (tag, x), = v.items()
        if tag == "__tensor__":
            return _torch().from_numpy(ck.read(x))
        if tag == "__ndarray__":
            return ck.read(x)
        if tag == "__tuple__":
            return tuple(_decode(ck, y) for y in x)
        if tag == "__dict__":
            return {_hashable(_decode(ck, k)): _decode(ck, y) for k, y in x}
        if tag == "__float__":
            return float(x)
    return {k: _decode(ck, x) for k, x in v.items()}


def _hashable(k):
    return tuple(k) if isinstance(k, list) else k


def _saved_tensor(ck, v):
    """The TensorInfo an encoded leaf stands for, or None."""
    if isinstance(v, dict) and len(v) == 1:
        (tag, name), = v.items()
        if tag in ("__tensor__", "__ndarray__") and isinstance(name, str):
            return ck.tensors.get(name)
    return None


def _compare(ck, now, saved, where, strict, problems, top=True):
    """Differences between an object's state_dict() now and the saved one:
    its own keys (strict; the keys of dicts inside it are data, such as a
    history, and may differ), tensors' shapes and dtypes (always)."""
    torch = _torch()
    info = _saved_tensor(ck, saved)
    if info is not None:
        if isinstance(now, torch.Tensor) and (tuple(now.shape) != info.shape or
                                              _dtype_name(now) != info.dtype.name):
            problems.append(f"{where} is {list(now.shape)} {_dtype_name(now)} now, "
                            f"{list(info.shape)} {info.dtype} in the checkpoint")
        return
    if isinstance(now, Mapping) and isinstance(saved, dict) and \
            all(isinstance(k, str) for k in now) and not (len(saved) == 1 and
                                                          next(iter(saved)) in _TAGS):
        if strict and top:
            missing = [k for k in now if k not in saved]
            unexpected = [k for k in saved if k not in now]
            if missing:
                problems.append(f"{where}: missing in the checkpoint: " + ", ".join(missing))
            if unexpected:
                problems.append(f"{where}: not in the object now: " + ", ".join(unexpected))
        for k in now:
            if k in saved:
                _compare(ck, now[k], saved[k], f"{where}['{k}']", strict, problems, False)


def _check_state(ck, state, saved, strict):
    problems = []
    if strict:
        missing = [n for n in state if n not in saved]
        unexpected = [n for n in saved if n not in state]
        if missing:
            problems.append("state missing in the checkpoint: " + ", ".join(missing))
        if unexpected:
            problems.append("state in the checkpoint that was not asked for: " +
                            ", ".join(unexpected) + " (pass it in state=, or strict=False)")
    for name, obj in state.items():
        entry = saved.get(name)
        if entry is None:
            continue
        if _is_stateful(obj):
            if entry.get("kind") != "object":
                problems.append(f"state['{name}'] is a {type(obj).__name__} now, a plain "
                                f"value in the checkpoint")
            elif entry.get("class") != type(obj).__name__:
                problems.append(f"state['{name}'] is a {type(obj).__name__} now, a "
                                f"{entry.get('class')} in the checkpoint")
            else:
                _compare(ck, obj.state_dict(), entry.get("value"), f"state['{name}']",
                         strict, problems)
        else:
            if entry.get("kind") != "value":
                problems.append(f"state['{name}'] is a plain {type(obj).__name__} value now, "
                                f"a {entry.get('class')} object in the checkpoint")
            elif not isinstance(state, MutableMapping):
                problems.append(f"state['{name}'] is a plain value: state must be a dict "
                                f"to receive it, not a {type(state).__name__}")
    return problems


def _load_objects(ck, state, saved, decoded):
    """load_state_dict() on each stateful object; if one raises, every one
    loaded so far (and it) is put back as it was.  Returns [(obj, before)]."""
    loaded = []
    for name, obj in state.items():
        if name not in decoded or saved[name]["kind"] != "object":
            continue
        before = copy.deepcopy(obj.state_dict())
        loaded.append((obj, before))
        try:
            obj.load_state_dict(decoded[name])
        except Exception as e:
            _roll_back(loaded[:-1])
            try:  # it may have changed part of itself before it raised
                obj.load_state_dict(before)
            except Exception:  # noqa: BLE001 (it refuses that too: nothing more to do)
                pass
            raise ValueError(f"{ck.path}: state['{name}'] ({type(obj).__name__}) refused "
                             f"its saved state: {type(e).__name__}: {e}; nothing was "
                             f"loaded") from e
    return loaded


def _roll_back(loaded):
    for obj, before in reversed(loaded):
        obj.load_state_dict(before)


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


def rng_state() -> Dict[str, Any]:
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


def set_rng_state(st: Mapping[str, Any]) -> None:
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
