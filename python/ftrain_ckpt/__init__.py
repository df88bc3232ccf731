"""ftrain_ckpt - Python binding of libftrain-ckpt (ctypes, no compile step).

Sharded, zstd-compressed, checksummed checkpoints with one atomic commit
point, readable on any world size, and the stop path that makes a
training program requeue-safe under slurm/train.sbatch.  docs/python.md
is the guide; each function's docstring is its reference.

HowTo (save, every rank):

    import ftrain_ckpt as fc
    path = fc.save(root, step, {"w": w, "b": b}, record={"epoch": 3})
        # collective over torch.distributed when it runs with several
        # ranks (comm=fc.SINGLE for one process); each rank writes its
        # slice of the same full tensors, zero-copy; one commit point

HowTo (load, any world size):

    path = fc.latest_good(root)            # newest that verifies, or None
                                           # (root: a checkpoint root, or a run
                                           # directory standing for its ckpt/)
    with fc.Checkpoint(path) as ck:
        w = ck.read("w")                   # numpy array; or ck.read("w", out=t)
        part = ck.read_slice("w", lo, hi)  # elements [lo, hi) only
        epoch = ck.record["epoch"]

HowTo (a whole PyTorch run, fresh or resumed; run_dir as ftrain --run-dir):

    sampler = fc.ResumableSampler(dataset, global_batch, seed=1)  # any world size
    state = {"scheduler": sched, "sampler": sampler, "best": None}  # objects, values
    path = fc.resume_point(run_dir)        # newest good checkpoint, or None: fresh
    if path is not None:
        record = fc.load_state(path, model, optimizer, state=state)
    ... each step: train on sampler's batch; sampler.advance()
    fc.save_state(os.path.join(run_dir, "ckpt"), step, model, optimizer,
                  state=state, record={...})

HowTo (stop on a signal, all ranks at one step):

    fc.hold_stop_signals()                 # first, before importing torch
    guard = fc.StopGuard()                 # USR1 (FTRAIN_STOP_SIGNAL), TERM, INT
    ... each step: if guard.check(step) is not None: save; fc.exit_now(fc.EXIT_REQUEUE)

Errors: every library failure raises a subclass of CkptError (errors.py)
carrying ckpt_strerror() and ckpt_last_error().  The library is found
through FTRAIN_CKPT_LIB, the source tree's build directory, or the system
(_lib.py); loading is lazy, so importing this package never fails for
want of it, and it imports neither numpy nor torch until they are needed.
"""
from ._lib import LibraryNotFoundError, SONAME
from ._lib import path as library_path
from .errors import (CkptError, CkptIOError, CkptMemoryError, InvalidArgumentError,
                     BadCheckpointError, CorruptError, FormatError, IncompleteError,
                     VersionError, NotFoundError, ExistsError, PeerError,
                     CompressionError, ArchiveError, strerror)
from .comm import Comm, SingleProcess, TorchComm, SINGLE, default_comm
from .stop import (StopGuard, hold_stop_signals, parse_signal, exit_now, EXIT_DONE,
                   EXIT_REQUEUE, STOP_SIGNALS)

from ._version import __version__

# Loaded on first use (they import numpy, and torch_state imports torch).
_LAZY = {
    "checkpoint": ("DTYPES", "TensorInfo", "Entry", "PendingSave", "Checkpoint", "as_array",
                   "write_shard", "save", "open_checkpoint", "verify", "latest_good",
                   "list_checkpoints", "prune", "step_dirname", "step_path",
                   "is_run_dir", "checkpoint_root", "resume_point"),
    "torch_state": ("save_state", "load_state", "state_tensors", "rng_state",
                    "set_rng_state"),
    "sampler": ("ResumableSampler",),
    "local_tier": ("LocalTier", "node_name"),
    "watchdog": ("Watchdog", "EXIT_HANG", "parse_heartbeat"),
}
_WHERE = {name: mod for mod, names in _LAZY.items() for name in names}


def __getattr__(name):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'ftrain_ckpt' has no attribute '{name}'")
    import importlib
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_WHERE))


__all__ = ["LibraryNotFoundError", "SONAME", "library_path", "CkptError", "CkptIOError",
           "CkptMemoryError", "InvalidArgumentError", "BadCheckpointError", "CorruptError",
           "FormatError", "IncompleteError", "VersionError", "NotFoundError", "ExistsError",
           "PeerError", "CompressionError", "ArchiveError", "strerror", "Comm",
           "SingleProcess", "TorchComm", "SINGLE", "default_comm", "StopGuard",
           "hold_stop_signals", "parse_signal", "exit_now", "EXIT_DONE", "EXIT_REQUEUE",
           "STOP_SIGNALS", "__version__"] + sorted(_WHERE)
