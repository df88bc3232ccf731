"""local_tier.py - the node-local checkpoint tier from PyTorch.

A training run saves every few steps to storage on its own nodes (a local
SSD or tmpfs), each node keeping its ranks' shards plus a *partner copy* of
the shards of the ranks of the node before it, and now and then flushes one
of those steps into the shared tier as an ordinary checkpoint.  A node that
is lost takes its local checkpoints with it; the next node in the ring holds
copies of its shards, so the nodes that are left (on the same or fewer
ranks, with new nodes or without) restore the newest step they hold between
them, without reading the shared tier.

This is ftrain's own tier (src/tier/, docs/checkpoint-format.md section 10
"The node-local tier") on the library's node store
(include/ftrain/ckpt_local.h), with torch.distributed for the collectives:
all_gather_object for the small facts (votes, shard infos, what each node
holds), isend/irecv of uint8 tensors for shard files.

Placement (as ftrain's tier_place): nodes are numbered in the order their
first rank appears; rank r, the j-th rank of node k, sends its shard file
to the (j mod n)-th rank of node (k + 1) mod N (n: that node's ranks, N:
the nodes).  With one node there is no partner copy (said once).

One save (LocalTier.save, collective; in the background by default, see
below):
  1. each rank writes its shard into its node's root (ckpt_shard_write, the
     same tensors and record save_state() writes, so load_state() reads it);
     vote;
  2. each rank sends its file to its partner, which checks and keeps it
     (ckpt_shard_put: the bytes must hash to the writer's XXH64); vote;
  3. each node's first rank seals its directory (ckpt_local_seal, with rank
     0's record): that rename is the node's commit point; older steps
     beyond ``keep`` are pruned; vote.
A save that fails anywhere raises on every rank (PeerError on the ranks
that did not fail) and leaves no sealed step of its own.

In the background (async_save=True, the default; False keeps the
synchronous save): save() first waits for the save before it (exactly one
in flight) and raises that save's failure on every rank; then the training
thread takes the state's references (the parameters and the optimizer's
state tensors, not copied), copies of the rest (buffers, which change in
the forward; the tensors of state= and extra=), the record and the table,
wraps optimizer.step on the instance, starts a helper thread and returns.
The helper writes the shard from the live tensors (step 1: ctypes lets go
of the GIL), then puts optimizer.step back; a step called meanwhile waits
for it (the guard), so the saved step is exactly the state at the save()
call while the next forward and backward run.  Steps 2 and 3 and the flush
follow on the helper, whose collectives go through a gloo process group of
the tier's own (made at construction: never the training thread's group,
where DDP's allreduce runs).  Until wait_snapshot() returns, the
parameters and the optimizer's state must change only through that
optimizer's step(): docs/python.md says what else not to do.  A failure
in the background raises at the next save(), wait(), flush(), close() (any
call that waits), on every rank; its step is never sealed, the sealed
steps before it stay.  Every wait is bounded by ``timeout`` (TimeoutError
naming the step and where the helper is), and the helper's collectives
time out after it too.  FTRAIN_LOCAL_FAULT injects faults for tests
(FAULT_ENV below).

Restore (LocalTier.resume_point / LocalTier.restore, collective): the newest
shared checkpoint that verifies (resume_point of the shared root), then the
newest node-local step newer than it that the nodes now running hold
between them: every copy a node will use is read whole and its XXH64
checked against the manifest first (a damaged one is never used: another
node's copy is, or the step is given up for an older one, and finally for
the shared tier, each said on rank 0's stderr); each node then gets the
shard files it lacks from the nodes that hold them and assembles the whole
step in a private directory (<root>/.restore/step-<N>: links to its own
files and the copies received), which load_state() reads on any world size.
Then each node drops its local steps newer than the step resumed from
(ckpt_local_drop_after), so that the next saves of those steps start clean.

Flush (LocalTier.flush, collective): rank 0's node assembles the step the
same way (<root>/.flush/step-<N>) and rank 0 copies it into the shared root
with ckpt_local_flush: every shard's hash checked as it is copied, the whole
verified, one atomic commit (the rename) and LATEST.

HowTo:

    tier = fc.LocalTier("/tmp/ftrain-local/%n", every=50, keep=2,
                        shared=os.path.join(run_dir, "ckpt"),
                        flush_every=10)   # collective
    path = tier.resume_point()            # or fc.resume_point(run_dir, local=tier)
    if path is not None:
        record = fc.load_state(path, model, optimizer, state=state)
        step = record["step"]
    ... each step: tier.save(step, model, optimizer, state=state,
                             record={"step": step})   # saves when step % every == 0
                                                      # (returns at once)
    tier.close()                          # waits for the last save; collective
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional

import collections
import ctypes
import datetime
import errno
import functools
import hashlib
import json
import os
import shutil
import sys
import threading
import time

from . import _lib
from . import checkpoint as _ck
from . import comm as _comm
from ._lib import integer, INT_MAX
from .errors import (OK, EIO, EPEER, EEXIST, EINCOMPLETE, CkptError, BadCheckpointError, error,
                     check)
from .comm import Comm, lookup_node_name

# Private directories of a node's root (no step name: readers, prune and
# flush ignore them): where a node assembles a whole step to restore from
# or to flush.
RESTORE_DIR = ".restore"
FLUSH_DIR = ".flush"
NODE_MARK = ".node-"  # ftrain's marker: this directory is node <name>'s
SCAN_MAX = 4          # the newest local steps a node reports at a restore


def node_name(node: Optional[str] = None) -> str:
    """The node's name, as ftrain names it: ``node`` when given, else
    comm.lookup_node_name() (SLURMD_NODENAME, else the host name, else
    "unknown"); a ValueError when it is not a name a directory can have."""
    if node is None:
        node = lookup_node_name()
    if not isinstance(node, str) or not node or "/" in node or "\0" in node or \
            node in (".", ".."):
        raise ValueError(f"node name {node!r}: must be a non-empty name without '/'")
    return node


class LocalStep(ctypes.Structure):
    """ckpt_local_step_t."""
    _fields_ = [
        ("step", ctypes.c_uint64),
        ("nshards", ctypes.c_int),
        ("npresent", ctypes.c_int),
        ("present", ctypes.POINTER(ctypes.c_uint8)),
        ("total_bytes", ctypes.c_uint64),
        ("present_bytes", ctypes.c_uint64),
    ]


StepInfo = collections.namedtuple("StepInfo", "step nshards present total_bytes present_bytes")
StepInfo.__doc__ = """A sealed step of a node-local root (LocalTier.scan()):
present is the tuple of shard indices this node holds."""


def expand(pattern: str, node: str) -> str:
    """``pattern`` with %n replaced by the node's name and %% by %; any
    other % sequence is a ValueError (ftrain's tier_expand)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%":
            nxt = pattern[i + 1:i + 2]
            if nxt == "n":
                out.append(node)
            elif nxt == "%":
                out.append("%")
            else:
                raise ValueError(f"local root '{pattern}': '%{nxt}' is not %n (the node's "
                                 f"name) or %% (a '%')")
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def place(node_of: List[int], nnodes: int) -> List[int]:
    """Each rank's partner (-1: none) under the ring over nodes (tier_place)."""
    size = len(node_of)
    partner = [-1] * size
    if nnodes < 2:
        return partner
    for r in range(size):
        k = node_of[r]
        nxt = (k + 1) % nnodes
        j = sum(1 for q in range(r) if node_of[q] == k)
        ranks = [q for q in range(size) if node_of[q] == nxt]
        if ranks:
            partner[r] = ranks[j % len(ranks)]
    return partner


def _within(inner: str, outer: str) -> bool:
    inner, outer = os.path.realpath(inner), os.path.realpath(outer)
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _ranges(nums) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    nums = sorted(nums)
    out, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


def _manifest_key(text: str) -> str:
    """What two nodes' manifests of one step must agree on: all but created,
    options and the manifest's own checksum (section 10, "The partial
    manifest rule")."""
    m = json.loads(text)
    for k in ("created", "options", "manifest_xxh64"):
        m.pop(k, None)
    return hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()[:16]


def _read_bytes(path: str, size: int):
    """The file's bytes as a uint8 numpy array of exactly ``size`` bytes,
    else OSError."""
    import numpy as np
    data = np.fromfile(path, dtype=np.uint8)
    if data.size != size:
        raise OSError(f"'{path}' holds {data.size} bytes, the manifest says {size}")
    return data


# Fault injection for tests (tests/python/python_local_tier.sh), read at
# LocalTier's construction: a comma-separated list of
#   write@R   rank R's shard write fails as on a full disk (ENOSPC);
#   put@R     rank R fails to store the partner copy it receives (CKPT_EIO);
#   slow@S    every rank's shard write starts S seconds late (a slow copy:
#             the optimizer-step guard holds meanwhile);
# each with ":STEP" after it for the save of that step only (write@1:4).
FAULT_ENV = "FTRAIN_LOCAL_FAULT"


def _parse_fault(text: str) -> Dict[str, Any]:
    """{what: (argument, step or None)} from FAULT_ENV's text."""
    out: Dict[str, Any] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        what, _, arg = item.partition("@")
        arg, _, at = arg.partition(":")
        try:
            at_step = int(at) if at else None
            if what in ("write", "put"):
                out[what] = (int(arg), at_step)
                continue
            if what == "slow":
                out[what] = (float(arg), at_step)
                continue
        except ValueError:
            pass
        raise ValueError(f"{FAULT_ENV}={text!r}: '{item}' is not write@RANK, put@RANK or "
                         f"slow@SECONDS (each with an optional :STEP)")
    return out


class _SaveJob:
    """One save in the background: the helper thread, the copy's event
    (the optimizer-step guard waits on it), the outcome."""

    def __init__(self, tier: "LocalTier", step: int, optimizer: Any, t0: float) -> None:
        self.tier, self.step, self.optimizer, self.t0 = tier, step, optimizer, t0
        self.thread: Optional[threading.Thread] = None
        self.copy_done = threading.Event()
        self.done = threading.Event()
        self.exc: Optional[BaseException] = None
        self.raised: Optional[BaseException] = None  # raised by save() already
        self.marks: List[tuple] = []  # (phase, seconds since save() was called)
        self.phase = "starting"
        self.call_s = self.guard_wait_s = self.copy_s = self.total_s = 0.0
        self._lock = threading.Lock()
        self._wrapper = None
        self._prev: Any = None

    @property
    def phase(self) -> str:
        """Where the helper is (said by a wait that times out)."""
        return self._phase

    @phase.setter
    def phase(self, what: str) -> None:
        self._phase = what
        self.marks.append((what, time.perf_counter() - self.t0))

    # -- the optimizer-step guard --------------------------------------------
    def guard(self) -> None:
        """Wrap optimizer.step (on the instance; the class is untouched) so
        that it waits for the copy; copied() puts back what was there."""
        opt = self.optimizer
        if opt is None or not callable(getattr(opt, "step", None)):
            return
        inner = opt.step
        job = self

        @functools.wraps(inner)  # keeps e.g. the LR scheduler's _with_counter mark
        def step(*args, **kwargs):
            job.wait_copied(None, "optimizer.step()")
            return inner(*args, **kwargs)

        self._prev = opt.__dict__.get("step", _MISSING)
        self._wrapper = step
        opt.step = step

    def _unguard(self) -> None:
        with self._lock:
            opt, w = self.optimizer, self._wrapper
            self._wrapper = None
            if w is None or opt.__dict__.get("step") is not w:
                return  # not ours any more (or never): leave it
            if self._prev is _MISSING:
                del opt.step
            else:
                opt.step = self._prev

    def copied(self) -> None:
        self.copy_s = time.perf_counter() - self.t0
        self.copy_done.set()
        self._unguard()

    def wait_copied(self, timeout: Optional[float], who: str) -> None:
        if self.copy_done.is_set():
            return
        t = time.perf_counter()
        limit = self.tier.timeout if timeout is None else timeout
        ok = self.copy_done.wait(limit)
        self.guard_wait_s += time.perf_counter() - t
        if not ok:
            raise TimeoutError(f"local tier: {who} waited {limit:g} s for the background save "
                               f"of step {self.step} to copy the state, and it has not "
                               f"(its helper is at: {self.phase})")

    # -- the helper thread ---------------------------------------------------------
    def run(self, snap, exc) -> None:
        tier = self.tier
        tier._tls.g = tier._ghelper
        try:
            tier._save_body(self.step, snap, exc, self)
        except BaseException as e:  # noqa: BLE001 (the training thread raises it)
            self.exc = e
        finally:
            snap = None
            if not self.copy_done.is_set():
                self.copied()
            self.total_s = time.perf_counter() - self.t0
            self.phase = "done" if self.exc is None else f"failed: {self.exc}"
            tier.last_save = {"step": self.step, "async": 1.0, "call_s": self.call_s,
                              "guard_wait_s": self.guard_wait_s,
                              "stall_s": self.call_s + self.guard_wait_s,
                              "copy_s": self.copy_s, "total_s": self.total_s}
            self.done.set()

    def join(self, timeout: Optional[float]) -> None:
        limit = self.tier.timeout if timeout is None else timeout
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(limit)
        if not self.done.is_set():
            raise TimeoutError(f"local tier: the background save of step {self.step} did not "
                               f"end within {limit:g} s (its helper is at: {self.phase})")


_MISSING = object()


class _Group:
    """The collectives this module uses, over a Comm (a world of one runs
    them locally)."""

    def __init__(self, comm: Comm, group: Any = "comm") -> None:
        """group: the comm's own process group (default), or a process
        group of the same ranks on the CPU (the save helper's)."""
        self.comm, self.rank, self.size = comm, comm.rank, comm.size
        if self.size > 1:
            import torch
            import torch.distributed as dist
            self.torch, self.dist = torch, dist
            if group == "comm":
                self.group = getattr(comm, "group", None)
                self.device = getattr(comm, "device", None)
            else:
                self.group, self.device = group, None

    def gather(self, obj):
        if self.size == 1:
            return [obj]
        out = [None] * self.size
        self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def bcast(self, obj, root: int):
        if self.size == 1:
            return obj
        box = [obj]
        self.dist.broadcast_object_list(box, src=self.comm._global(root), group=self.group)
        return box[0]

    def barrier(self) -> None:
        if self.size > 1:
            self.dist.barrier(group=self.group)

    def exchange(self, sends, recvs, into=None):
        """sends: [(rank, tag, uint8 numpy array)]; recvs: [(rank, tag,
        nbytes)].  Returns the received arrays, in the order of recvs.
        into: a function (i, nbytes) -> a CPU uint8 tensor of nbytes to
        receive recvs[i] in (buffers kept between saves); default new ones."""
        if not sends and not recvs:
            return []
        torch, dist = self.torch, self.dist
        dev = self.device if self.device is not None and self.device.type != "cpu" else None
        works, outs = [], []
        for peer, tag, arr in sends:
            t = torch.from_numpy(arr)
            if dev is not None:
                t = t.to(dev)
            outs.append(None)
            works.append(dist.isend(t, self.comm._global(peer), group=self.group, tag=tag))
        got = []
        for i, (peer, tag, nbytes) in enumerate(recvs):
            if into is not None and dev is None:
                t = into(i, nbytes)
            else:
                t = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            got.append(t)
            works.append(dist.irecv(t, self.comm._global(peer), group=self.group, tag=tag))
        for w in works:
            w.wait()
        return [t.cpu().numpy() if dev is not None else t.numpy() for t in got]


class LocalTier:
    """The node-local tier of one run (collective to make: every rank of the
    comm).

    local_root: each node's directory, on storage of its own (a local disk,
        tmpfs); %n is replaced by the node's name (node_name()), %% by %.
        Every node needs a directory of its own: two nodes given one (a
        shared file system without %n) are refused.  Created when missing.
    every: save() saves the steps that are multiples of it (>= 1).
    keep: the local steps each node keeps (>= 1; its newest).
    node: this node's name (default SLURMD_NODENAME, else the host name).
    shared: the shared tier (a checkpoint root, or a run directory standing
        for its ckpt/; a fresh run directory has no ckpt/ yet and cannot be
        told from a root, so give RUN/ckpt): resume_point()'s and flush()'s
        default, and where
        flush_every flushes to.  It must not contain the local root, nor lie
        inside it.
    flush_every: flush every flush_every-th local save (the steps that are
        multiples of every * flush_every) into ``shared``; 0: never.
    comm: the collective (default: torch.distributed's world when it has
        several ranks, else this process alone).
    log: called with each message (default: rank 0 prints it on stderr).
    async_save: save() in the background (default), or synchronous
        (False); save(async_save=...) decides for one save.
    timeout: seconds (600): the longest wait for a background save (its
        copy, its end), and its helper's collectives' timeout.
    options: checkpoint options of the local shards (level 0, stored, by
        default: the local tier is about speed; frame_bytes, threads...).

    Constructing it also makes the save helper's process group
    (torch.distributed.new_group, gloo): with a comm of a subgroup, every
    process of the default group must make its LocalTier at the same time,
    as new_group requires.
    """

    def __init__(self, local_root, every: int = 1, keep: int = 2, *,
                 node: Optional[str] = None, shared=None, flush_every: int = 0,
                 comm: Optional[Comm] = None, log: Optional[Callable[[str], None]] = None,
                 async_save: bool = True, timeout: float = 600.0,
                 **options: int) -> None:
        self.every = integer("every", every, 1)
        self.async_save = bool(async_save)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or \
                not 0 < timeout < 1e9:
            raise ValueError(f"timeout {timeout!r}: seconds, > 0 (the longest wait for a "
                             f"background save, and its collectives' timeout)")
        self.timeout = float(timeout)
        self._tls = threading.local()  # the helper thread's group (_g)
        self._job: Optional[_SaveJob] = None  # the save in flight, or the last one
        self._bufs: Dict[Any, Any] = {}  # exchange buffers kept between saves
        self._faults = _parse_fault(os.environ.get(FAULT_ENV, ""))
        self.last_save: Dict[str, float] = {}  # the last save's timings (stall_s...)
        try:
            self.keep = integer("keep", keep, 1, INT_MAX)
        except ValueError:
            raise ValueError(f"keep {keep}: a node keeps its newest `keep` local "
                             f"checkpoints, at least 1") from None
        self.flush_every = integer("flush_every", flush_every, 0)
        if self.flush_every and shared is None:
            raise ValueError("flush_every needs shared= (the shared tier to flush into)")
        self.shared = os.fspath(shared) if shared is not None else None
        self.options = dict({"level": 0}, **options)
        _ck._options(self.options)  # an unknown option or value: refused now
        self.comm = _comm.resolve(comm)
        self._gmain = _Group(self.comm)
        self.rank, self.size = self.comm.rank, self.comm.size
        self._log_fn = log
        self.node = node_name(node)
        self.pattern = os.fspath(local_root)
        self.root = os.path.abspath(expand(self.pattern, self.node))
        self.last_resume = None  # (tier, step, path) of the last resume_point

        # Every rank's node, and the launch's id for the node markers.
        launch = os.urandom(8).hex() if self.rank == 0 else None
        facts = self._g.gather((self.node, launch))
        launch = facts[0][1]
        self.hosts: List[str] = []
        self.node_of: List[int] = []
        for name, _ in facts:
            if name not in self.hosts:
                self.hosts.append(name)
            self.node_of.append(self.hosts.index(name))
        self.nnodes = len(self.hosts)
        self.my_node = self.node_of[self.rank]
        self.ranks_of = [[r for r in range(self.size) if self.node_of[r] == k]
                         for k in range(self.nnodes)]
        self.leaders = [ranks[0] for ranks in self.ranks_of]
        self.leader = self.leaders[self.my_node] == self.rank
        partner = place(self.node_of, self.nnodes)
        self.partner = partner[self.rank]
        self.srcs = [r for r in range(self.size) if partner[r] == self.rank]

        # The directory: apart from the shared tier, made, writable (the
        # leader's marker is the test), and this node's alone.
        exc = None
        try:
            if self.shared is not None:
                shared_root = _ck.checkpoint_root(self.shared)
                for a, b, how in ((self.root, shared_root, "lies inside"),
                                  (shared_root, self.root, "contains")):
                    if _within(a, b):
                        raise ValueError(
                            f"the node-local directory '{self.root}' {how} the shared "
                            f"checkpoint root '{shared_root}': each tier would delete the "
                            f"other's checkpoints; give a node-local directory outside it")
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError as e:
                raise OSError(f"cannot create '{self.root}': {e.strerror or e}") from None
            if not os.path.isdir(self.root):
                raise NotADirectoryError(f"'{self.root}' is not a directory")
            if self.leader:
                mark = os.path.join(self.root, NODE_MARK + self.node)
                try:
                    with open(mark, "w") as f:
                        f.write(launch + "\n")
                except OSError as e:
                    raise OSError(f"cannot write in '{self.root}' ({mark}): "
                                  f"{e.strerror or e}") from None
            elif not os.access(self.root, os.W_OK | os.X_OK):
                raise PermissionError(f"cannot write in '{self.root}'")
        except (OSError, ValueError) as e:
            exc = type(e)(f"local tier: node {self.node}: {e}")
        self._agree("LocalTier", exc)
        exc = None
        if self.leader:
            for name in sorted(os.listdir(self.root)):
                if not name.startswith(NODE_MARK) or name == NODE_MARK + self.node:
                    continue
                path = os.path.join(self.root, name)
                try:
                    with open(path) as f:
                        theirs = f.read().strip()
                except OSError:
                    continue
                if theirs == launch:
                    exc = ValueError(
                        f"local tier: nodes {self.node} and {name[len(NODE_MARK):]} were given "
                        f"the same directory '{self.root}' (a file system both see): each "
                        f"node needs its own, so put %n, the node's name, in the path (for "
                        f"example '{os.path.join(self.pattern, '%n')}')")
                    break
                try:
                    os.unlink(path)  # a marker of an earlier launch
                except OSError:
                    pass
        self._agree("LocalTier", exc)
        # The save helper's own process group (gloo, the same ranks): its
        # collectives never share a group with the training thread's (DDP's
        # allreduce on the default group).  Collective, like new_group.
        self._ghelper = self._gmain
        if self.size > 1:
            import torch.distributed as dist
            cgroup = getattr(self.comm, "group", None)
            ranks = None if cgroup is None else [self.comm._global(r) for r in range(self.size)]
            self._ghelper = _Group(self.comm, dist.new_group(
                ranks=ranks, backend="gloo", timeout=datetime.timedelta(seconds=self.timeout)))
        if self.nnodes == 1:
            self._log(f"one node ({self.node}) in this world: no partner copies are made, so a "
                      f"lost node loses its local checkpoints (the shared tier's stay)")

    @property
    def _g(self) -> _Group:
        """The group of this thread's collectives: the helper's own on the
        save helper thread, else the comm's."""
        return getattr(self._tls, "g", None) or self._gmain

    # ---- small helpers ----------------------------------------------------

    def _log(self, msg: str) -> None:
        if self._log_fn is not None:
            if self.rank == 0:
                self._log_fn(msg)
        elif self.rank == 0:
            print(f"ftrain_ckpt: local tier: {msg}", file=sys.stderr, flush=True)

    def _agree(self, what: str, exc: Optional[BaseException], data: Any = None) -> List[Any]:
        """Collective vote: every rank's data, or on every rank an exception:
        this rank's own, or PeerError naming the first rank that failed."""
        msg = None if exc is None else f"{type(exc).__name__}: {exc}"
        got = self._g.gather((msg, data))
        bad = [(r, m) for r, (m, _) in enumerate(got) if m is not None]
        if bad:
            if exc is not None:
                raise exc
            r, m = bad[0]
            raise error(EPEER, what, detail=f"rank {r} on node {self.hosts[self.node_of[r]]} "
                                            f"failed: {m}")
        return [d for _, d in got]

    def _stepdir(self, step: int, root: Optional[str] = None) -> str:
        return os.path.join(root or self.root, _ck.step_dirname(step))

    def _remove_private(self, *names: str) -> None:
        """Leader: remove private assembly directories (no collective)."""
        if self.leader:
            for name in names:
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    # ---- this node's store ----------------------------------------------------

    def scan(self) -> List[StepInfo]:
        """This node's sealed steps, newest first (ckpt_local_scan: each
        manifest validated; present is which shard files are here, of the
        manifest's size, not read).  Not collective."""
        lib = _lib.load()
        arr, n = ctypes.c_void_p(), ctypes.c_size_t(0)
        check(lib.ckpt_local_scan(_ck._fs(self.root), ctypes.byref(arr), ctypes.byref(n)),
              "ckpt_local_scan")
        try:
            steps = ctypes.cast(arr, ctypes.POINTER(LocalStep))
            out = []
            for i in range(n.value):
                s = steps[i]
                present = tuple(j for j in range(s.nshards) if s.present[j])
                out.append(StepInfo(int(s.step), int(s.nshards), present,
                                    int(s.total_bytes), int(s.present_bytes)))
            return out
        finally:
            lib.ckpt_local_scan_free(arr, n.value)

    def verify(self, step: int) -> int:
        """Read every shard file of this node's step ``step`` whole and check
        it against the manifest (ckpt_local_verify).  Returns how many
        shards this node lacks; raises on a damaged one.  Not collective."""
        missing = ctypes.c_int(0)
        check(_lib.load().ckpt_local_verify(_ck._fs(self._stepdir(step)),
                                            ctypes.byref(missing)), "ckpt_local_verify")
        return missing.value

    def drop_after(self, step: int) -> int:
        """Collective: each node's first rank removes its local steps newer
        than ``step`` (and unfinished saves; ckpt_local_drop_after), as
        resume_point() does after it chose ``step``.  Returns the number
        removed on this node (0 on the other ranks)."""
        step = _ck._step(step)
        self._settle()
        removed = ctypes.c_int(0)
        exc = None
        if self.leader:
            rc = _lib.load().ckpt_local_drop_after(_ck._fs(self.root), step,
                                                   ctypes.byref(removed))
            if rc != OK:
                exc = error(rc, "ckpt_local_drop_after")
        self._agree("drop_after", exc)
        return removed.value

    # ---- save -----------------------------------------------------------------

    def due(self, step: int) -> bool:
        """True when save(step) saves: step is a multiple of ``every``."""
        return _ck._step(step) % self.every == 0

    def save(self, step: int, model: Any = None, optimizer: Any = None, *,
             state: Optional[Mapping[str, Any]] = None,
             record: Optional[Mapping[str, Any]] = None,
             extra: Optional[Mapping[str, Any]] = None, force: bool = False,
             async_save: Optional[bool] = None) -> Optional[str]:
        """Collective: save what save_state() saves (the same arguments) as
        local step ``step`` when it is due (a multiple of ``every``; force:
        any step), with partner copies, sealed on every node; then flush it
        when flush_every says so.  Returns this node's step directory (in
        the background: the path it has once sealed), or None when the step
        is not due.

        First it waits for the save before (bounded by ``timeout``) and
        raises that save's failure, on every rank.  Synchronous
        (async_save False, here or the tier's): it returns once the step is
        sealed and raises on every rank when any rank failed.  In the
        background (the default): it takes the state's tensors' references
        (copies of the buffers, ``state`` and ``extra`` tensors) and the
        record, wraps ``optimizer.step`` so that a step waits for the copy,
        and returns; a helper thread writes the shard, exchanges the partner
        copies, votes, seals (and flushes) on a process group of its own.
        Until wait_snapshot() the model's parameters and the optimizer's
        state must change only through ``optimizer.step()``.  Nothing of a
        failed step is sealed (unless the failure was in the seal itself or
        the flush), on either path."""
        step = _ck._step(step)
        if not force and step % self.every:
            return None
        self.wait()  # one save in flight; the one before's failure raises here
        t0 = time.perf_counter()
        background = self.async_save if async_save is None else bool(async_save)
        exc, snap = None, None
        try:
            snap = self._snapshot(model, optimizer, state, record, extra, background)
        except Exception as e:  # noqa: BLE001 (this rank still votes: the others wait)
            exc = e
        if not background:
            path = self._save_body(step, snap, exc, None)
            t = time.perf_counter() - t0
            self.last_save = {"step": step, "async": 0.0, "call_s": t, "guard_wait_s": 0.0,
                              "stall_s": t, "copy_s": t, "total_s": t}
            return path
        job = _SaveJob(self, step, optimizer, t0)
        if exc is None:
            job.guard()
        self._job = job
        job.thread = threading.Thread(target=job.run, args=(snap, exc),
                                      name=f"ftrain-local-save-{step}")
        job.thread.start()
        job.call_s = time.perf_counter() - t0
        if exc is not None:
            job.raised = exc
            raise exc  # this rank's own mistake, now; its helper votes it
        return self._stepdir(step)

    def wait_snapshot(self, timeout: Optional[float] = None) -> None:
        """Wait until the save in the background has copied the state (the
        model and optimizer may change after it).  Bounded: TimeoutError
        after ``timeout`` seconds (default the tier's), naming the step and
        where its helper is.  A failed copy raises at wait(), not here.
        Not collective."""
        job = self._job
        if job is not None:
            job.wait_copied(timeout, "wait_snapshot()")

    def wait(self, timeout: Optional[float] = None) -> Optional[str]:
        """Wait for the save in the background to be sealed (and flushed)
        on every node; raise its failure (on every rank: this rank's own,
        PeerError on the others).  Returns this node's step directory of
        the save waited for, or None when none was in flight.  Bounded:
        TimeoutError after ``timeout`` seconds (default the tier's), naming
        the step and what its helper waits for; the save stays in flight
        then (a later wait() waits again).  Not itself collective, but every
        rank's helper votes with the others'."""
        job = self._job
        if job is None:
            return None
        job.join(timeout)
        self._job = None
        self.last_save.update(guard_wait_s=job.guard_wait_s,
                              stall_s=job.call_s + job.guard_wait_s, phases=list(job.marks))
        if job.exc is not None and job.exc is not job.raised:
            raise job.exc
        return None if job.exc is not None else self._stepdir(job.step)

    def _settle(self) -> None:
        """A collective other than save() first waits for the save in the
        background (and raises its failure); not on the helper itself."""
        job = self._job
        if job is not None and job.thread is not threading.current_thread():
            self.wait()

    def _snapshot(self, model, optimizer, state, record, extra, background) -> dict:
        """The training thread's part of a save: the tensors save_state()
        writes (references to the parameters and the optimizer's state;
        in the background, copies of everything else: buffers, ``state``'s
        and ``extra``'s tensors), the record, the table."""
        from . import torch_state as _ts
        record = dict(record or {})
        if _ts.RECORD_KEY in record:
            raise ValueError(f"record key '{_ts.RECORD_KEY}' is save_state()'s own")
        tensors, meta = _ts.state_tensors(model, optimizer, extra)
        ntensors = len(tensors)
        if state:
            meta["objects"] = _ts._encode_state(state, tensors)
        if background:
            # What optimizer.step() does not change, changes elsewhere (a
            # BatchNorm's running stats in forward, a scheduler's or the
            # caller's tensors): copied now.  The parameters and the
            # optimizer's state are taken by reference, guarded.
            guarded = set()
            if model is not None:
                guarded |= {p.data_ptr() for p in _ts._unwrap(model).parameters()}
            names = list(tensors)
            for i, k in enumerate(names):
                v = tensors[k]
                if i < ntensors and (k.startswith("optim/") or
                                     (k.startswith("model/") and
                                      getattr(v, "data_ptr", lambda: None)() in guarded)):
                    continue
                if hasattr(v, "clone"):
                    tensors[k] = v.detach().clone()
                elif hasattr(v, "copy"):
                    tensors[k] = v.copy()
        record[_ts.RECORD_KEY] = meta
        rec = _ck._record_json(record)
        opts = _ck._options(self.options)
        table, n, arrays, total = _ck._table(tensors)
        return {"table": table, "n": n, "arrays": arrays, "rec": rec, "opts": opts,
                "bytes": total}

    def _save_body(self, step: int, snap: Optional[dict], exc: Optional[BaseException],
                   job: Optional["_SaveJob"]) -> str:
        """The save after the snapshot: write the shard (then job.copied()),
        vote, partner copies, vote, seal, vote, flush.  On the training
        thread (synchronous) or the helper (job), whose collectives go
        through the helper's group."""
        lib = _lib.load()
        info, own = None, None
        table = n = arrays = opts = rec = None
        if snap is not None:
            table, n, arrays = snap["table"], snap["n"], snap["arrays"]
            opts, rec = snap["opts"], snap["rec"]
        try:
            if exc is None:
                if job is not None:
                    job.phase = "writing this rank's shard"
                slow = self._fault("slow", step)
                if slow:
                    time.sleep(slow)
                if self._fault("write", step) == self.rank:
                    raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected: "
                                                f"{FAULT_ENV} write@{self.rank})")
                info = _lib.ShardInfo()
                rc = lib.ckpt_shard_write(_ck._fs(self.root), step, self.rank, self.size, table,
                                          n, ctypes.byref(opts), ctypes.byref(info))
                if rc == EEXIST:
                    raise error(rc, "ckpt_shard_write",
                                detail=f"{lib.ckpt_last_error().decode('utf-8', 'replace')} (a "
                                       f"local step {step} is sealed on node {self.node} "
                                       f"already: after a resume, resume_point() drops the "
                                       f"local steps newer than the one resumed from; or call "
                                       f"drop_after())")
                check(rc, "ckpt_shard_write")
        except Exception as e:  # noqa: BLE001 (this rank still votes: the others wait)
            exc, info = e, None
        finally:
            if job is not None:
                job.copied()  # the tensors are free to change
        try:
            if exc is None and self.partner >= 0:
                if job is not None:
                    job.phase = "reading this rank's shard back"
                own = self._read_own(step, info.file_bytes)
        except Exception as e:  # noqa: BLE001
            exc, info = e, None
        mine = None if info is None else (info.raw_offset, info.raw_bytes, info.file_bytes,
                                         info.xxh64, info.table_xxh64, info.nframes, info.flags)
        try:
            if job is not None:
                job.phase = "the vote on the shards (every rank's helper)"
            infos = self._agree(f"local save of step {step}", exc, mine)
        except BaseException:
            self._discard(step)
            raise
        # Every rank has read or left what a restore assembled before.
        self._remove_private(RESTORE_DIR, FLUSH_DIR)

        # 2. Partner copies.
        exc = None
        if self.nnodes > 1:
            sends = [(self.partner, 0, own)] if self.partner >= 0 else []
            recvs = [(src, 0, infos[src][2]) for src in self.srcs]
            if job is not None:
                job.phase = (f"the partner copies (to rank {self.partner}, from ranks "
                             f"{_ranges(self.srcs) or 'none'})")
            try:
                got = self._g.exchange(sends, recvs,
                                       lambda i, nbytes: self._buf(("recv", i), nbytes))
                for src, data in zip(self.srcs, got):
                    if self._fault("put", step) == self.rank:
                        raise error(EIO, "ckpt_shard_put",
                                    detail=f"injected: {FAULT_ENV} put@{self.rank}")
                    check(lib.ckpt_shard_put(_ck._fs(self.root), step, src, data.ctypes.data,
                                             data.size, infos[src][3]), "ckpt_shard_put")
            except Exception as e:  # noqa: BLE001 (voted below)
                exc = e
        own = None
        # Rank 0's record seals every node's directory.
        try:
            if job is not None:
                job.phase = "the vote on the partner copies (every rank's helper)"
            recs = self._agree(f"partner copies of step {step}", exc,
                               rec if self.rank == 0 else None)
        except BaseException:
            self._discard(step)
            raise

        # 3. Seal, one rank per node.
        exc, present = None, ctypes.c_int(0)
        if job is not None:
            job.phase = "the seal"
        if self.leader:
            all_infos = (_lib.ShardInfo * self.size)()
            for r, t in enumerate(infos):
                all_infos[r] = _lib.ShardInfo(*t)
            rc = lib.ckpt_local_seal(_ck._fs(self.root), step, table, n, recs[0],
                                     ctypes.byref(opts), all_infos, self.size, self.keep,
                                     ctypes.byref(present))
            if rc != OK:
                exc = error(rc, "ckpt_local_seal")
                exc = type(exc)(exc.code, exc.call, exc.reason,
                                f"node {self.node}: {exc.detail}")
        del arrays  # the tensors' views: alive until the seal
        if job is not None:
            job.phase = "the vote on the seal (every rank's helper)"
        self._agree(f"sealing step {step}", exc)
        if self.flush_every and step % (self.every * self.flush_every) == 0:
            if job is not None:
                job.phase = "the flush into the shared tier"
            self.flush(step)
        return self._stepdir(step)

    def _fault(self, what: str, step: int) -> Any:
        """The injected fault ``what`` for the save of ``step`` (FAULT_ENV),
        or None."""
        arg, at = self._faults.get(what, (None, None))
        return arg if at is None or at == step else None

    def _buf(self, key, nbytes: int):
        """A CPU uint8 tensor of nbytes, kept under ``key`` between saves
        (grown when a save needs more): where a save receives the partner
        copies.  Received into fresh memory, 256 MiB took 3 to 4 s on a
        loaded 2-core VM (a page fault per 4 KiB page), into this buffer
        0.3 s; close() lets it go."""
        import torch
        buf = self._bufs.get(key)
        if buf is None or buf.numel() < nbytes:
            self._bufs[key] = buf = None  # the old one goes first
            buf = self._bufs[key] = torch.empty(nbytes, dtype=torch.uint8)
        return buf[:nbytes]

    def _read_own(self, step: int, size: int):
        """This rank's shard file of the save under way, as a uint8 numpy
        array: a private mapping of the file (no copy, no new memory)."""
        import numpy as np
        path = os.path.join(self.root, ".tmp-" + _ck.step_dirname(step),
                            f"shard-{self.rank}.ftsh")
        have = os.stat(path).st_size
        if have != size:
            raise OSError(f"'{path}' holds {have} bytes, the shard written {size}")
        return np.memmap(path, dtype=np.uint8, mode="c", shape=(size,))

    def _discard(self, step: int) -> None:
        """After a failed vote (every rank is past its writes): the node's
        temp directory of the save goes, so that a retry starts clean."""
        if self.leader:
            shutil.rmtree(os.path.join(self.root, ".tmp-" + _ck.step_dirname(step)),
                          ignore_errors=True)

    # ---- what the nodes hold, and a whole step on the nodes that need it -------

    def _reports(self) -> Dict[int, Dict[int, tuple]]:
        """Collective: {node: {step: (manifest key, present shards)}}, each
        node's first rank's scan (its newest SCAN_MAX steps)."""
        mine, exc = None, None
        if self.leader:
            try:
                mine = {}
                for s in self.scan()[:SCAN_MAX]:
                    with open(os.path.join(self._stepdir(s.step), "manifest.json")) as f:
                        mine[s.step] = (_manifest_key(f.read()), s.present)
            except (OSError, ValueError, CkptError) as e:
                exc = e
        got = self._agree("scanning the local tier", exc, mine)
        return {self.node_of[r]: got[r] for r in self.leaders}

    def _verify_share(self, step: int, man: dict, shards) -> Dict[int, Optional[str]]:
        """Check this rank's share of ``shards`` (this node's copies of step):
        each read whole, its XXH64 against the manifest's.  {shard: None
        (good) or why not}."""
        lib = _lib.load()
        ranks = self.ranks_of[self.my_node]
        mine = [s for i, s in enumerate(sorted(shards)) if i % len(ranks) == ranks.index(self.rank)]
        out = {}
        for s in mine:
            sh = man["shards"][s]
            path = os.path.join(self._stepdir(step), f"shard-{s}.ftsh")
            try:
                data = _read_bytes(path, int(sh["file_bytes"]))
                rc = lib.ckpt_shard_check(data.ctypes.data, data.size, int(sh["xxh64"], 16),
                                          step, s)
                out[s] = None if rc == OK else \
                    f"{path} does not hash to the manifest's xxh64 (ckpt_shard_check: " \
                    f"{lib.ckpt_last_error().decode('utf-8', 'replace')})"
            except OSError as e:
                out[s] = f"{path}: {e}"
        return out

    def _assemble(self, step: int, dests, sub: str, reports) -> tuple:
        """Collective: assemble step ``step`` whole on each node of ``dests``
        in <root>/<sub>/step-<N> from copies that verify.  Returns (True,
        the path on the ranks of a dest node and None on the others, where
        each shard was read), or (False, None, why) on every rank when the
        nodes now running cannot; a failure to write raises."""
        holders = {k: set(rep[step][1]) for k, rep in reports.items() if step in rep}
        if not holders:
            return False, None, f"no node now running holds step {step}"
        keys = {rep[step][0] for rep in reports.values() if step in rep}
        if len(keys) > 1:
            return False, None, (f"the nodes' manifests of step {step} differ (two "
                                 f"different checkpoints of one step number): neither is "
                                 f"trusted")
        first = self.leaders[min(holders)]
        text = None
        if self.rank == first:
            try:
                with open(os.path.join(self._stepdir(step), "manifest.json")) as f:
                    text = f.read()
            except OSError as e:
                text = ""
                self._log(f"cannot read the manifest of step {step}: {e}")
        text = self._g.bcast(text, first)
        if not text:
            return False, None, (f"the manifest of step {step} cannot be read on node "
                                 f"{self.hosts[min(holders)]}")
        man = json.loads(text)
        nshards = len(man["shards"])
        everything = set(range(nshards))
        absent = everything - set().union(*holders.values())
        if absent:
            return False, None, (f"shards {_ranges(absent)} of step {step} are held by no "
                                 f"node now running")
        # Round 1: the dest nodes check their own copies; round 2: the other
        # nodes check the copies the dest nodes lack.
        good = {k: set() for k in range(self.nnodes)}
        bad: Dict[int, Dict[int, str]] = {k: {} for k in range(self.nnodes)}

        def check_round(task):
            shards = task.get(self.my_node, set())
            res, exc = {}, None
            try:
                res = self._verify_share(step, man, shards) if shards else {}
            except Exception as e:  # noqa: BLE001 (voted: every rank raises)
                exc = e
            for r, res_r in enumerate(self._agree(f"checking step {step}", exc, res)):
                for s, why in res_r.items():
                    if why is None:
                        good[self.node_of[r]].add(s)
                    else:
                        bad[self.node_of[r]][s] = why

        check_round({k: holders[k] for k in dests if k in holders})
        need = set()
        for k in dests:
            need |= everything - good[k]
        task = {k: holders[k] & need for k in holders if k not in dests and holders[k] & need}
        if task:
            check_round(task)
        # The plan: each dest node gets what it lacks from the least loaded
        # node with a good copy.
        load = [0] * self.nnodes
        plan = []  # (shard, from node, to node)
        for k in sorted(dests):
            for s in sorted(everything - good[k]):
                srcs = [j for j in range(self.nnodes) if s in good[j]]
                if not srcs:
                    damaged = [f"{self.hosts[j]}: {bad[j][s]}" for j in range(self.nnodes)
                               if s in bad[j]]
                    return False, None, (f"shard {s} of step {step} has no good copy on the "
                                         f"nodes now running (damaged: "
                                         f"{'; '.join(damaged)})")
                j = min(srcs, key=lambda x: (load[x], x))
                load[j] += 1
                plan.append((s, j, k))
        # Who sends and who receives: the ranks of a node in turn.
        turn_src, turn_dst = [0] * self.nnodes, [0] * self.nnodes
        sends, recvs = [], []
        for s, j, k in plan:
            src = self.ranks_of[j][turn_src[j] % len(self.ranks_of[j])]
            dst = self.ranks_of[k][turn_dst[k] % len(self.ranks_of[k])]
            turn_src[j] += 1
            turn_dst[k] += 1
            if src == self.rank:
                sends.append((dst, s, s))
            if dst == self.rank:
                recvs.append((src, s, s))
        mine_dest = self.my_node in dests
        base = os.path.join(self.root, sub)
        tmp = os.path.join(base, ".tmp-" + _ck.step_dirname(step))
        exc = None
        out = []
        try:
            for dst, tag, s in sends:
                out.append((dst, tag, _read_bytes(
                    os.path.join(self._stepdir(step), f"shard-{s}.ftsh"),
                    int(man["shards"][s]["file_bytes"]))))
            if mine_dest and self.leader:
                shutil.rmtree(base, ignore_errors=True)
                os.makedirs(tmp)
                for s in sorted(good[self.my_node]):
                    src = os.path.join(self._stepdir(step), f"shard-{s}.ftsh")
                    dst = os.path.join(tmp, f"shard-{s}.ftsh")
                    try:
                        os.link(src, dst)
                    except OSError:
                        shutil.copyfile(src, dst)
        except Exception as e:  # noqa: BLE001 (voted below)
            exc = e
        self._agree(f"preparing step {step}", exc)
        exc = None
        lib = _lib.load()
        try:
            got = self._g.exchange(out, [(src, tag, int(man["shards"][s]["file_bytes"]))
                                         for src, tag, s in recvs])
            out = None
            for (src, _tag, s), data in zip(recvs, got):
                check(lib.ckpt_shard_put(_ck._fs(base), step, s, data.ctypes.data, data.size,
                                         int(man["shards"][s]["xxh64"], 16)), "ckpt_shard_put")
        except Exception as e:  # noqa: BLE001 (voted below)
            exc = e
        self._agree(f"moving the shards of step {step}", exc)
        exc = None
        path = os.path.join(base, _ck.step_dirname(step))
        if mine_dest and self.leader:
            try:
                with open(os.path.join(tmp, "manifest.json"), "w") as f:
                    f.write(text)
                os.rename(tmp, path)
            except OSError as e:
                exc = e
        self._agree(f"assembling step {step}", exc)
        for j in range(self.nnodes):
            for s, why in sorted(bad[j].items()):
                self._log(f"step {step}: the copy of shard {s} on {self.hosts[j]} is damaged, "
                          f"never used: {why}")
        where = []
        for k in sorted(dests):
            parts = [f"shards {_ranges(good[k])} its own"] if good[k] else []
            for j in range(self.nnodes):
                got = [s for s, src, dst in plan if src == j and dst == k]
                if got:
                    parts.append(f"shards {_ranges(got)} from {self.hosts[j]}")
            where.append(f"{self.hosts[k]}: " + ", ".join(parts))
        return True, (path if mine_dest else None), "; ".join(where)

    # ---- restore ----------------------------------------------------------------

    def release(self) -> None:
        """Collective: remove what resume_point() assembled (every rank has
        loaded it).  save() does it too."""
        self._settle()
        self._g.barrier()
        self._remove_private(RESTORE_DIR, FLUSH_DIR)

    def resume_point(self, shared=None, on_skip: Optional[Callable[[str, str], None]] = None
                     ) -> Optional[str]:
        """Collective: where to resume from, the newest of the two tiers:
        the shared tier's newest checkpoint that verifies (``shared``,
        default the tier's), or a newer node-local step that the nodes now
        running hold between them (on any number of ranks), assembled whole
        on each node (a step directory load_state() reads; it stays until
        the next save(), release() or close()).  None for a fresh run.
        Each node then drops its local steps newer than the one chosen.
        What it uses, and each local step it cannot use and why, is said
        on rank 0 (log).  last_resume is (tier, step, path) after it."""
        self._settle()
        shared = self.shared if shared is None else os.fspath(shared)
        spath, sstep, sexc = None, -1, None
        if shared is not None:
            try:
                spath = _ck.resume_point(shared, on_skip, comm=self.comm)
            except BadCheckpointError as e:
                sexc = e
            if spath is not None:
                with _ck.Checkpoint(spath) as ck:
                    sstep = int(ck.step)
        self.release()
        reports = self._reports()
        steps = sorted({s for rep in reports.values() for s in rep if s > sstep}, reverse=True)
        shared_is = f"the shared tier's step {sstep}" if spath else "the shared tier (empty)"
        found = None
        for i, step in enumerate(steps):
            ok, path, how = self._assemble(step, set(range(self.nnodes)), RESTORE_DIR, reports)
            if ok:
                found = (step, path, how)
                break
            self._log(f"local step {step} cannot be restored: {how}; " +
                      ("trying an older one" if i + 1 < len(steps) else
                       f"no local step newer than {shared_is} is left"))
        if found is not None:
            step, path, how = found
            self._log(f"resuming from local step {step} ({how}), newer than {shared_is}")
            self.last_resume = ("local", step, path)
        elif sexc is not None:
            raise sexc
        else:
            step, path = (sstep if spath else 0), spath
            if spath is not None:
                self._log(f"resuming from the shared tier: {spath}")
                self.last_resume = ("shared", sstep, spath)
            else:
                if steps:
                    self._log("starting fresh: neither tier holds a checkpoint that can be "
                              "restored")
                self.last_resume = None
        self.drop_after(step)
        return path

    def restore(self, model: Any = None, optimizer: Any = None, *,
                state: Optional[Mapping[str, Any]] = None,
                extra: Optional[Mapping[str, Any]] = None, strict: bool = True,
                shared=None) -> Optional[Dict[str, Any]]:
        """Collective: resume_point(), then load_state() from it into the
        model, optimizer, state and extra (as load_state takes them), then
        release().  Returns the record, or None for a fresh run (nothing is
        loaded)."""
        from . import torch_state as _ts
        path = self.resume_point(shared)
        if path is None:
            return None
        exc, record = None, None
        try:
            record = _ts.load_state(path, model, optimizer, state=state, extra=extra,
                                    strict=strict)
        except Exception as e:  # noqa: BLE001 (voted below)
            exc = e
        self.release()
        self._agree(f"loading {path}", exc)
        return record

    # ---- flush ---------------------------------------------------------------------

    def flush(self, step: Optional[int] = None, shared=None) -> str:
        """Collective: copy local step ``step`` (default: the newest the
        nodes hold between them) into the shared tier (``shared``, default
        the tier's) as an ordinary checkpoint: rank 0's node gets the shards
        it lacks from the others (only copies that verify), and rank 0
        commits it with ckpt_local_flush (one atomic rename, LATEST).
        Returns the shared step directory on every rank; raises on every
        rank when it cannot (ExistsError when the shared tier has the step
        already)."""
        self._settle()
        shared = self.shared if shared is None else os.fspath(shared)
        if shared is None:
            raise ValueError("flush: no shared tier (give shared=, here or to LocalTier)")
        root = _ck.checkpoint_root(shared)
        reports = self._reports()
        if step is None:
            steps = sorted({s for rep in reports.values() for s in rep}, reverse=True)
            if not steps:
                raise error(EINCOMPLETE, "flush", detail="the nodes now running hold no "
                                                         "local checkpoint")
        else:
            steps = [_ck._step(step)]
        dest = {self.node_of[0]}
        whys = []
        for s in steps:
            ok, _path, how = self._assemble(s, dest, FLUSH_DIR, reports)
            if ok:
                break
            whys.append(f"local step {s}: {how}")
        else:
            raise error(EINCOMPLETE, "flush", detail="; ".join(whys))
        exc, out = None, None
        if self.rank == 0:
            buf = ctypes.create_string_buffer(_lib.PATH_MAX)
            roots = (ctypes.c_char_p * 1)(_ck._fs(os.path.join(self.root, FLUSH_DIR)))
            rc = _lib.load().ckpt_local_flush(roots, 1, s, _ck._fs(root), buf, len(buf))
            if rc != OK:
                exc = error(rc, "ckpt_local_flush")
            else:
                out = os.fsdecode(buf.value)
        try:
            got = self._agree(f"flushing local step {s}", exc, out)
        finally:
            self._remove_private(FLUSH_DIR)
        self._log(f"flushed local step {s} ({how}) into the shared tier: {got[0]}")
        return got[0]

    # ---- the end ----------------------------------------------------------------------

    def close(self) -> None:
        """Collective: wait() for the save in the background (raising its
        failure), then release() what a restore assembled."""
        self.wait()
        self._bufs.clear()
        self.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"<LocalTier {self.root!r} node {self.node} ({self.my_node + 1} of "
                f"{self.nnodes}) every {self.every} keep {self.keep}>")


__all__ = ["LocalTier", "LocalStep", "StepInfo", "node_name", "expand", "place",
           "RESTORE_DIR", "FLUSH_DIR"]
