"""watchdog.py - hang detection for a PyTorch program, as ftrain's C
watchdog does it (src/fault/watchdog.c): heartbeats in ftrain's format, the
same limit, the same diagnosis from the peers' heartbeats, the same
failure record, exit 76.

    wd = ftrain_ckpt.Watchdog(run_dir)         # every rank, after init_process_group
    for step in range(first, last):
        with wd.step(step):                    # "compute" of step ... "update"
            loss = model(batch).backward()
            wd.phase(step, "reduce")           # optional: finer marks
            ...
        if step % every == 0:
            wd.phase(step, "save"); save(...)
    wd.close()                                 # a clean end: removes the heartbeat

A thread of its own (a daemon) writes this rank's heartbeat,
RUN_DIR/heartbeat/rank-<R>, every beat period (docs/heartbeat-format.md:
the line ftrain writes, renamed over the old one), and compares the time
since the last mark with the allowance of the phase the program is in
(allowance(): --hang-timeout's rule).  Past it, it reads every rank's
heartbeat twice, LOOKS beat periods apart, names the rank whose heartbeat
stopped changing (kind "peer_lost" when that rank ran on this host and its
pid is gone, else "hang") or, when every peer is alive, the rank(s)
furthest behind; prints the report on stderr, writes the failure record
RUN_DIR/failures/j<job>-r<restart>-l<launch>-rank<R>.json
(docs/failure-records.md; waiting at most 5 s for it) and ends the process
with os._exit(76) (FTRAIN_EXIT_HANG), which no stuck collective can hold
up.  on_hang= replaces that last step (tests).

Nothing here touches a signal handler; the thread never raises into the
program (a failure of its own is said once on stderr); no wait is
unbounded.  A hang in code that holds the GIL cannot be seen by any Python
thread: torch's collectives and waits release it.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import contextlib
import hashlib
import json
import math
import os
import struct
import sys
import threading
import time

from .comm import UNKNOWN_NODE, lookup_node_name

# The exit status of a hang (include/ftrain/exit_codes.h).
EXIT_HANG = 76

# The phases in the order a step goes through them (watchdog_phase_t); the
# numbers are written into heartbeats, the names into failure records.
PHASES = ("start", "load", "load_sync", "compute", "control", "reduce", "update", "eval",
          "save", "save_sync", "finish")
_START, _LOAD, _LOAD_SYNC, _COMPUTE, _CONTROL, _REDUCE, _UPDATE, _EVAL, _SAVE, _SAVE_SYNC, \
    _FINISH = range(len(PHASES))
_TEXT = ("start-up", "checkpoint load", "wait for the other ranks' checkpoint load",
         "computation", "control reduction", "gradient allreduce", "update",
         "evaluation after", "checkpoint save", "checkpoint commit", "end")

# The limit's rule (src/fault/watchdog.h: WATCHDOG_*).
MULTIPLE = 10.0
FLOOR_S = 45.0
START_S = 600.0
FIRST_S = 300.0
FINISH_S = 60.0
BEATS_PER_LIMIT = 30.0
BEAT_MIN_S = 0.5
BEAT_MAX_S = 5.0
LOOKS = 3
STOP_FLOOR_S = 5.0
# How often the thread looks; a look this much later than due means the
# process was not running (SIGSTOP, `scontrol suspend`): no rank's fault.
TICK_S = 0.1
STALL_S = 2.0
# The most the verdict waits for its failure record, and for stderr.
RECORD_WAIT_S = 5.0
# Heartbeats failing this many times in a row are said (once) to be off.
BEAT_FAILS_TO_WARN = 5

HEARTBEAT_MAGIC = "ftrain-heartbeat 2"
HEARTBEAT_DIR = "heartbeat"
FAILURE_DIR = "failures"
FAILURE_FORMAT = "ftrain-failure"
FAILURE_VERSION = 1
_HOST_MAX = 64
_MESSAGE_MAX = 2048
_COUNTER_MAX = 1000000000
_RANK_MAX = 16777216
_STEP_MAX = 2**63 - 1


# ---- pure rules (the C functions of the same names) ------------------------------

def phase_number(phase: Union[int, str]) -> int:
    """The number of a phase given by name ("compute", "reduce" ...: the
    names of failure records) or number (0-10).  ValueError otherwise."""
    if isinstance(phase, str):
        try:
            return PHASES.index(phase)
        except ValueError:
            raise ValueError(f"unknown watchdog phase '{phase}' (one of: "
                             f"{', '.join(PHASES)})") from None
    if isinstance(phase, bool) or not isinstance(phase, int) or not 0 <= phase < len(PHASES):
        raise ValueError(f"watchdog phase must be a name ({', '.join(PHASES)}) or 0 to "
                         f"{len(PHASES) - 1}, got {phase!r}")
    return phase


def phase_text(phase: Union[int, str], step: int) -> str:
    """'the gradient allreduce of step 12' and the like (watchdog_phase_text)."""
    p = PHASES.index(phase) if isinstance(phase, str) and phase in PHASES else phase
    if not isinstance(p, int) or not 0 <= p < len(PHASES):
        return f"an unknown phase {phase} of step {step}"
    if p <= _LOAD_SYNC or p == _FINISH:
        return f"the {_TEXT[p]}"
    if p == _EVAL:
        return f"the {_TEXT[p]} step {step}"
    return f"the {_TEXT[p]} of step {step}"


def _seen(seen: Optional[Dict[str, float]]) -> Tuple[float, float, float]:
    seen = seen or {}
    return (seen.get("step", -1.0), seen.get("eval", -1.0), seen.get("save", -1.0))


def allowance(phase: Union[int, str], timeout: Optional[float] = None,
              seen: Optional[Dict[str, float]] = None) -> float:
    """Seconds phase may go without progress (watchdog_allowance): a given
    timeout (> 0), else MULTIPLE x the longest step phase, evaluation or
    save seen so far (seen: {"step", "eval", "save"} seconds, -1 or absent:
    none yet), at least FLOOR_S; start-up and a load get at least START_S
    (a load: with the derived limit only), a first evaluation or save
    FIRST_S, the end FINISH_S."""
    p = phase_number(phase)
    step_s, eval_s, save_s = _seen(seen)
    fixed = timeout is not None and timeout > 0
    limit = timeout if fixed else max(FLOOR_S, MULTIPLE * max(step_s, eval_s, save_s))
    if p == _START:
        return max(limit, START_S)
    if p in (_LOAD, _LOAD_SYNC):
        return limit if fixed else max(limit, START_S)
    if p == _EVAL:
        return max(limit, FIRST_S if eval_s < 0 else MULTIPLE * eval_s)
    if p in (_SAVE, _SAVE_SYNC):
        return max(limit, FIRST_S if save_s < 0 else MULTIPLE * save_s)
    if p == _FINISH:
        return max(limit, FINISH_S)
    return limit


def stop_allowance(phase: Union[int, str], timeout: Optional[float] = None,
                   seen: Optional[Dict[str, float]] = None) -> float:
    """The allowance once a stop signal came (watchdog_stop_allowance): in
    the control reduction and the gradient allreduce, once a step was
    measured, min(allowance, max(STOP_FLOOR_S, MULTIPLE x the longest
    step)); otherwise allowance."""
    p = phase_number(phase)
    limit = allowance(p, timeout, seen)
    step_s = _seen(seen)[0]
    if p not in (_CONTROL, _REDUCE) or step_s < 0:
        return limit
    return min(limit, max(STOP_FLOOR_S, MULTIPLE * step_s))


def beat_period(timeout: Optional[float] = None) -> float:
    """Seconds between heartbeats (watchdog_beat_period): the limit /
    BEATS_PER_LIMIT within [BEAT_MIN_S, BEAT_MAX_S]; FLOOR_S stands for the
    derived limit."""
    limit = timeout if timeout is not None and timeout > 0 else FLOOR_S
    return min(BEAT_MAX_S, max(BEAT_MIN_S, limit / BEATS_PER_LIMIT))


def heartbeat_line(token: int, rank: int, pid: int, seq: int, phase: int, step: int,
                   idle: float, host: str) -> str:
    """One heartbeat line, as src/fault/watchdog.c's write_beat prints it."""
    return (f"{HEARTBEAT_MAGIC} token {token & 0xFFFFFFFFFFFFFFFF:016x} rank {rank} pid {pid} "
            f"seq {seq} phase {phase} step {step} idle {idle:.3f} host {host}\n")


