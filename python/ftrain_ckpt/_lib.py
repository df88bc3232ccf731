"""_lib.py - find and load libftrain-ckpt.so.2 and declare its C API.

The library is looked for, first match wins:

1. FTRAIN_CKPT_LIB, a path: only there (a wrong path is an error, never
   silently replaced by another copy);
2. the source tree this package sits in (``python/`` beside ``include/``):
   ``$BUILD/libftrain-ckpt.so.2``, BUILD taken from the environment as the
   Makefile does (default ``build``, relative to the tree's root);
3. the library installed with this package: ``make install`` writes its
   LIBDIR into ``_installed.py`` beside this file (a PREFIX such as
   ``/opt/ftrain`` is in no loader path);
4. ``ctypes.util.find_library("ftrain-ckpt")`` (ldconfig's cache: an
   installed copy), then ``libftrain-ckpt.so.2`` through the dynamic loader
   (LD_LIBRARY_PATH, the default directories).

Loading is lazy: ``import ftrain_ckpt`` never fails for want of the
library; the first call that needs it raises LibraryNotFoundError naming
every place tried.

The structures below mirror include/ftrain/ckpt.h field by field; the
SONAME's major version (.2) is the promise that they keep this layout.
Opts and Entry begin with their size, as the C structures do: the binding
passes ctypes.sizeof(Opts) to ckpt_opts_init and ctypes.sizeof(Entry) to
ckpt_list_sized, so a library whose structures differ from these refuses
them (CKPT_EINVAL) rather than read or write past them, and checks the
size the library wrote back (checkpoint.py).
"""
import ctypes
import ctypes.util
import operator
import os
import threading

SONAME = "libftrain-ckpt.so.2"

# Constants of include/ftrain/ckpt.h.
MAX_DIMS = 4
NAME_MAX = 128
PATH_MAX = 4096
FILE_NAME_MAX = 64
ENTRY_WHY_MAX = 256


# Integer ranges of the C types.  ctypes keeps only the low bits of a
# Python int that does not fit its C type (2**32 passed as an int is 0, -1
# as a uint64_t is 2**64-1), so every integer is checked with integer()
# before it is passed.
INT_MIN, INT_MAX = -2**31, 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
UINT64_MAX = 2**64 - 1
SIZE_MAX = 2**(8 * ctypes.sizeof(ctypes.c_size_t)) - 1


def integer(what, value, lo=None, hi=None):
    """value as an int in lo..hi (None: no bound), else TypeError (not an
    integer: a float is not truncated) or ValueError naming ``what``."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        how = "negative" if lo is not None and n < 0 <= lo else "out of range"
        bounds = f"{lo} or more" if hi is None else f"{lo}..{hi}"
        raise ValueError(f"{what} {n} is {how}: it must be {bounds}")
    return n


class LibraryNotFoundError(ImportError):
    """libftrain-ckpt.so.2 could not be loaded from any place tried."""


class Tensor(ctypes.Structure):
    """ckpt_tensor_t."""
    _fields_ = [
        ("name", ctypes.c_char * NAME_MAX),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("offset", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
    ]


class Opts(ctypes.Structure):
    """ckpt_opts_t (size: ctypes.sizeof(Opts), set by ckpt_opts_init)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("level", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("shuffle", ctypes.c_int),
        ("frame_bytes", ctypes.c_size_t),
        ("fsync", ctypes.c_int),
        ("direct", ctypes.c_int),
        ("adapt", ctypes.c_int),
    ]


class ShardInfo(ctypes.Structure):
    """ckpt_shard_info_t."""
    _fields_ = [
        ("raw_offset", ctypes.c_uint64),
        ("raw_bytes", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
        ("xxh64", ctypes.c_uint64),
        ("table_xxh64", ctypes.c_uint64),
        ("nframes", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


ALLGATHER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_size_t)
BCAST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_size_t, ctypes.c_int)
REPORT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)


class Coll(ctypes.Structure):
    """ckpt_coll_t."""
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("allgather", ALLGATHER),
        ("bcast", BCAST),
    ]


