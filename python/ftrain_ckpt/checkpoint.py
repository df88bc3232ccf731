"""checkpoint.py - save, read and manage sharded checkpoints.

Saving is the library's two phases (include/ftrain/ckpt.h):

    write_shard()  local: lay the tensors out in one flat byte space and
                   write this rank's slice, [rank*T/W, (rank+1)*T/W), to
                   <root>/.tmp-step-<N>/shard-<rank>.ftsh (no collective;
                   may run in a background thread: the library releases the
                   GIL, and reads the arrays' memory in place, so they must
                   not change until it returns)
    commit()       collective: every rank's result goes to rank 0, which
                   writes the manifest (with the record) and renames the
                   step directory into place - the one commit point

save() does both.  Every rank passes the same full tensors (data parallel);
each writes only its slice.  The arrays are never copied: the library gets
each one's data pointer (a torch tensor through .numpy(), which shares its
memory).  A local failure does not skip the collective: the rank still
takes part in commit() with its failure, so no rank is left waiting, and
every rank raises.

Reading (Checkpoint) opens a committed step directory, validates its
manifest, and reads any tensor or any byte range of the flat space
(decoding and checking only the frames it overlaps): a reader of any world
size can take what it needs.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

import collections
import json
import math
import os
import sys

import ctypes
import numpy as np

from . import _lib
from . import comm as _comm
# Every integer passed to the library is range-checked first.
from ._lib import integer, INT_MIN, INT_MAX, INT64_MIN, INT64_MAX, UINT64_MAX, SIZE_MAX
from .errors import (OK, EINVAL, ENOTFOUND, CkptError, error, check, strerror)
from .comm import Comm

# A path argument: a str or an os.PathLike (pathlib.Path).
PathArg = Union[str, "os.PathLike[str]"]

# The format's dtypes: code (ckpt_dtype_t), manifest name, numpy dtype.
DTYPES = (("f32", "float32"), ("f64", "float64"), ("i64", "int64"),
          ("u8", "uint8"), ("i32", "int32"))
_CODE_OF_NUMPY = {np_name: code for code, (_n, np_name) in enumerate(DTYPES)}
_SUPPORTED = "float32, float64, int64, uint8, int32 (the format's f32, f64, i64, u8, i32)"

TensorInfo = collections.namedtuple(
    "TensorInfo", "name dtype shape offset nbytes")
TensorInfo.__doc__ = """A tensor of a checkpoint: name, numpy dtype, global
shape (a tuple), byte offset in the flat space, size in bytes."""

Entry = collections.namedtuple(
    "Entry", "name path step status is_latest is_link world_size raw_bytes "
    "file_bytes created why")
Entry.__doc__ = """One entry of list_checkpoints(): status is "committed",
"incomplete" or "corrupt"; why says what is wrong when it is not committed."""

_STATUS = ("committed", "incomplete", "corrupt", "set-aside")

_OPTION_FIELDS = ("level", "threads", "shuffle", "frame_bytes", "fsync", "direct", "adapt")

STEP_MAX = INT64_MAX  # a manifest's step is a JSON integer (int64)


def _step(step):
    return integer("step", step, 0, STEP_MAX)


def _check_record(value, where, open_=None):
    """Refuse what the record's JSON cannot hold, naming where it is: an
    integer outside int64 (json.dumps writes any int, and the library would
    refuse it only at the commit, after every shard was written), a NaN or
    an infinity, a value of another type, a container that holds itself."""
    if open_ is None:
        open_ = set()
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{where} = {value} is out of range: a record's integers must "
                             f"lie in -2**63..2**63-1 (store a larger one as a string)")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} = {value} is not a JSON number: a record holds no NaN "
                             f"or infinity (store it as a string, or as null)")
        return
    if not isinstance(value, (dict, list, tuple)):
        raise TypeError(f"{where} is of type {type(value).__name__}, which a record (JSON) cannot "
                        f"hold: use dict, list, str, int, float, bool or None")
    if id(value) in open_:
        raise ValueError(f"{where} holds itself: a record cannot be circular")
    open_.add(id(value))
    if isinstance(value, dict):
        for k, v in value.items():
            if not (k is None or isinstance(k, (str, int, float, bool))):
                raise TypeError(f"{where} has the key {k!r}, a {type(k).__name__}: a record's "
                                f"keys are strings (json.dumps also takes int, float, bool "
                                f"and None, written as strings)")
            _check_record(v, f"{where}[{k!r}]", open_)
    else:
        for i, v in enumerate(value):
            _check_record(v, f"{where}[{i}]", open_)
    open_.discard(id(value))


def _record_json(record):
    """The record (a dict; None is {}) as the compact JSON text the library
    stores, or TypeError/ValueError, naming where, for what the format
    cannot hold."""
    if record is None:
        record = {}
    if not isinstance(record, dict):
        raise TypeError(f"record must be a dict (a JSON object), got {type(record).__name__}")
    _check_record(record, "record")
    return json.dumps(record, allow_nan=False, separators=(",", ":")).encode()


def _fs(path):
    return os.fsencode(os.fspath(path))


def as_array(name: str, value: Any) -> Any:
    """A numpy view of value's memory (no copy): a C-contiguous numpy array
    or CPU torch tensor of a dtype the format stores.  Anything else is
    refused (TypeError for a type or dtype, ValueError for a layout), never
    converted behind the caller's back."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError(f"tensor '{name}' is on {value.device}: pass CPU tensors "
                             f"(copy it with .cpu() first)")
        if value.layout != torch.strided:
            raise ValueError(f"tensor '{name}' is {value.layout}: pass dense tensors")
        if str(value.dtype).replace("torch.", "") not in _CODE_OF_NUMPY:
            raise TypeError(f"tensor '{name}' has dtype {value.dtype}, which the "
                            f"checkpoint format does not store; it stores {_SUPPORTED} "
                            f"(convert it, e.g. .float())")
        if not value.is_contiguous():
            raise ValueError(f"tensor '{name}' is not contiguous: pass .contiguous() "
                             f"(saving never copies behind your back)")
        return value.detach().numpy()
    if isinstance(value, np.ndarray):
        if value.dtype.name not in _CODE_OF_NUMPY or not value.dtype.isnative:
            raise TypeError(f"array '{name}' has dtype {value.dtype.str} ({value.dtype}), "
                            f"which the checkpoint format does not store; it stores "
                            f"{_SUPPORTED} in native byte order")
        if not value.flags.c_contiguous:
            raise ValueError(f"array '{name}' is not C-contiguous: pass "
                             f"numpy.ascontiguousarray(a)")
        return value
    raise TypeError(f"'{name}': expected a numpy array or a torch tensor, got "
                    f"{type(value).__name__}")