def parse_heartbeat(line: str) -> Optional[Dict[str, Any]]:
    """A heartbeat line's fields (token, rank, pid, seq, phase, step, idle,
    host), or None when it is not one (watchdog.c's parse_beat: the fields
    in their order, each after its word)."""
    words = line.split()
    keys = ("token", "rank", "pid", "seq", "phase", "step", "idle", "host")
    if len(words) < 2 + 2 * len(keys) or " ".join(words[:2]) != HEARTBEAT_MAGIC:
        return None
    out: Dict[str, Any] = {}
    try:
        for i, key in enumerate(keys):
            if words[2 + 2 * i] != key:
                return None
            v = words[3 + 2 * i]
            out[key] = (int(v, 16) if key == "token" else float(v) if key == "idle"
                        else v[:_HOST_MAX - 1] if key == "host" else int(v, 10))
    except ValueError:
        return None
    return out


# ---- who and where ----------------------------------------------------------------

def _host_ok(s: str, empty_ok: bool) -> bool:
    """failure.c's host_ok: printable ASCII, no blank or comma, < 64 bytes."""
    if not s:
        return empty_ok
    return len(s) < _HOST_MAX and all(" " < c <= "~" and c != "," for c in s)


def host_name() -> str:
    """This rank's host as ftrain names it (world.c): comm.lookup_node_name()
    (SLURMD_NODENAME, else the host name, else "unknown"), cut to what a
    record holds; "unknown" when it is not one a record holds."""
    host = lookup_node_name()[:_HOST_MAX - 1]
    return host if _host_ok(host, False) else UNKNOWN_NODE