class Entry(ctypes.Structure):
    """ckpt_entry_t (size: the entry size ckpt_list_sized was given)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("name", ctypes.c_char * FILE_NAME_MAX),
        ("step", ctypes.c_uint64),
        ("status", ctypes.c_int),
        ("is_latest", ctypes.c_int),
        ("is_link", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("raw_bytes", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
        ("created", ctypes.c_int64),
        ("why", ctypes.c_char * ENTRY_WHY_MAX),
    ]


_c = ctypes
_P = ctypes.POINTER
_str = ctypes.c_char_p
_vp = ctypes.c_void_p

# name: (restype, argtypes)
_API = {
    "ckpt_strerror": (_str, [_c.c_int]),
    "ckpt_last_error": (_str, []),
    "ckpt_dtype_size": (_c.c_size_t, [_c.c_int]),
    "ckpt_opts_init": (_c.c_int, [_P(Opts), _c.c_size_t]),
    "ckpt_layout": (_c.c_int, [_P(Tensor), _c.c_size_t, _P(_c.c_uint64)]),
    "ckpt_shard_write": (_c.c_int, [_str, _c.c_uint64, _c.c_int, _c.c_int, _P(Tensor),
                                    _c.c_size_t, _P(Opts), _P(ShardInfo)]),
    "ckpt_commit": (_c.c_int, [_str, _c.c_uint64, _P(Tensor), _c.c_size_t, _str, _P(Opts),
                               _c.c_int, _P(ShardInfo), _P(Coll)]),
    "ckpt_save": (_c.c_int, [_str, _c.c_uint64, _P(Tensor), _c.c_size_t, _str, _P(Opts),
                             _P(Coll)]),
    "ckpt_open": (_c.c_int, [_str, _P(_vp)]),
    "ckpt_close": (None, [_vp]),
    "ckpt_step": (_c.c_uint64, [_vp]),
    "ckpt_total_bytes": (_c.c_uint64, [_vp]),
    "ckpt_world_size": (_c.c_int, [_vp]),
    "ckpt_num_tensors": (_c.c_size_t, [_vp]),
    "ckpt_tensor_at": (_P(Tensor), [_vp, _c.c_size_t]),
    "ckpt_record_json": (_str, [_vp]),
    "ckpt_created": (_c.c_int64, [_vp]),
    "ckpt_read_range": (_c.c_int, [_vp, _c.c_uint64, _c.c_uint64, _vp]),
    "ckpt_set_read_threads": (None, [_vp, _c.c_int]),
    "ckpt_read_tensor": (_c.c_int, [_vp, _str, _vp, _c.c_uint64]),
    "ckpt_verify": (_c.c_int, [_vp]),
    "ckpt_step_dirname": (None, [_c.c_uint64, _c.c_char_p, _c.c_size_t]),
    "ckpt_list_sized": (_c.c_int, [_str, _c.c_int, _c.c_size_t, _P(_P(Entry)),
                                   _P(_c.c_size_t)]),
    "ckpt_latest_good": (_c.c_int, [_str, _c.c_char_p, _c.c_size_t, REPORT, _vp]),
    "ckpt_prune": (_c.c_int, [_str, _c.c_int, _str, _P(_c.c_int)]),
    "ckpt_prune_keep_good": (_c.c_int, [_str, _c.c_int, _str, _P(_c.c_int), _c.c_char_p,
                                        _c.c_size_t]),
    # The node-local tier (include/ftrain/ckpt_local.h; local_tier.py).
    # ckpt_local_scan's array is ckpt_local_step_t, local_tier.LocalStep.
    "ckpt_shard_put": (_c.c_int, [_str, _c.c_uint64, _c.c_int, _vp, _c.c_uint64,
                                  _c.c_uint64]),
    "ckpt_shard_check": (_c.c_int, [_vp, _c.c_uint64, _c.c_uint64, _c.c_uint64, _c.c_int]),
    "ckpt_local_seal": (_c.c_int, [_str, _c.c_uint64, _P(Tensor), _c.c_size_t, _str,
                                   _P(Opts), _P(ShardInfo), _c.c_int, _c.c_int,
                                   _P(_c.c_int)]),
    "ckpt_local_scan": (_c.c_int, [_str, _P(_vp), _P(_c.c_size_t)]),
    "ckpt_local_scan_free": (None, [_vp, _c.c_size_t]),
    "ckpt_local_verify": (_c.c_int, [_str, _P(_c.c_int)]),
    "ckpt_local_flush": (_c.c_int, [_P(_str), _c.c_size_t, _c.c_uint64, _str, _c.c_char_p,
                                    _c.c_size_t]),
    "ckpt_local_drop_after": (_c.c_int, [_str, _c.c_uint64, _P(_c.c_int)]),
}
# The stop path (include/ftrain/ckpt_stop.h): optional, so that a library
# built before it still serves checkpoints; StopGuard says what is missing.
_STOP_API = {
    "ckpt_stop_install": (_c.c_int, [_c.c_int]),
    "ckpt_stop_requested": (_c.c_int, []),
    "ckpt_stop_time": (_c.c_double, []),
    "ckpt_stop_agree": (_c.c_int, [_P(Coll), _c.c_int64, _P(_c.c_int64), _P(_c.c_int)]),
}

_lock = threading.Lock()
_lib = None
_path = None
_has_stop = False


def _tree_root():
    """The source tree's root when this package runs from it, else None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isfile(os.path.join(root, "include", "ftrain", "ckpt.h")):
        return root
    return None