def _default_options():
    """A ckpt_opts_t (_lib.Opts) holding the library's defaults.  Its size is
    ctypes.sizeof(_lib.Opts): the library refuses one it does not know
    (InvalidArgumentError naming both sizes), and the size it stores must
    be the one given."""
    opts = _lib.Opts()
    size = ctypes.sizeof(_lib.Opts)
    check(_lib.load().ckpt_opts_init(ctypes.byref(opts), size), "ckpt_opts_init")
    if opts.size != size:
        raise error(EINVAL, "ckpt_opts_init",
                    detail=f"the library set the options' size to {opts.size}, "
                           f"the binding's ckpt_opts_t has {size} bytes")
    return opts


def _options(options):
    opts = _default_options()
    for key, value in options.items():
        if key not in _OPTION_FIELDS:
            raise TypeError(f"unknown checkpoint option '{key}' (known: "
                            f"{', '.join(_OPTION_FIELDS)})")
        if value is not None:
            hi = SIZE_MAX if key == "frame_bytes" else INT_MAX
            lo = 0 if key == "frame_bytes" else INT_MIN
            setattr(opts, key, integer(f"option {key}", value, lo, hi))
    return opts


def _table(tensors):
    """(ctypes array of ckpt_tensor_t laid out, the numpy views, total bytes)."""
    if not hasattr(tensors, "items"):
        raise TypeError("tensors must be a mapping of name -> array or tensor")
    items = list(tensors.items())
    arrays = []
    table = (_lib.Tensor * max(1, len(items)))()
    for i, (name, value) in enumerate(items):
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {name!r}")
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate
            raise ValueError(f"tensor name {name!r} is not valid UTF-8: {e.reason}") from None
        if not raw or len(raw) >= _lib.NAME_MAX or b"\0" in raw:
            raise ValueError(f"tensor name {name!r}: must be 1 to {_lib.NAME_MAX - 1} "
                             f"bytes of UTF-8 without NUL")
        a = as_array(name, value)
        if a.ndim > _lib.MAX_DIMS:
            raise ValueError(f"tensor '{name}' has {a.ndim} dimensions; the format "
                             f"stores at most {_lib.MAX_DIMS}")
        arrays.append(a)
        t = table[i]
        t.name = raw
        t.dtype = _CODE_OF_NUMPY[a.dtype.name]
        t.ndim = a.ndim
        for d, n in enumerate(a.shape):
            t.shape[d] = n
        t.data = a.ctypes.data
    total = ctypes.c_uint64(0)
    check(_lib.load().ckpt_layout(table, len(items), ctypes.byref(total)), "ckpt_layout")
    return table, len(items), arrays, total.value