def _env_counter(name: str) -> int:
    v = os.environ.get(name, "")
    if not v or len(v) > 10 or not all("0" <= c <= "9" for c in v):
        return 0
    n = int(v)
    return n if n <= _COUNTER_MAX else 0


def launch_from_env() -> Dict[str, Any]:
    """The launch's identity as failure_launch_from_env reads it:
    {"job": SLURM_JOB_ID (1 to 63 of [A-Za-z0-9_], else ""), "restart":
    SLURM_RESTART_COUNT, "id": FTRAIN_LAUNCH_ID} (counters 0 when unset or
    not a decimal number up to 10^9)."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if not (0 < len(job) < 64 and all(c.isascii() and (c.isalnum() or c == "_") for c in job)):
        job = ""
    return {"job": job, "restart": _env_counter("SLURM_RESTART_COUNT"),
            "id": _env_counter("FTRAIN_LAUNCH_ID")}


def failure_file_name(launch: Dict[str, Any], rank: int) -> str:
    """j<job>-r<restart>-l<launch>-rank<rank>.json (failure_file_name)."""
    return f"j{launch['job']}-r{launch['restart']}-l{launch['id']}-rank{rank}.json"


def _env_token() -> int:
    """A token from the launch's environment, the same on every rank of a
    launch (for ranks that cannot gather rank 0's): its hash."""
    names = ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "FTRAIN_LAUNCH_ID", "TORCHELASTIC_RUN_ID",
             "TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT")
    text = "\n".join(f"{n}={os.environ.get(n, '')}" for n in names)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _token_of(started_ns: int, pid: int) -> int:
    """ftrain's token (main.c): rank 0's start time in ns ^ its pid << 40."""
    return (started_ns ^ (pid << 40)) & 0xFFFFFFFFFFFFFFFF


# ---- files --------------------------------------------------------------------------

def _cut_utf8(text: str, cap: int) -> str:
    """text cut to at most cap - 1 bytes of UTF-8, never inside a character."""
    raw = text.encode("utf-8", "replace")
    if len(raw) < cap:
        return raw.decode("utf-8", "replace")
    return raw[:cap - 1].decode("utf-8", "ignore")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_record(run_dir: str, rec: Dict[str, Any]) -> str:
    """Write rec into run_dir/failures as failure.c's failure_write does:
    '.<name>.tmp', fsync, rename (the commit point), fsync of the folder
    (and of run_dir when the folder is new).  @return the path."""
    folder = os.path.join(run_dir, FAILURE_DIR)
    name = failure_file_name(rec["launch"], rec["rank"])
    tmp, path = os.path.join(folder, f".{name}.tmp"), os.path.join(folder, name)
    text = json.dumps(rec, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    fresh = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    if fresh:
        _fsync_dir(run_dir)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            data = text.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)
    return path


def _say(text: str) -> None:
    """Write text to fd 2 directly: no Python lock the stuck thread may hold."""
    data = text.encode("utf-8", "replace")
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(2, data):]


def _end_process(report: str, record: Optional[Dict[str, Any]]) -> None:
    """The default verdict: the report on stderr, then os._exit(76).  A
    stderr that blocks (a full pipe) cannot keep the process: a timer ends
    it RECORD_WAIT_S later all the same."""
    last = threading.Thread(target=lambda: (time.sleep(RECORD_WAIT_S), os._exit(EXIT_HANG)),
                            name="ftrain-watchdog-end", daemon=True)
    last.start()
    _say(f"{report}ftrain: hang: ending the job with exit code {EXIT_HANG}; the newest "
         f"committed checkpoint is kept\n")
    os._exit(EXIT_HANG)


