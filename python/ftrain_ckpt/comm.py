"""comm.py - the collectives the library's agreements run through.

libftrain-ckpt knows nothing of MPI or torch.distributed: its collective
phases (the commit of a sharded save, the stop agreement) call back into a
ckpt_coll_t with two operations, allgather and bcast.  This module builds
one from Python:

* SingleProcess - a world of one (the C side gets coll NULL);
* TorchComm     - torch.distributed: each callback copies the C buffer into
  a uint8 tensor and calls dist.all_gather / dist.broadcast on the process
  group (gloo: CPU tensors; nccl: tensors on the current CUDA device);
* default_comm() - TorchComm of the default group when torch.distributed is
  initialized with more than one rank, else SingleProcess.

A Python exception inside a callback cannot cross the C library: the
callback returns failure, the library returns CKPT_EPEER, and the caller
raises PeerError whose __cause__ is the original exception.
"""
from __future__ import annotations

from typing import Any, Optional

import ctypes
import os
import socket
import sys

from . import _lib


# The name lookup_node_name() falls back to when neither SLURMD_NODENAME
# nor the host name gives one.
UNKNOWN_NODE = "unknown"


def lookup_node_name() -> str:
    """This node's name as ftrain names it (world.c): SLURMD_NODENAME when
    set and not empty, else the host name (socket.gethostname()), else
    UNKNOWN_NODE ("unknown") when that fails or is empty.  The one lookup
    of the node-local tier (local_tier.node_name, which also refuses a
    name a directory cannot have) and of the watchdog's records
    (watchdog.host_name, which also keeps it to what a record holds)."""
    node = os.environ.get("SLURMD_NODENAME") or ""
    if not node:
        try:
            node = socket.gethostname()
        except OSError:
            node = ""
    return node or UNKNOWN_NODE


class Comm:
    """Base class: ``rank``, ``size``, the ctypes ckpt_coll_t (or None)."""

    rank = 0
    size = 1

    def coll(self):
        """A pointer to this collective's ckpt_coll_t, or None (one process)."""
        return None

    def take_error(self):
        """The exception a callback caught since the last call, or None."""
        return None

    def bcast_bytes(self, data, root=0):
        """Broadcast root's bytes to every rank; returns them everywhere."""
        return data

    def __repr__(self):
        return f"<{type(self).__name__} rank {self.rank} of {self.size}>"


class SingleProcess(Comm):
    """A world of one process."""


SINGLE = SingleProcess()


class TorchComm(Comm):
    """torch.distributed's process group ``group`` (default: the world)."""

    def __init__(self, group: Any = None) -> None:
        import torch
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("TorchComm: torch.distributed is not initialized "
                               "(call torch.distributed.init_process_group first)")
        self._torch, self._dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        backend = str(dist.get_backend(group)).lower()
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if backend == "nccl" else torch.device("cpu"))
        self._error = None
        # Keep the callbacks alive as long as this object: the library
        # calls them through the structure.
        self._ag = _lib.ALLGATHER(self._allgather)
        self._bc = _lib.BCAST(self._bcast)
        self._struct = _lib.Coll(None, self.rank, self.size, self._ag, self._bc)

    def coll(self):
        return ctypes.pointer(self._struct)

    def take_error(self):
        e, self._error = self._error, None
        return e

    def _global(self, root):
        """The global rank of group rank ``root`` (what dist.broadcast takes)."""
        if self.group is None:
            return root
        fn = getattr(self._dist, "get_global_rank", None)
        if fn is None:  # torch < 2.0
            from torch.distributed import distributed_c10d as c10d
            fn = c10d._get_global_rank
        return fn(self.group, root)

    def _tensor(self, nbytes, src=None):
        torch = self._torch
        t = torch.empty(nbytes, dtype=torch.uint8)
        if src is not None and nbytes:
            ctypes.memmove(t.data_ptr(), src, nbytes)
        return t.to(self.device) if self.device.type != "cpu" else t

    def _out(self, t, dst):
        if t.device.type != "cpu":
            t = t.cpu()
        if t.numel():
            ctypes.memmove(dst, t.data_ptr(), t.numel())

    def _allgather(self, _ctx, send, recv, nbytes):
        try:
            mine = self._tensor(nbytes, send)
            outs = [self._tensor(nbytes) for _ in range(self.size)]
            self._dist.all_gather(outs, mine, group=self.group)
            for i, t in enumerate(outs):
                self._out(t, recv + i * nbytes)
            return 0
        except BaseException as e:  # never let it unwind through C
            if self._error is None:
                self._error = e
            return 1

    def _bcast(self, _ctx, buf, nbytes, root):
        try:
            t = self._tensor(nbytes, buf if self.rank == root else None)
            self._dist.broadcast(t, src=self._global(root), group=self.group)
            if self.rank != root:
                self._out(t, buf)
            return 0
        except BaseException as e:
            if self._error is None:
                self._error = e
            return 1

    def bcast_bytes(self, data, root=0):
        torch = self._torch
        n = torch.tensor([len(data) if self.rank == root else 0], dtype=torch.int64)
        n = n.to(self.device) if self.device.type != "cpu" else n
        self._dist.broadcast(n, src=self._global(root), group=self.group)
        size = int(n.item())
        t = torch.empty(size, dtype=torch.uint8)
        if self.rank == root and size:
            t.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        t = t.to(self.device) if self.device.type != "cpu" else t
        if size:
            self._dist.broadcast(t, src=self._global(root), group=self.group)
        return bytes(t.cpu().numpy().tobytes())


def default_comm() -> "Comm":
    """TorchComm() when torch.distributed runs with more than one rank
    (torch must already be imported: this never imports it), else SINGLE."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() \
            and dist.get_world_size() > 1:
        return TorchComm()
    return SINGLE


def resolve(comm: Optional["Comm"]) -> "Comm":
    """comm, or default_comm() for None."""
    if comm is None:
        return default_comm()
    if not isinstance(comm, Comm):
        raise TypeError(f"comm must be a ftrain_ckpt Comm (TorchComm, SINGLE), got {type(comm).__name__}")
    return comm