def step_dirname(step: int) -> str:
    """The step directory's name: "step-%08d" (step in 0..2**63-1)."""
    buf = ctypes.create_string_buffer(_lib.FILE_NAME_MAX)
    _lib.load().ckpt_step_dirname(_step(step), buf, len(buf))
    return buf.value.decode()


def step_path(root: PathArg, step: int) -> str:
    """<root>/step-<N> (a run directory stands for its ckpt/)."""
    return os.path.join(checkpoint_root(root), step_dirname(step))


# A run directory (ftrain --run-dir DIR) holds its checkpoints in DIR/ckpt;
# like ckptctl, every function here that takes a root takes a run
# directory for it: a directory with a ckpt/ subdirectory and no
# checkpoint, unfinished save or LATEST of its own stands for its ckpt/.
RUN_CKPT = "ckpt"
_OWN_PREFIXES = ("step-", ".tmp-step-")


def is_run_dir(path: PathArg) -> bool:
    """True when ``path`` is a run directory: a directory, not a checkpoint
    (no manifest.json, not named step-<N>), with a ``ckpt/`` subdirectory
    and no step-*, .tmp-step-* or LATEST of its own (ckptctl's rule)."""
    path = os.fspath(path)
    if not os.path.isdir(path) or os.path.isfile(os.path.join(path, "manifest.json")):
        return False
    if os.path.basename(os.path.normpath(path)).startswith("step-"):
        return False
    if not os.path.isdir(os.path.join(path, RUN_CKPT)):
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return not any(n.startswith(_OWN_PREFIXES) or n == "LATEST" for n in names)


def checkpoint_root(path: PathArg) -> str:
    """The checkpoint root ``path`` stands for: ``path/ckpt`` for a run
    directory (is_run_dir), else ``path`` itself."""
    if path is None:
        raise TypeError("checkpoint_root: the path is None, not a run directory or "
                        "checkpoint root")
    path = os.fspath(path)
    return os.path.join(path, RUN_CKPT) if is_run_dir(path) else path


def resume_point(path: PathArg, on_skip: Optional[Callable[[str, str], None]] = None, *,
                 comm: Optional[Comm] = None, local: Any = None) -> Optional[str]:
    """Where to resume from: the newest checkpoint that fully verifies under
    ``path`` (a run directory, standing for its ckpt/, or a checkpoint
    root), or None for a fresh run (``path`` missing, empty, or holding no
    checkpoint).  Never raises for a fresh run; CorruptError when
    checkpoints exist and none of them verifies (resuming from scratch
    would throw the run away: move them aside with ckptctl first).
    Collective like latest_good().  With ``local`` (a LocalTier, over its
    own comm), a newer node-local step the nodes hold between them wins:
    LocalTier.resume_point(path)."""
    if path is None:
        raise TypeError("resume_point: the path is None, not a run directory or "
                        "checkpoint root")
    if local is not None:
        return local.resume_point(path, on_skip)
    root = checkpoint_root(path)
    c = _comm.resolve(comm)
    if c.size == 1 and not os.path.isdir(root):
        if os.path.exists(root):
            raise NotADirectoryError(f"resume_point: '{root}' is not a directory")
        return None
    return latest_good(root, on_skip, comm=c)