# ---- the watchdog -------------------------------------------------------------------

class _Beat:
    __slots__ = ("valid", "pid", "seq", "phase", "step", "host")

    def __init__(self, fields: Optional[Dict[str, Any]] = None) -> None:
        self.valid = fields is not None
        f = fields or {}
        self.pid, self.seq = f.get("pid", 0), f.get("seq", 0)
        self.phase, self.step, self.host = f.get("phase", 0), f.get("step", 0), f.get("host", "")


class Watchdog:
    """Heartbeats and hang detection for this rank (see the module's doc).

    ``run_dir``: the run directory (as ftrain's --run-dir; made when
    missing): heartbeats go to run_dir/heartbeat/, a hang's record to
    run_dir/failures/.  None: no heartbeats and no record (the report
    cannot name the rank that stopped).
    ``timeout``: seconds without progress that make a hang (> 0), or None
    for ftrain's derived limit (allowance()).
    ``rank``, ``world_size``: default torch.distributed's when it is
    initialised, else 0 and 1.
    ``token``: the launch's heartbeat token (the same on every rank, a new
    one for each launch).  By default, as ftrain: rank 0's start time ^ its
    pid << 40, gathered with every rank's pid and host over torch.distributed
    when it is initialised (so the constructor is then collective: every
    rank makes its Watchdog; with NCCL, after torch.cuda.set_device); else,
    for one process, this one's; else a hash of the launch's environment
    (SLURM_JOB_ID, SLURM_RESTART_COUNT, FTRAIN_LAUNCH_ID,
    TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, MASTER_ADDR,
    MASTER_PORT).
    ``on_hang(report, record)``: called on the watchdog's thread instead of
    ending the process (record: the failure record written, a dict, or
    None); the thread ends after it.
    ``stop_requested``: a callable, true once a stop signal came, or a
    StopGuard: the allowance in "control" and "reduce" is then
    stop_allowance().

    Raises ValueError for a bad argument and OSError naming the folder when
    run_dir/heartbeat cannot be made or written.
    """

    def __init__(self, run_dir: Union[str, "os.PathLike[str]", None], timeout: Optional[float] = None, *,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 token: Optional[int] = None,
                 on_hang: Optional[Callable[[str, Optional[Dict[str, Any]]], None]] = None,
                 stop_requested: Any = None) -> None:
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                    or not math.isfinite(timeout) or timeout <= 0:
                raise ValueError(f"Watchdog: timeout must be a number of seconds > 0, or None "
                                 f"for ftrain's derived limit; got {timeout!r}")
            timeout = float(timeout)
        if on_hang is not None and not callable(on_hang):
            raise ValueError("Watchdog: on_hang must be callable(report, record)")
        if stop_requested is not None and not callable(stop_requested):
            if not hasattr(stop_requested, "requested"):
                raise ValueError("Watchdog: stop_requested must be a callable or a StopGuard")
            guard = stop_requested
            stop_requested = lambda: guard.requested is not None  # noqa: E731
        dist = self._dist()
        d_rank, d_size = (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)
        rank = d_rank if rank is None else rank
        world_size = d_size if world_size is None else world_size
        for name, v, lo in (("rank", rank, 0), ("world_size", world_size, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= _RANK_MAX:
                raise ValueError(f"Watchdog: {name} must be an integer from {lo} to "
                                 f"{_RANK_MAX}, got {v!r}")
        if rank >= world_size:
            raise ValueError(f"Watchdog: rank {rank} is not below world_size {world_size}")
        if token is not None and (isinstance(token, bool) or not isinstance(token, int)
                                  or not 0 <= token < 2**64):
            raise ValueError(f"Watchdog: token must be an integer from 0 to 2^64 - 1, got {token!r}")

        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        self.host, self.pid = host_name(), os.getpid()
        self.launch = launch_from_env()
        self.beat_s = beat_period(timeout)
        self.look_s = LOOKS * self.beat_s
        self._on_hang, self._stop_requested = on_hang, stop_requested
        started_ns = time.time_ns()
        # peers[r]: (pid, host) where known; this rank's always.
        self._peers: List[Optional[Tuple[int, str]]] = [None] * world_size
        self._peers[rank] = (self.pid, self.host)
        if dist is not None and world_size > 1 and (rank, world_size) == (d_rank, d_size):
            cards = self._gather(dist, started_ns)
            self._peers = [(pid, host) for pid, _, host in cards]
            self._peers[rank] = (self.pid, self.host)
            gathered = _token_of(cards[0][1], cards[0][0])
        elif world_size == 1:
            gathered = _token_of(started_ns, self.pid)
        else:
            gathered = _env_token()
        self.token = gathered if token is None else token

        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self.heartbeat_dir = None if self.run_dir is None else \
            os.path.join(self.run_dir, HEARTBEAT_DIR)
        self.heartbeat_path = None if self.heartbeat_dir is None else \
            os.path.join(self.heartbeat_dir, f"rank-{rank}")

        self._lock = threading.Lock()
        now = time.monotonic()
        self._phase, self._step = _START, 0
        self._since = self._group_since = now
        self._seen = {"step": -1.0, "eval": -1.0, "save": -1.0}
        self._beats = 0
        self._fails = 0
        self._warned = False
        self._closed = False
        self._stop = threading.Event()
        self._verdict = threading.Event()   # a hang was declared: the diagnosis runs
        self._verdict_done = threading.Event()
        self.record: Optional[Dict[str, Any]] = None
        self.report: Optional[str] = None

        # An earlier launch's heartbeats (as ftrain's rank 0 reads them at
        # its start): what they say, then they go.
        self.leftovers: Optional[Dict[str, Any]] = None
        if self.heartbeat_dir is not None and rank == 0:
            self.leftovers = self._take_leftovers()
        if self.heartbeat_dir is not None:
            try:
                os.makedirs(self.heartbeat_dir, exist_ok=True)
                self._write_beat(_START, 0, 0.0, strict=True)
            except OSError as e:
                raise OSError(e.errno, f"Watchdog: cannot write heartbeats in "
                              f"'{self.heartbeat_dir}': {e.strerror or e}") from e
        self._thread = threading.Thread(target=self._run, name="ftrain-watchdog", daemon=True)
        self._thread.start()

    def _take_leftovers(self) -> Optional[Dict[str, Any]]:
        """Read, then remove, the heartbeats of another launch (another
        token) in the folder, as watchdog_leftovers does: None when there
        are none, else {"ranks", "step_done" (the furthest step a rank had
        finished), "first_silent", "last_silent" (the earliest and latest
        last heartbeat, wall clock: when the first rank stopped, and about
        when that launch ended), "first_rank", "first_pid", "first_host"
        (the rank that went silent first)}."""
        try:
            names = os.listdir(self.heartbeat_dir)
        except OSError:
            return None
        out: Optional[Dict[str, Any]] = None
        for name in sorted(names):
            if not name.startswith("rank-") or ".new" in name:
                continue
            path = os.path.join(self.heartbeat_dir, name)
            try:
                with open(path, "r", encoding="ascii", errors="replace") as f:
                    fields = parse_heartbeat(f.readline(511))
                when = os.stat(path).st_mtime
            except OSError:
                continue
            if fields is not None and fields["token"] == self.token:
                continue  # this launch's own
            with contextlib.suppress(OSError):
                os.unlink(path)
            if fields is None:
                continue
            p, st = fields["phase"], fields["step"]
            done = st - 1 if _COMPUTE <= p <= _REDUCE else st
            if out is None:
                out = {"ranks": 0, "step_done": done, "first_silent": when, "last_silent": when,
                       "first_rank": fields["rank"], "first_pid": fields["pid"],
                       "first_host": fields["host"]}
            out["ranks"] += 1
            out["step_done"] = max(out["step_done"], done)
            if when < out["first_silent"]:
                out.update(first_silent=when, first_rank=fields["rank"], first_pid=fields["pid"],
                           first_host=fields["host"])
            out["last_silent"] = max(out["last_silent"], when)
        return out

    # ---- torch.distributed -----------------------------------------------------

    @staticmethod
    def _dist() -> Any:
        """torch.distributed when torch is imported and it is initialised
        (this never imports torch)."""
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
        return None

    def _gather(self, dist: Any, started_ns: int) -> List[Tuple[int, int, str]]:
        """Every rank's (pid, start ns, host), over the default group."""
        import torch
        fmt = f"<qQ{_HOST_MAX}s"
        size = struct.calcsize(fmt)
        mine = struct.pack(fmt, self.pid, started_ns, self.host.encode()[:_HOST_MAX - 1])
        backend = str(dist.get_backend()).lower()
        device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
                  else torch.device("cpu"))
        send = torch.frombuffer(bytearray(mine), dtype=torch.uint8).to(device)
        outs = [torch.empty(size, dtype=torch.uint8, device=device) for _ in range(self.world_size)]
        try:
            dist.all_gather(outs, send)
        except Exception as e:
            raise RuntimeError(f"Watchdog: gathering the ranks' pids and hosts over "
                               f"torch.distributed failed: {e}") from e
        cards = []
        for t in outs:
            pid, ns, host = struct.unpack(fmt, bytes(t.cpu().numpy().tobytes()))
            host = host.split(b"\0", 1)[0].decode("ascii", "replace")
            cards.append((pid, ns, host if _host_ok(host, False) else UNKNOWN_NODE))
        return cards

    # ---- marks (the training thread) -------------------------------------------

    def phase(self, step: int, phase: Union[str, int]) -> None:
        """This rank enters phase ("compute", "reduce", "save" ...: PHASES)
        of step: progress.  Cheap (a lock and a clock read).  A no-op once
        closed."""
        if isinstance(step, str) and not isinstance(phase, str):
            raise TypeError("Watchdog.phase(step, phase): the step comes first")
        p = phase_number(phase)
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= _STEP_MAX:
            raise ValueError(f"Watchdog.phase: step must be an integer >= 0, got {step!r}")
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return
            # A load or save is measured whole: its wait for the others continues it.
            continues = (p == _SAVE_SYNC and self._phase == _SAVE) or \
                        (p == _LOAD_SYNC and self._phase == _LOAD)
            if not continues:
                took = now - self._group_since
                key = ("eval" if self._phase == _EVAL
                       else "save" if self._phase in (_SAVE, _SAVE_SYNC)
                       else "step" if _COMPUTE <= self._phase <= _UPDATE else None)
                if key is not None and took > self._seen[key]:
                    self._seen[key] = took
                self._group_since = now
            self._phase, self._step, self._since = p, step, now

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator["Watchdog"]:
        """Mark step's "compute" on entry and its "update" (the step is done)
        on a normal exit, unless a mark inside went past the step's
        reductions.  An exception while the watchdog is already declaring a
        hang (a collective that failed because a peer stopped) waits for
        the verdict first (bounded)."""
        self.phase(step, _COMPUTE)
        try:
            yield self
        except BaseException:
            self._await_verdict()
            raise
        with self._lock:
            inside = self._step == step and _COMPUTE <= self._phase <= _REDUCE
        if inside:
            self.phase(step, _UPDATE)

    def where(self) -> Tuple[str, int]:
        """(phase name, step) of the last mark."""
        with self._lock:
            return PHASES[self._phase], self._step

    @property
    def seen(self) -> Dict[str, float]:
        """The longest step, evaluation and save so far (-1: none yet)."""
        with self._lock:
            return dict(self._seen)

    @property
    def hang_declared(self) -> bool:
        """True once the watchdog declared a hang."""
        return self._verdict.is_set()

    def close(self, clean: bool = True) -> None:
        """Stop the thread (waiting a bounded time) and, when clean, remove
        this rank's heartbeat (and the folder, when it is the last): files
        left over say the run ended unplanned.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        inside = threading.current_thread() is self._thread  # from on_hang
        if not inside:
            self._await_verdict()
            self._thread.join(timeout=2.0 + TICK_S)
        if clean and self.heartbeat_path is not None and (inside or not self._thread.is_alive()):
            with contextlib.suppress(OSError):
                os.unlink(self.heartbeat_path)
            with contextlib.suppress(OSError):
                os.rmdir(self.heartbeat_dir)

    def __enter__(self) -> "Watchdog":
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is not None:
            self._await_verdict()
        self.close(clean=kind is None)

    def _await_verdict(self) -> None:
        if self._verdict.is_set() and threading.current_thread() is not self._thread:
            self._verdict_done.wait(self.look_s + 2 * RECORD_WAIT_S + 1.0)

    # ---- heartbeats ---------------------------------------------------------------

    def _write_beat(self, phase: int, step: int, idle: float, strict: bool = False) -> None:
        """This rank's heartbeat: rank-R.new renamed over rank-R.  Failures
        are counted and said once (strict: raised, for the constructor)."""
        self._beats += 1
        line = heartbeat_line(self.token, self.rank, self.pid, self._beats, phase, step, idle,
                              self.host)
        tmp = self.heartbeat_path + ".new"
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                # Another rank may make the folder first: as good.
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.heartbeat_dir, 0o755)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                data = line.encode()
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
            os.rename(tmp, self.heartbeat_path)
            self._fails = 0
        except OSError as e:
            if strict:
                raise
            self._fails += 1
            if self._fails >= BEAT_FAILS_TO_WARN and not self._warned:
                self._warned = True
                _say(f"ftrain: warning: rank {self.rank}: cannot write heartbeats in "
                     f"'{self.heartbeat_dir}' ({e.strerror or e}): a relaunch after a failure "
                     f"cannot name the rank that went silent first\n")

    def _read_beat(self, rank: int) -> _Beat:
        try:
            with open(os.path.join(self.heartbeat_dir, f"rank-{rank}"), "r",
                      encoding="ascii", errors="replace") as f:
                line = f.readline(511)
        except OSError:
            return _Beat()
        fields = parse_heartbeat(line)
        if fields is None or fields["token"] != self.token or fields["rank"] != rank:
            return _Beat()  # not this launch's
        return _Beat(fields)

    # ---- the thread ---------------------------------------------------------------

    def _run(self) -> None:
        last_beat, last_look = -math.inf, time.monotonic()
        while not self._stop.wait(TICK_S):
            try:
                now = time.monotonic()
                stopping = False
                if self._stop_requested is not None:
                    try:
                        stopping = bool(self._stop_requested())
                    except Exception:
                        stopping = False
                with self._lock:
                    if now - last_look > TICK_S + STALL_S:  # suspended: a fresh allowance
                        self._since += now - last_look - TICK_S
                        self._group_since += now - last_look - TICK_S
                    last_look = now
                    phase, step, idle = self._phase, self._step, now - self._since
                    full = allowance(phase, self.timeout, self._seen)
                    limit = stop_allowance(phase, self.timeout, self._seen) if stopping else full
                if self.heartbeat_path is not None and now - last_beat >= self.beat_s:
                    self._write_beat(phase, step, idle)
                    last_beat = now
                if idle > limit:
                    self._declare(phase, step, idle, limit, full, stopping)
                    return
            except Exception as e:  # never into the program; say it once
                if not getattr(self, "_said_error", False):
                    self._said_error = True
                    _say(f"ftrain: warning: rank {self.rank}: watchdog: {type(e).__name__}: "
                         f"{e}\n")

    def _declare(self, phase: int, step: int, idle: float, limit: float, full: float,
                 stopping: bool) -> None:
        """The hang: diagnosis, record, verdict."""
        self._verdict.set()
        try:
            report, culprit = self._diagnose(phase, step, idle, limit)
            if stopping and limit < full:
                report += (f"ftrain: hang: a stop signal came while this rank waited: a rank "
                           f"that is dead or stopped cannot take part in the stop, so the "
                           f"limit was {limit:.1f} s\n")
            self.report = report
            self.record = self._record(phase, step, culprit, report)
        except Exception as e:
            report = self.report or (f"ftrain: hang: rank {self.rank} made no progress for "
                                     f"{idle:.1f} s (limit {limit:.1f} s) in "
                                     f"{phase_text(phase, step)}\n")
            _say(f"ftrain: warning: rank {self.rank}: watchdog: {type(e).__name__}: {e}\n")
        if self._on_hang is None:
            _end_process(report, self.record)
        try:
            self._on_hang(report, self.record)
        except Exception as e:
            _say(f"ftrain: warning: rank {self.rank}: watchdog: on_hang raised "
                 f"{type(e).__name__}: {e}\n")
        finally:
            self._verdict_done.set()

    def _host_of(self, rank: int, b: Optional[_Beat] = None) -> str:
        if b is not None and b.valid:
            return b.host
        peer = self._peers[rank]
        return peer[1] if peer else "?"

    def _pid_of(self, rank: int, b: Optional[_Beat] = None) -> int:
        if b is not None and b.valid:
            return b.pid
        peer = self._peers[rank]
        return peer[0] if peer else 0

    def _peer_gone(self, host: str, pid: int) -> bool:
        """True when a silent peer's process is known to be gone: it ran on
        this host and no process has its pid any more."""
        if pid <= 0 or host != self.host:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

    def _diagnose(self, phase: int, step: int, idle: float,
                  limit: float) -> Tuple[str, Dict[str, Any]]:
        """The report (watchdog.c's diagnose and name_ranks) and the culprit
        {rank, host, gone}: the first rank it names."""
        me, size = self.rank, self.world_size
        culprit: Dict[str, Any] = {"rank": -1, "host": "", "gone": False}
        lines = [f"ftrain: hang: rank {me} (host {self.host}, pid {self.pid}) made no progress "
                 f"for {idle:.1f} s (limit {limit:.1f} s) in {phase_text(phase, step)}\n"]

        def name(r: int, host: str, gone: bool) -> None:
            if culprit["rank"] == -1:
                culprit.update(rank=r, host=host, gone=gone)

        if self.heartbeat_dir is None or size <= 1:
            if size > 1:
                lines.append("ftrain: hang: which rank stopped is unknown: heartbeats need a "
                             "run directory\n")
            return "".join(lines), culprit
        first = [self._read_beat(r) for r in range(size)]
        # Keep beating while watching the others, so that they see us alive.
        end = time.monotonic() + self.look_s
        while time.monotonic() < end:
            self._write_beat(phase, step, idle)
            time.sleep(self.beat_s)
        then = [self._read_beat(r) for r in range(size)]
        mine = step * len(PHASES) + phase
        named, low, high = 0, mine, mine
        for r in range(size):
            if r == me:
                continue
            b = then[r]
            if not b.valid:
                gone = self._peer_gone(self._host_of(r), self._pid_of(r))
                lines.append(f"ftrain: hang: rank {r} (host {self._host_of(r)}, pid "
                             f"{self._pid_of(r)}) left no heartbeat: "
                             + ("its process is gone (no such pid on this host)\n" if gone
                                else "it never got this far, or it is gone\n"))
                name(r, self._host_of(r), gone)
                named += 1
            elif not first[r].valid or first[r].seq == b.seq:
                gone = self._peer_gone(b.host, b.pid)
                lines.append(f"ftrain: hang: rank {r} (host {b.host}, pid {b.pid}) stopped "
                             f"making progress: its heartbeat has not changed for "
                             f"{self.look_s:.1f} s ("
                             + ("its process is gone: no such pid on this host" if gone
                                else "the process is stopped, dead or cut off")
                             + f"); its last heartbeat had it in {phase_text(b.phase, b.step)}\n")
                name(r, b.host, gone)
                named += 1
            else:
                p = b.step * len(PHASES) + b.phase
                low, high = min(low, p), max(high, p)
        if not named and low != high:
            for r in range(size):
                b = then[r]
                p = mine if r == me else (b.step * len(PHASES) + b.phase if b.valid else high)
                if p != low or (r != me and first[r].seq == b.seq):
                    continue
                src = None if r == me else b
                lines.append(f"ftrain: hang: rank {r} (host {self._host_of(r, src)}, pid "
                             f"{self._pid_of(r, src)}) is behind the others, stuck in "
                             f"{phase_text(p % len(PHASES), p // len(PHASES))}\n")
                name(r, self._host_of(r, src), False)
                named += 1
        if not named:
            lines.append("ftrain: hang: every rank is alive and at the same point: that phase "
                         "is slower than the limit on every rank, or the communication itself "
                         "is stuck (network, NCCL or gloo)\n")
        return "".join(lines), culprit

    def _record(self, phase: int, step: int, culprit: Dict[str, Any],
                report: str) -> Optional[Dict[str, Any]]:
        """Write the hang's failure record on a thread of its own, waiting
        at most RECORD_WAIT_S; a record that cannot be written is said on
        stderr.  @return the record (None: no run directory, not written)."""
        if self.run_dir is None:
            return None
        chost = culprit["host"] if _host_ok(culprit["host"], True) else ""
        rec = {
            "format": FAILURE_FORMAT, "version": FAILURE_VERSION, "launch": self.launch,
            "kind": "peer_lost" if culprit["gone"] else "hang", "rank": self.rank,
            "host": self.host, "pid": self.pid, "step": step, "phase": PHASES[phase],
            "time": time.time(), "culprit": {"rank": culprit["rank"], "host": chost},
            "message": _cut_utf8(report, _MESSAGE_MAX),
        }
        done: Dict[str, Any] = {}

        def write() -> None:
            try:
                done["path"] = _write_record(self.run_dir, rec)
            except Exception as e:  # said below
                done["error"] = e

        writer = threading.Thread(target=write, name="ftrain-watchdog-record", daemon=True)
        writer.start()
        writer.join(RECORD_WAIT_S)
        if "path" in done:
            return rec
        e = done.get("error")
        _say(f"ftrain: warning: rank {self.rank}: failure record: "
             + (f"cannot write it in '{os.path.join(self.run_dir, FAILURE_DIR)}': {e}\n" if e
                else f"not written within {RECORD_WAIT_S:.0f} s\n"))
        return None


__all__ = ["Watchdog", "EXIT_HANG", "PHASES", "allowance", "stop_allowance", "beat_period",
           "phase_text", "phase_number", "heartbeat_line", "parse_heartbeat", "launch_from_env",
           "failure_file_name", "host_name"]
