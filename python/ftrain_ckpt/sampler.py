"""sampler.py - ResumableSampler: a world-size-invariant, resumable sampler.

The run consumes one global sequence of samples, cut into global batches
of ``global_batch`` samples; nothing about it depends on the number of
ranks:

* epoch e's order is a permutation of range(length) that depends on
  (seed, e) only: ftrain's own rule (src/nn/sampler.c, src/nn/rng.h), a
  Fisher-Yates shuffle driven by SplitMix64 over rng_make(seed, e), so a
  Python run and ftrain with the same seed visit the samples in the same
  order;
* epoch e is cut into global batches of ``global_batch`` consecutive
  entries of that permutation, the last one short when ``global_batch``
  does not divide ``length`` (as ftrain does: ceil(length / global_batch)
  steps per epoch);
* rank r of W takes the r-th contiguous share of each global batch of n
  samples: entries [r*n//W, (r+1)*n//W) (a rank may get one sample fewer
  than another, or none when n < W);
* the state is one global cursor: the epoch and the number of its samples
  consumed (a multiple of ``global_batch``), moved by advance() after each
  training step.  state_dict()/load_state_dict() save and restore it (with
  save_state(..., state={"sampler": sampler})); a run stopped on N ranks
  resumes on M and consumes exactly the global sequence the uninterrupted
  run would have.

Iteration never moves the cursor: a DataLoader with workers (or any
prefetching) draws indices ahead of what was trained on, so the training
loop says what it consumed, with advance().
"""
from __future__ import annotations

import operator
from typing import Any, Dict, Iterator, List, Optional

import torch.utils.data

FORMAT = "ftrain-resumable-sampler"
VERSION = 1
_M64 = (1 << 64) - 1
_GAMMA = 0x9e3779b97f4a7c15


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & _M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & _M64
    return z ^ (z >> 31)


def _rng_key(seed: int, stream: int) -> int:
    """rng_make(seed, stream).key (src/nn/rng.h)."""
    return _mix64((seed & _M64) ^ _mix64((stream + _GAMMA) & _M64))


def permutation(length: int, seed: int, epoch: int) -> List[int]:
    """Epoch ``epoch``'s order of range(length): ftrain's sampler_set_epoch()
    (src/nn/sampler.c) exactly."""
    key = _rng_key(seed, epoch)
    perm = list(range(length))
    if length < 2:
        return perm
    # One draw per i, from length-1 down to 1, at counters 1, 2, ...: the
    # swap partner is draw % (i + 1).  A draw at or above
    # UINT64_MAX - UINT64_MAX % (i + 1) is rejected and redrawn (rng_below),
    # which shifts the counters after it; the chance is (i + 1) / 2**64, so
    # the partners are computed all at once and the rare rejection falls
    # back to drawing one by one from there.
    ks = _partners(key, length)
    if ks is None:
        ks = []
        counter = 0
        for i in range(length - 1, 0, -1):
            n = i + 1
            lim = _M64 - _M64 % n
            while True:
                counter += 1
                x = _mix64((key + counter * _GAMMA) & _M64)
                if x < lim:
                    break
            ks.append(x % n)
    for i, k in zip(range(length - 1, 0, -1), ks):
        perm[i], perm[k] = perm[k], perm[i]
    return perm


def _partners(key: int, length: int) -> Optional[List[int]]:
    """The swap partners for i = length-1 .. 1 when no draw is rejected
    (numpy, vectorised), else None (and None without numpy)."""
    try:
        import numpy as np
    except ImportError:
        return None
    draws = _draws_np(np, key, length - 1)
    n = np.arange(length, 1, -1, dtype=np.uint64)
    m = np.uint64(_M64)
    if bool(np.any(draws >= m - m % n)):
        return None
    return (draws % n).tolist()


def _draws_np(np: Any, key: int, count: int) -> Any:
    with np.errstate(over="ignore"):
        c = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(key) + c * np.uint64(_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        return z ^ (z >> np.uint64(31))


def _positive(what: str, value: Any, lo: int = 1) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"ResumableSampler: {what} must be an integer, got "
                        f"{type(value).__name__} {value!r}") from None
    if n < lo:
        raise ValueError(f"ResumableSampler: {what} {n} must be {lo} or more")
    return n


