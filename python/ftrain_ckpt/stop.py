"""stop.py - the stop path: handlers that only record a signal, and the
agreement of all ranks on one stop step (include/ftrain/ckpt_stop.h).

The contract slurm/train.sbatch expects of a program: on the stop signal
(USR1 by default, FTRAIN_STOP_SIGNAL under the batch script; TERM and INT
too) finish the current step, agree on the stop step, save a checkpoint
collectively, exit 75 (EXIT_REQUEUE) once it is committed; exit 0 when
training is finished; resume from the newest good checkpoint.

    ftrain_ckpt.hold_stop_signals()      # first thing: before torch loads
    import torch ...
    guard = ftrain_ckpt.StopGuard()      # handlers in place, held signals taken
    for step in range(first, last):
        train_one_step()
        if guard.check(step + 1) is not None:   # every rank, every step
            save(step + 1); ftrain_ckpt.exit_now(ftrain_ckpt.EXIT_REQUEUE)

The handlers are the C library's (sigaction, no SA_RESTART): they replace
Python's own for these signals, so Ctrl-C stops the run at the next agreed
step instead of raising KeyboardInterrupt.
"""
from __future__ import annotations

from typing import NoReturn, Optional, Union

import ctypes
import os
import signal as _signal

from . import _lib
from . import comm as _comm
from .comm import Comm
from .errors import error, check, OK

EXIT_DONE = 0
EXIT_REQUEUE = 75

STOP_SIGNALS = (_signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGTERM, _signal.SIGINT)


def hold_stop_signals() -> None:
    """Block the stop signals (USR1, USR2, TERM, INT) in this thread and the
    threads it starts from now on, so that one arriving while the program
    starts (importing torch takes seconds) waits instead of killing it
    (USR1's default action).  StopGuard() unblocks them once its handlers
    are in place, and a signal that came meanwhile is taken then."""
    _signal.pthread_sigmask(_signal.SIG_BLOCK, STOP_SIGNALS)


def parse_signal(sig: Union[int, str, None] = None) -> _signal.Signals:
    """The stop signal's number: sig (an int, "USR1", "SIGUSR2"...), else
    FTRAIN_STOP_SIGNAL from the environment, else USR1.  Only USR1 and USR2
    may be chosen (TERM and INT always stop)."""
    if sig is None:
        sig = os.environ.get("FTRAIN_STOP_SIGNAL") or "USR1"
    if isinstance(sig, str):
        name = sig.upper()
        name = name[3:] if name.startswith("SIG") else name
        table = {"USR1": _signal.SIGUSR1, "USR2": _signal.SIGUSR2}
        if name not in table:
            raise ValueError(f"stop signal must be USR1 or USR2, got '{sig}'")
        return table[name]
    sig = int(sig)
    if sig not in (_signal.SIGUSR1, _signal.SIGUSR2):
        raise ValueError(f"stop signal must be SIGUSR1 or SIGUSR2, got {sig}")
    return _signal.Signals(sig)


class StopGuard:
    """Install the library's stop handlers and agree on stop steps.

    ``signal``: the stop signal (see parse_signal; default
    FTRAIN_STOP_SIGNAL or USR1).  ``comm``: the collective of check()
    (default: torch.distributed when it runs with several ranks at the
    first check, else this process alone)."""

    def __init__(self, signal: Union[int, str, None] = None, comm: Optional[Comm] = None) -> None:
        lib = _lib.load()
        if not _lib.has_stop():
            raise _lib.LibraryNotFoundError(
                f"{_lib.path()} has no stop path (ckpt_stop_install...): it predates "
                f"include/ftrain/ckpt_stop.h; rebuild it")
        self.signal = _signal.Signals(parse_signal(signal))
        check(lib.ckpt_stop_install(int(self.signal)), "ckpt_stop_install")
        # Held signals (hold_stop_signals) reach the handlers now.
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, STOP_SIGNALS)
        self._comm = comm
        self.stop_step = None
        self.stop_signal = None

    @property
    def comm(self):
        if self._comm is None:
            self._comm = _comm.default_comm()
        return self._comm

    @property
    def requested(self) -> bool:
        """The first stop signal this process got (a signal.Signals), or
        None.  Local only: act on check(), which every rank agrees on."""
        sig = _lib.load().ckpt_stop_requested()
        return _signal.Signals(sig) if sig else None

    @property
    def requested_at(self) -> Optional[float]:
        """Wall-clock time (time.time() scale) of that signal, or None."""
        t = _lib.load().ckpt_stop_time()
        return t if t else None

    def check(self, step: int) -> Optional[int]:
        """Collective, every rank at every step: pass the step this rank
        would stop at now (the steps it has completed).  Returns the agreed
        stop step when any rank was signalled - the largest step passed, so
        a rank that is behind trains on to it - else None.  Afterwards
        stop_step and stop_signal (the first signal, a signal.Signals) say
        what was agreed.  Raises PeerError when the collective fails."""
        c = self.comm
        stop = ctypes.c_int64(-1)
        signo = ctypes.c_int(0)
        try:
            # ctypes would keep only the low 64 bits of a larger step.
            step, refused = _lib.integer("step", step, 0, _lib.INT64_MAX), None
        except (TypeError, ValueError) as e:
            # Still take part, as a rank with a bad step does in C (-1 is
            # refused there): the other ranks are in the collective.
            step, refused = -1, e
        rc = _lib.load().ckpt_stop_agree(c.coll(), step, ctypes.byref(stop),
                                         ctypes.byref(signo))
        cause = c.take_error()
        if refused is not None:
            raise refused
        if rc != OK:
            raise error(rc, "ckpt_stop_agree") from cause
        if stop.value < 0:
            return None
        self.stop_step = stop.value
        self.stop_signal = _signal.Signals(signo.value) if signo.value else None
        return self.stop_step


def exit_now(code: int = EXIT_REQUEUE) -> NoReturn:
    """Flush stdout and stderr and leave the process at once with ``code``
    (os._exit: no interpreter teardown).  For the exit after a stop's
    checkpoint is committed: a Python process with torch loaded can take a
    second or more to exit normally (its threads, destroy_process_group),
    and srun --kill-on-bad-exit, which slurm/train.sbatch uses, kills the
    ranks still exiting once the first has exited 75, so that the launch
    reads as a rank killed (status 137) instead of a planned stop.  Call it
    on every rank right after a barrier, so that they leave together."""
    import sys
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