class PendingSave:
    """What write_shard() did on this rank; commit() finishes the save."""

    def __init__(self, root, step, comm, table, ntensors, arrays, total, opts,
                 rc, detail, exc):
        self.root, self.step, self.comm = os.fspath(root), step, comm
        self._table, self._n, self._arrays = table, ntensors, arrays
        self.total_bytes = total
        self._opts, self._rc, self._detail, self._exc = opts, rc, detail, exc
        self.info = None
        self.committed = False

    @property
    def ok(self) -> bool:
        """True when this rank's shard was written."""
        return self._rc == OK and self._exc is None

    def commit(self, record: Optional[Mapping[str, Any]] = None) -> str:
        """Collective (every rank of the comm): commit the step with
        ``record`` (a JSON-serialisable dict, stored as the manifest's
        "record"; rank 0's is the one kept).  Returns the committed step
        directory's path; raises on every rank when any rank failed."""
        if self.committed:
            raise RuntimeError(f"step {self.step} was already committed")
        exc = self._exc
        if exc is None:
            try:
                rec = _record_json(record)
                step = _step(self.step)
            except (TypeError, ValueError) as e:
                exc = e
        if exc is not None:
            # Still take part, voting failure: the other ranks are in the
            # collective.  A step no directory can have (one past the
            # largest) is what the library gets for a step that is refused.
            rec = b"{}"
            try:
                step = _step(self.step)
            except (TypeError, ValueError):
                step = STEP_MAX + 1
        local = self._rc if self._rc != OK else (EINVAL if exc is not None else OK)
        lib = _lib.load()
        info = self.info if self.info is not None else _lib.ShardInfo()
        rc = lib.ckpt_commit(_fs(self.root), step, self._table, self._n, rec,
                             ctypes.byref(self._opts), local, ctypes.byref(info),
                             self.comm.coll())
        cause = self.comm.take_error()
        if exc is not None:
            raise exc
        if rc != OK:
            if rc == self._rc:
                err = error(rc, "ckpt_shard_write", detail=self._detail)
            else:
                err = error(rc, "ckpt_commit")
            raise err from cause
        self.committed = True
        self._arrays = None
        return os.path.join(self.root, step_dirname(step))  # root: resolved already


def write_shard(root: PathArg, step: int, tensors: Mapping[str, Any], *,
                comm: Optional[Comm] = None, **options: int) -> "PendingSave":
    """Phase one on this rank: write its slice of ``tensors`` (a mapping of
    name -> numpy array or CPU torch tensor, in the order they are laid out)
    as step ``step`` under ``root``.  Never collective.  A library failure
    does not raise here: PendingSave.commit() reports it on every rank.
    Options: level (zstd 1..19, 0 stored), threads, shuffle, frame_bytes,
    fsync, direct, adapt (ckpt_opts_t)."""
    c = _comm.resolve(comm)
    root = checkpoint_root(root)
    step = _step(step)
    opts = _options(options)
    table, n, arrays, total = _table(tensors)
    os.makedirs(os.fspath(root), exist_ok=True)
    info = _lib.ShardInfo()
    lib = _lib.load()
    rc = lib.ckpt_shard_write(_fs(root), step, c.rank, c.size, table, n,
                              ctypes.byref(opts), ctypes.byref(info))
    detail = lib.ckpt_last_error().decode("utf-8", "replace") if rc != OK else None
    p = PendingSave(root, step, c, table, n, arrays, total, opts, rc, detail, None)
    p.info = info
    return p


def save(root: PathArg, step: int, tensors: Mapping[str, Any],
         record: Optional[Mapping[str, Any]] = None, *, comm: Optional[Comm] = None,
         **options: int) -> str:
    """Save ``tensors`` as step ``step`` under ``root`` and commit it with
    ``record``: collective over ``comm`` (default: torch.distributed when it
    runs with several ranks, else this process alone).  Every rank passes
    the same full tensors; each writes its slice.  Returns the step
    directory's path.  Raises the same way on every rank: a CkptError
    (ExistsError when the step is committed already, PeerError when another
    rank failed), or TypeError/ValueError for a tensor or record this
    format cannot hold."""
    c = _comm.resolve(comm)
    root = checkpoint_root(root)
    try:
        _record_json(record)  # a record the format cannot hold: nothing is written
        pending = write_shard(root, step, tensors, comm=c, **options)
    except (TypeError, ValueError, OSError, CkptError) as e:
        # Take part in the commit all the same: the other ranks are in it.
        empty = (_lib.Tensor * 1)()
        pending = PendingSave(root, step, c, empty, 0, [], 0, _default_options(),
                              OK, None, e)
    return pending.commit(record)