class ResumableSampler(torch.utils.data.Sampler):
    """Indices of a map-style dataset for rank ``rank`` of ``world_size``:
    this rank's share of each remaining global batch of the current epoch
    (the module's docstring has the rule).

    ``data``: the dataset (its len()) or its length.  ``global_batch``:
    samples per training step over all ranks.  ``seed``: the permutations'
    seed (0..2**64-1).  ``rank``/``world_size``: default torch.distributed's
    when it is initialized, else 0 of 1.

    Use it as ``DataLoader(ds, batch_sampler=sampler.batch_sampler())``
    (any num_workers): each batch is this rank's share of one global batch.
    After each training step call ``sampler.advance()``; at the end of an
    epoch it moves to the next one, and a new iteration starts there.
    Iterating it directly yields this rank's indices one by one
    (``DataLoader(ds, sampler=sampler, batch_size=global_batch // W)`` gives
    the same batches when W divides global_batch and the length).
    """

    def __init__(self, data: Any, global_batch: int, *, seed: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None) -> None:
        length = data if isinstance(data, int) else len(data)
        self.length = _positive("the dataset length", length)
        self.global_batch = _positive("global_batch", global_batch)
        if self.global_batch > self.length:
            raise ValueError(f"ResumableSampler: global_batch {self.global_batch} is larger "
                             f"than the dataset ({self.length} samples)")
        self.seed = _positive("seed", seed, 0)
        if self.seed > _M64:
            raise ValueError(f"ResumableSampler: seed {self.seed} is out of range: it must "
                             f"be 0..{_M64}")
        if rank is None or world_size is None:
            r, w = 0, 1
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                r, w = dist.get_rank(), dist.get_world_size()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.world_size = _positive("world_size", world_size)
        self.rank = _positive("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"ResumableSampler: rank {self.rank} is not below world_size "
                             f"{self.world_size}")
        self.epoch = 0
        self.cursor = 0  # samples of this epoch consumed, over all ranks
        self._perm_epoch = None
        self._perm: List[int] = []

    # ---- the global sequence -------------------------------------------------
    @property
    def batches_per_epoch(self) -> int:
        """Global batches (training steps) per epoch: ceil(length / global_batch)."""
        return -(-self.length // self.global_batch)

    def _permutation(self) -> List[int]:
        if self._perm_epoch != self.epoch:
            self._perm = permutation(self.length, self.seed, self.epoch)
            self._perm_epoch = self.epoch
        return self._perm

    def global_batch_at(self, cursor: Optional[int] = None) -> List[int]:
        """The whole global batch that starts at ``cursor`` (default: the
        next one) in the current epoch."""
        cursor = self.cursor if cursor is None else cursor
        perm = self._permutation()
        return perm[cursor:cursor + self.global_batch]

    def share(self, batch: List[int]) -> List[int]:
        """This rank's contiguous share of a global batch."""
        n, r, w = len(batch), self.rank, self.world_size
        return batch[r * n // w:(r + 1) * n // w]

    # ---- iteration ------------------------------------------------------------
    def iter_batches(self) -> Iterator[List[int]]:
        """This rank's share of each global batch from the cursor to the
        end of the epoch (the cursor does not move)."""
        perm = self._permutation()
        for start in range(self.cursor, self.length, self.global_batch):
            yield self.share(perm[start:start + self.global_batch])

    def __iter__(self) -> Iterator[int]:
        for b in self.iter_batches():
            yield from b

    def __len__(self) -> int:
        """This rank's indices left in the current epoch."""
        n = 0
        for start in range(self.cursor, self.length, self.global_batch):
            size = min(self.global_batch, self.length - start)
            n += (self.rank + 1) * size // self.world_size - self.rank * size // self.world_size
        return n

    def batch_sampler(self) -> "_BatchView":
        """A batch sampler over the same state, for DataLoader(batch_sampler=...)."""
        return _BatchView(self)

    # ---- the cursor -----------------------------------------------------------
    def advance(self, batches: int = 1) -> None:
        """``batches`` global batches were trained on: move the cursor past
        them, into the next epoch at the end of this one."""
        for _ in range(_positive("batches", batches, 0)):
            self.cursor += self.global_batch
            if self.cursor >= self.length:
                self.epoch += 1
                self.cursor = 0

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its beginning (DistributedSampler's
        call; a resumed run needs none: the state holds the epoch)."""
        epoch = _positive("epoch", epoch, 0)
        if epoch != self.epoch:
            self.epoch, self.cursor = epoch, 0

    @property
    def steps_done(self) -> int:
        """Global batches consumed since epoch 0 began."""
        return self.epoch * self.batches_per_epoch + self.cursor // self.global_batch

    # ---- state ----------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """The global cursor and what it is valid for (JSON data; the same
        on every rank)."""
        return {"format": FORMAT, "version": VERSION, "length": self.length,
                "global_batch": self.global_batch, "seed": self.seed,
                "epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore a state_dict(), from a run on any number of ranks.  A
        state for another dataset length, global batch or seed is refused
        (ValueError naming each, with both values), and the sampler is left
        as it was."""
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"ResumableSampler: not a sampler state (format "
                             f"{state.get('format') if isinstance(state, dict) else state!r}, "
                             f"expected {FORMAT})")
        if state.get("version") != VERSION:
            raise ValueError(f"ResumableSampler: state version {state.get('version')}, this "
                             f"sampler reads {VERSION}")
        diff = []
        for key, what in (("length", "the dataset length"), ("global_batch", "global_batch"),
                          ("seed", "seed")):
            if state.get(key) != getattr(self, key):
                diff.append(f"{what} is {getattr(self, key)} now, {state.get(key)} in the "
                            f"saved state")
        if diff:
            raise ValueError("ResumableSampler: the saved position is for another sequence: " +
                             "; ".join(diff) + " (resume with the saved values, or start a "
                             "new run)")
        epoch, cursor = state.get("epoch"), state.get("cursor")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0 or \
                not isinstance(cursor, int) or isinstance(cursor, bool) or \
                cursor < 0 or cursor >= self.length or cursor % self.global_batch:
            raise ValueError(f"ResumableSampler: saved epoch {epoch!r} / cursor {cursor!r} is "
                             f"not a position of {self.length} samples in global batches of "
                             f"{self.global_batch}")
        self.epoch, self.cursor = epoch, cursor

    def __repr__(self) -> str:
        return (f"ResumableSampler(length={self.length}, global_batch={self.global_batch}, "
                f"seed={self.seed}, rank={self.rank}, world_size={self.world_size}, "
                f"epoch={self.epoch}, cursor={self.cursor})")


class _BatchView(torch.utils.data.Sampler):
    """ResumableSampler's batches: this rank's share of each global batch."""

    def __init__(self, sampler: ResumableSampler) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[List[int]]:
        return self.sampler.iter_batches()

    def __len__(self) -> int:
        s = self.sampler
        return len(range(s.cursor, s.length, s.global_batch))


__all__ = ["ResumableSampler", "permutation"]