def candidates():
    """[(where, path-or-name)] in the order load() tries them."""
    env = os.environ.get("FTRAIN_CKPT_LIB")
    if env:
        return [("FTRAIN_CKPT_LIB", env)]
    out = []
    root = _tree_root()
    if root is not None:
        build = os.environ.get("BUILD") or "build"
        bdir = build if os.path.isabs(build) else os.path.join(root, build)
        out.append(("the source tree's $BUILD", os.path.join(bdir, SONAME)))
    try:
        from . import _installed
    except ImportError:
        _installed = None
    if _installed is not None:
        out.append(("installed with this package", os.path.join(_installed.LIBDIR, SONAME)))
    found = ctypes.util.find_library("ftrain-ckpt")
    if found:
        out.append(("ctypes.util.find_library", found))
    out.append(("the dynamic loader", SONAME))
    return out



def load():
    """The loaded library (a ctypes.CDLL with its prototypes set)."""
    global _lib, _path, _has_stop
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        lib = None
        cands = candidates()
        for where, name in cands:
            if os.sep in name and not os.path.exists(name):
                tried.append(f"{name} ({where}): no such file")
                continue
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                tried.append(f"{name} ({where}): {e}")
                continue
            path = name
            break
        if lib is None:
            if cands[-1][0] == "the dynamic loader" and \
                    not any(where == "ctypes.util.find_library" for where, _ in cands):
                tried.insert(-1, "ftrain-ckpt (ctypes.util.find_library): not in ldconfig's cache")
            raise LibraryNotFoundError(
                "cannot load " + SONAME + "; tried: " + "; ".join(tried) +
                ". Build it (make), install it (make install), or set FTRAIN_CKPT_LIB to its path")
        for fname, (res, args) in _API.items():
            try:
                fn = getattr(lib, fname)
            except AttributeError:
                raise LibraryNotFoundError(f"{path} has no {fname}: not a compatible {SONAME}")
            fn.restype, fn.argtypes = res, args
        has_stop = True
        for fname, (res, args) in _STOP_API.items():
            try:
                fn = getattr(lib, fname)
            except AttributeError:
                has_stop = False
                continue
            fn.restype, fn.argtypes = res, args
        _path, _has_stop, _lib = path, has_stop, lib
    return _lib


def path():
    """The path (or name) the library was loaded from, loading it if needed."""
    load()
    return _path


def has_stop():
    """True when the loaded library has the stop path (ckpt_stop_*)."""
    load()
    return _has_stop


_libc = None


def libc_free(ptr):
    """free() a pointer the library malloc'd (ckpt_list's array)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.free.restype, _libc.free.argtypes = None, [ctypes.c_void_p]
    _libc.free(ptr)