class Checkpoint:
    """A committed checkpoint opened for reading (a step directory).

    ``with Checkpoint(path) as ck:`` ... ``ck.read("w")``.  Attributes:
    path, step, total_bytes, world_size (the writers' number of shards),
    created (seconds since the epoch), record (the parsed record dict),
    tensors (an ordered dict name -> TensorInfo)."""

    def __init__(self, path: PathArg) -> None:
        self.path = os.fspath(path)
        lib = _lib.load()
        h = ctypes.c_void_p()
        check(lib.ckpt_open(_fs(self.path), ctypes.byref(h)), "ckpt_open")
        self._h = h
        self.step = lib.ckpt_step(h)
        self.total_bytes = lib.ckpt_total_bytes(h)
        self.world_size = lib.ckpt_world_size(h)
        self.created = lib.ckpt_created(h)
        self.record_json = lib.ckpt_record_json(h).decode("utf-8")
        self.record = json.loads(self.record_json)
        self.tensors = collections.OrderedDict()
        for i in range(lib.ckpt_num_tensors(h)):
            t = lib.ckpt_tensor_at(h, i).contents
            name = t.name.decode("utf-8", "replace")
            self.tensors[name] = TensorInfo(
                name, np.dtype(DTYPES[t.dtype][1]),
                tuple(int(t.shape[d]) for d in range(t.ndim)), int(t.offset), int(t.nbytes))

    def close(self) -> None:
        """Close (the shard files too); idempotent."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            _lib.load().ckpt_close(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"<Checkpoint {self.path!r} step {self.step} tensors {len(self.tensors)} "
                f"bytes {self.total_bytes} shards {self.world_size}>")

    def __len__(self):
        return len(self.tensors)

    def __iter__(self):
        return iter(self.tensors)

    def __contains__(self, name):
        return name in self.tensors

    def __getitem__(self, name):
        return self.read(name)

    def _handle(self):
        if not self._h:
            raise ValueError(f"checkpoint {self.path!r} is closed")
        return self._h

    def info(self, name: str) -> TensorInfo:
        """The TensorInfo of ``name``; NotFoundError when there is none."""
        t = self.tensors.get(name)
        if t is None:
            raise error(ENOTFOUND, "read", detail=f"no tensor '{name}' in '{self.path}'")
        return t

    @staticmethod
    def _dest(out, dtype, count, what):
        """A writable numpy view of ``out``'s own memory, of dtype and count
        elements: the library writes there, so ``out`` must be that memory
        (a contiguous copy of it would be written instead, and ``out`` left
        unchanged)."""
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(out, torch.Tensor):
            if out.device.type != "cpu" or out.layout != torch.strided:
                raise ValueError(f"{what}: out is a {out.layout} tensor on {out.device}: "
                                 f"read into a dense CPU tensor (then .copy_() it there)")
            have, n = str(out.dtype).replace("torch.", ""), out.numel()
            contiguous = out.is_contiguous()
        elif isinstance(out, np.ndarray):
            have, n = out.dtype.name if out.dtype.isnative else out.dtype.str, out.size
            contiguous = out.flags.c_contiguous
        else:
            raise TypeError(f"{what}: out must be a numpy array or a torch tensor, got "
                            f"{type(out).__name__}")
        if have != dtype.name or n != count:
            raise ValueError(f"{what}: out holds {n} x {have}, the checkpoint has "
                             f"{count} x {dtype.name}")
        if not contiguous:
            raise ValueError(f"{what}: out is not contiguous, so the data cannot be read "
                             f"into its memory: read into a contiguous one (or none), "
                             f"then copy it over")
        a = out.detach().numpy() if not isinstance(out, np.ndarray) else out
        if not a.flags.writeable:
            raise ValueError(f"{what}: out is read-only")
        return a

    def read(self, name: str, out: Any = None) -> Any:
        """Tensor ``name`` as a new numpy array of its global shape, or read
        into ``out`` (a numpy array or CPU torch tensor of its dtype and
        element count, written in place, zero-copy) and return out.
        Every frame read is checksummed: damage raises CorruptError."""
        t = self.info(name)
        count = int(np.prod(t.shape, dtype=np.int64))
        if out is None:
            dst = np.empty(t.shape, t.dtype)
            result = dst
        else:
            dst = self._dest(out, t.dtype, count, f"tensor '{name}'")
            result = out
        check(_lib.load().ckpt_read_tensor(self._handle(), name.encode("utf-8"),
                                            dst.ctypes.data, dst.nbytes),
              "ckpt_read_tensor")
        return result

    def read_slice(self, name: str, start: int = 0, stop: Optional[int] = None,
                   out: Any = None) -> Any:
        """Elements [start, stop) of tensor ``name`` flattened (row-major),
        as a 1-D numpy array (or into ``out``): only the frames holding them
        are read, whoever wrote them.  For resharding: rank r of M takes
        read_slice(name, r*n//M, (r+1)*n//M)."""
        t = self.info(name)
        count = int(np.prod(t.shape, dtype=np.int64))
        start = integer("start", start)
        stop = count if stop is None else integer("stop", stop)
        if not 0 <= start <= stop <= count:
            raise IndexError(f"tensor '{name}': slice [{start}, {stop}) outside "
                             f"[0, {count})")
        n = stop - start
        if out is None:
            dst = result = np.empty(n, t.dtype)
        else:
            dst = self._dest(out, t.dtype, n, f"tensor '{name}'")
            result = out
        size = t.dtype.itemsize
        check(_lib.load().ckpt_read_range(self._handle(), t.offset + start * size,
                                           n * size, dst.ctypes.data),
              "ckpt_read_range")
        return result

    def read_range(self, offset: int, length: int, out: Any = None) -> Any:
        """Bytes [offset, offset+length) of the flat space, as a uint8 array
        (or into ``out``, a uint8 array or tensor of that length)."""
        offset = integer("offset", offset, 0, UINT64_MAX)
        length = integer("length", length, 0, UINT64_MAX)
        if out is None:
            dst = result = np.empty(length, np.uint8)
        else:
            dst = self._dest(out, np.dtype(np.uint8), length, "read_range")
            result = out
        check(_lib.load().ckpt_read_range(self._handle(), offset, length,
                                           dst.ctypes.data),
              "ckpt_read_range")
        return result

    def load(self, names: Optional[Iterable[str]] = None) -> Dict[str, Any]:
        """{name: numpy array} for ``names`` (default: every tensor)."""
        return {n: self.read(n) for n in (self.tensors if names is None else names)}

    def verify(self) -> None:
        """Re-read every byte of every shard and check every checksum and
        size; raises (CorruptError, IncompleteError...) on the first fault."""
        check(_lib.load().ckpt_verify(self._handle()), "ckpt_verify")

    def set_read_threads(self, threads: int) -> None:
        """Threads that decode frames (default: the process's CPUs, at most
        8; processes sharing CPUs should pass their share)."""
        threads = integer("threads", threads, INT_MIN, INT_MAX)
        _lib.load().ckpt_set_read_threads(self._handle(), threads)


def open_checkpoint(path: PathArg) -> "Checkpoint":
    """Checkpoint(path)."""
    return Checkpoint(path)


def verify(path: PathArg) -> None:
    """Fully verify the checkpoint at ``path``; raises on any fault."""
    with Checkpoint(path) as ck:
        ck.verify()


def _latest_good_local(root, on_skip):
    lib = _lib.load()
    failed = []

    def report(_ctx, name, why):
        if on_skip is not None and not failed:
            try:
                on_skip(name.decode("utf-8", "replace"), why.decode("utf-8", "replace"))
            except BaseException as e:  # never through C
                failed.append(e)

    cb = _lib.REPORT(report)
    buf = ctypes.create_string_buffer(_lib.PATH_MAX)
    rc = lib.ckpt_latest_good(_fs(root), buf, len(buf), cb, None)
    if failed:
        raise failed[0]
    if rc == ENOTFOUND:
        return None
    check(rc, "ckpt_latest_good")
    return os.fsdecode(buf.value)


def latest_good(root: PathArg, on_skip: Optional[Callable[[str, str], None]] = None, *,
                comm: Optional[Comm] = None) -> Optional[str]:
    """The path of the newest checkpoint under ``root`` that fully verifies,
    or None when there is no checkpoint at all.  CorruptError when
    checkpoints exist but none verifies.  ``on_skip(name, why)`` hears of
    each newer one skipped.  Collective under torch.distributed (default
    comm): rank 0 searches (reading every byte of what it checks), the
    others get its answer, or its exception."""
    c = _comm.resolve(comm)
    root = checkpoint_root(root)
    if c.size == 1:
        return _latest_good_local(root, on_skip)
    answer = {}
    if c.rank == 0:
        try:
            answer = {"path": _latest_good_local(root, on_skip)}
        except CkptError as e:
            answer = {"code": e.code, "call": e.call, "detail": e.detail}
            mine = e
        except Exception as e:
            answer = {"code": None, "call": "latest_good", "detail": f"{type(e).__name__}: {e}"}
            mine = e
    data = json.loads(c.bcast_bytes(json.dumps(answer).encode() if c.rank == 0 else b"")
                      .decode())
    if "path" in data:
        return data["path"]
    if c.rank == 0:
        raise mine
    if data["code"] is None:
        raise RuntimeError(f"rank 0: {data['detail']}")
    raise error(data["code"], data["call"], detail=f"rank 0: {data['detail']}")


def list_checkpoints(root: PathArg, verify: bool = False) -> List[Entry]:
    """Every checkpoint under root (temp dirs of unfinished saves too),
    sorted by step, as Entry tuples; with verify=True each committed one is
    read whole and checked.  NotFoundError when root does not exist."""
    root = checkpoint_root(root)
    lib = _lib.load()
    arr = ctypes.POINTER(_lib.Entry)()
    n = ctypes.c_size_t(0)
    size = ctypes.sizeof(_lib.Entry)
    check(lib.ckpt_list_sized(_fs(root), 1 if verify else 0, size, ctypes.byref(arr),
                              ctypes.byref(n)), "ckpt_list_sized")
    try:
        out = []
        for i in range(n.value):
            e = arr[i]
            if e.size != size:
                raise error(EINVAL, "ckpt_list_sized",
                            detail=f"entry {i} has size {e.size}, the binding's "
                                   f"ckpt_entry_t has {size} bytes")
            name = e.name.decode("utf-8", "replace")
            out.append(Entry(name, os.path.join(os.fspath(root), name), int(e.step),
                             _STATUS[e.status] if 0 <= e.status < len(_STATUS) else str(e.status),
                             bool(e.is_latest), bool(e.is_link), int(e.world_size),
                             int(e.raw_bytes), int(e.file_bytes), int(e.created),
                             e.why.decode("utf-8", "replace")))
        return out
    finally:
        if arr:
            _lib.libc_free(ctypes.cast(arr, ctypes.c_void_p))


def prune(root: PathArg, keep: int, in_use: Optional[PathArg] = None,
          keep_good: bool = False) -> int:
    """Remove all but the newest ``keep`` committed checkpoints (never
    ``in_use``; with keep_good=True never the newest that verifies either).
    Run it on one rank.  Returns how many were removed.  ``keep`` must not
    be negative (ValueError); one above 2**31-1 keeps every checkpoint."""
    root = checkpoint_root(root)
    lib = _lib.load()
    # A C int holds keep; more than it can hold keeps everything anyway,
    # and must never wrap around to a small number (2**32 would be 0).
    keep = min(integer("keep", keep, 0), INT_MAX)
    removed = ctypes.c_int(0)
    use = _fs(in_use) if in_use is not None else None
    if keep_good:
        good = ctypes.create_string_buffer(_lib.PATH_MAX)
        rc = lib.ckpt_prune_keep_good(_fs(root), keep, use, ctypes.byref(removed),
                                      good, len(good))
        check(rc, "ckpt_prune_keep_good")
    else:
        check(lib.ckpt_prune(_fs(root), keep, use, ctypes.byref(removed)), "ckpt_prune")
    return removed.value


__all__ = ["DTYPES", "TensorInfo", "Entry", "PendingSave", "Checkpoint", "as_array",
           "write_shard", "save", "open_checkpoint", "verify", "latest_good",
           "list_checkpoints", "prune", "step_dirname", "step_path", "strerror",
           "is_run_dir", "checkpoint_root", "resume_point", "RUN_CKPT"]
