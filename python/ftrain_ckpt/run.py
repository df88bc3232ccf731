"""run.py - torchrun that keeps the workers' exit 75 and forwards the stop
signal: ``python3 -m ftrain_ckpt.run [torchrun options] script.py [args]``
(installed by pip as the command ``ftrain-torchrun``).

torchrun (torch.distributed.run) turns its workers' exit statuses into its
own exit 1 whenever one of them is not 0, so a batch script cannot tell
"stopped on a signal, checkpoint committed, requeue me" (75) from a
failure; and it forwards TERM and INT to its workers but not USR1, the
stop signal of slurm/train.sbatch, whose default action kills the
launcher and orphans the workers.  This launcher is torchrun's own
machinery (its option parser, config_from_args and the elastic launch
API, launch_agent) with three changes:

* exit status: 0 when every worker exited 0; 75 when every worker that
  did not exit 0 exited 75; otherwise the status of the earliest worker
  to end with one other than 0 and 75 (ties: the lowest rank; a worker
  killed by signal N: the launcher dies of signal N too, so that srun and
  ftrain-supervise see a task killed by a signal, and a shell's $? is
  128 + N).  The workers the agent itself stopped
  because another had ended are not counted.  A signal that stopped the
  launcher itself (HUP, QUIT): 128 + N; a launch that failed (the
  rendezvous): 1; bad options: 2.
* signals: USR1, USR2, TERM and INT sent to the launcher are sent on to
  every worker it runs, and the launcher carries on until they end (it
  neither kills them nor stops waiting).  A worker started less than
  FORWARD_GRACE seconds ago that neither blocks nor handles the signal yet
  (a Python program before its first line: ftrain_ckpt.hold_stop_signals)
  gets it once it does, or at the end of the grace, so that a stop
  request at start-up does not kill it by the signal's default action.  A
  signal that comes before the workers start is sent to them once they
  do.  After a stop signal, or when every worker that ended exited 75, the
  workers are never restarted (--max_restarts is for failures).
* defaults: --monitor_interval 1 (torchrun's is 5 s, the time a stop may
  wait after the workers have exited); --redirects and --tee work with
  their default 0 under Python 3.11 (torch 1.13's Std.from_str returns
  None for "0" there); under srun (SLURM_STEP_ID, SLURM_PROCID and
  SLURM_NTASKS set) with none of --nnodes, --node_rank, --master_addr,
  --master_port, --rdzv_backend, --rdzv_endpoint, --rdzv_id or
  --standalone given: one launcher per SLURM task, a static rendezvous of
  SLURM_NTASKS nodes, this one SLURM_PROCID, on MASTER_ADDR (default the
  first node of SLURM_JOB_NODELIST) and MASTER_PORT (default 20000 + job id
  % 20000).

Everything else is torchrun's, option for option.  docs/python.md
("Under torchrun: ftrain_ckpt.run") is the guide, man/ftrain-torchrun.1
the reference.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

EXIT_DONE = 0
EXIT_REQUEUE = 75
EX_USAGE = 2
PROG = "ftrain-torchrun"
FORWARD_GRACE = 10.0  # seconds a young worker may take to block or handle a signal
FORWARDED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
_RDZV = ("nnodes", "node_rank", "master_addr", "master_port", "rdzv_backend",
         "rdzv_endpoint", "rdzv_id")


def _say(msg: str) -> None:
    """A line on stderr, written at once (os.write: safe in a signal
    handler, where sys.stderr may be in the middle of a write)."""
    data = f"{PROG}: {msg}\n".encode(errors="replace")
    while data:
        try:
            data = data[os.write(2, data):]
        except OSError:
            return


def exit_status(failures: Dict[int, Any]) -> int:
    """The launcher's exit status from the failures of a finished run
    (global rank -> ProcessFailure: exitcode, timestamp; the workers that
    ended non-zero): 0 for none, 75 when all are 75, else the earliest
    (timestamp, then rank) that is not 75, a signal N as 128 + N."""
    return _deciding(failures)[0]


def _deciding(failures: Dict[int, Any]) -> "tuple[int, int]":
    """(exit status, N): exit_status(), and N > 0 when it comes from a worker
    killed by signal N (0 otherwise)."""
    if not failures:
        return EXIT_DONE, 0
    for r in sorted(failures, key=lambda r: (getattr(failures[r], "timestamp", 0), r)):
        exitcode = failures[r].exitcode
        code = _code(exitcode)
        if code != EXIT_REQUEUE:
            return code, (-exitcode if exitcode is not None and exitcode < 0 else 0)
    return EXIT_REQUEUE, 0


# Set by main(): the signal that killed the worker whose status the
# launcher exits with (0: none).  run_main() dies of the same signal, so
# that srun and ftrain-supervise see a task killed by a signal (a node's
# or the system's doing: a relaunch) and not a task that exited 128 + N
# (which they read as the program's own failure).  The shell's $? is
# 128 + N either way.
_WORKER_SIGNAL = 0


def _code(exitcode: Optional[int]) -> int:
    if exitcode is None:
        return 1
    return 128 - exitcode if exitcode < 0 else exitcode


def first_node(nodelist: str) -> str:
    """The first host of a SLURM node list ("n[1-3],m2" -> "n1")."""
    head = re.match(r"[^,\[]+(\[[^\]]*\])?", nodelist)
    if not head:
        return nodelist
    m = re.match(r"([^\[]*)\[([^\],\-]+)", head.group(0))
    return m.group(1) + m.group(2) if m else head.group(0)


# ---- signals ---------------------------------------------------------------------
def _proc_ok(pid: int) -> bool:
    """pid is still a live child of this process (not one that ended and
    whose pid was given to another process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return not os.path.isdir("/proc/self")  # no /proc: trust the pid
    fields = st[st.rfind(")") + 2:].split()
    return len(fields) > 1 and fields[0] != "Z" and int(fields[1]) == os.getpid()


def _ready(pid: int, sig: int) -> bool:
    """The worker blocks, ignores or handles sig (so sending it will not
    kill it by the default action); True where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = {k: int(v, 16) for k, _, v in (line.partition(":\t") for line in f)
                     if k in ("SigBlk", "SigIgn", "SigCgt")}
    except (OSError, ValueError):
        return True
    bit = 1 << (sig - 1)
    return any(m & bit for m in masks.values()) or len(masks) < 3


class _Forwarder:
    """The launcher's handlers for FORWARDED: each signal goes to every
    worker of the current worker group (through the readiness gate)."""

    def __init__(self) -> None:
        self.agent = None
        self.started = 0.0     # time.monotonic() when the workers started
        self.pending: List[int] = []
        self.stopped: Optional[int] = None  # the first signal, once one came

    def install(self) -> None:
        for s in FORWARDED:
            signal.signal(s, self._handler)

    def _handler(self, signum: int, frame: object) -> None:
        if self.stopped is None:
            self.stopped = signum
        pids = self._pids()
        if pids is None:
            self.pending.append(signum)
            _say(f"{signal.Signals(signum).name} before the workers started: "
                 f"sent on to them when they do")
            return
        self._send(signum, pids)

    def _pids(self) -> Optional[List[int]]:
        pc = getattr(self.agent, "_pcontext", None)
        if pc is None:
            return None
        try:
            return sorted(pc.pids().values())
        except Exception:  # a context being torn down
            return []

    def _send(self, signum: int, pids: Sequence[int]) -> None:
        name = signal.Signals(signum).name
        now, late = [], []
        young = time.monotonic() - self.started < FORWARD_GRACE
        for pid in pids:
            if not _proc_ok(pid):
                continue
            if not young or _ready(pid, signum):
                try:
                    os.kill(pid, signum)
                    now.append(pid)
                except OSError:
                    pass
            else:
                late.append(pid)
        if now:
            _say(f"{name} sent on to worker pid(s) {', '.join(map(str, now))}")
        for pid in late:
            threading.Thread(target=self._send_when_ready, args=(pid, signum), daemon=True).start()

    def _send_when_ready(self, pid: int, signum: int) -> None:
        deadline = self.started + FORWARD_GRACE
        while time.monotonic() < deadline and _proc_ok(pid) and not _ready(pid, signum):
            time.sleep(0.02)
        if _proc_ok(pid):
            try:
                os.kill(pid, signum)
            except OSError:
                return
            _say(f"{signal.Signals(signum).name} sent on to worker pid {pid} "
                 f"(once it was ready for it)")

    def workers_started(self) -> None:
        self.started = time.monotonic()
        self.install()  # torch's start_processes installs its own for TERM and INT
        pending, self.pending = self.pending, []
        pids = self._pids() or []
        for s in dict.fromkeys(pending):
            self._send(s, pids)


FORWARDER = _Forwarder()


def _agent_class(base):
    """LocalElasticAgent, with the forwarder's hooks."""

    class FtrainAgent(base):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            FORWARDER.agent = self

        def _start_workers(self, worker_group):
            r = super()._start_workers(worker_group)
            FORWARDER.workers_started()
            return r

        def _monitor_workers(self, worker_group):
            result = super()._monitor_workers(worker_group)
            fails = getattr(result, "failures", None) or {}
            if FORWARDER.stopped is not None or (
                    fails and all(f.exitcode == EXIT_REQUEUE for f in fails.values())):
                # A stop is no failure to restart from: leave, and say 75.
                self._remaining_restarts = 0
            return result

    return FtrainAgent


# ---- options -------------------------------------------------------------------------
def _parser():
    from torch.distributed.run import get_args_parser
    p = get_args_parser()
    p.prog = PROG
    p.description = ("torchrun (torch.distributed.run) that exits 75 when every worker "
                     "that ended exited 75 and sends USR1, USR2, TERM and INT on to the "
                     "workers.  The options are torchrun's.")
    p.epilog = ("exit status: 0 every worker exited 0; 75 every worker that did not exit 0 "
                "exited 75 (stopped, checkpoint committed: requeue me); otherwise the "
                "earliest other status of a worker (128+N: killed by signal N); 128+N the "
                "launcher stopped by signal N (HUP, QUIT); 1 the launch failed "
                "(rendezvous); 2 bad options.  docs/python.md, man ftrain-torchrun.")
    return p


def parse(argv: Sequence[str]):
    """torchrun's options with this launcher's defaults; exits 2 (with
    argparse's message) on bad options."""
    p = _parser()
    defaults = {}
    for act in p._actions:
        if act.dest in _RDZV:
            defaults[act.dest] = act.default  # torchrun's, or PET_<NAME>'s
            act.default = None
        elif act.dest == "monitor_interval" and "PET_MONITOR_INTERVAL" not in os.environ:
            act.default = min(float(act.default), 1.0)
    args = p.parse_args(list(argv))
    given = [d for d in _RDZV if getattr(args, d) is not None or f"PET_{d.upper()}" in os.environ]
    for d in _RDZV:
        if getattr(args, d) is None:
            setattr(args, d, defaults[d])
    env = os.environ
    if not given and not args.standalone and all(
            k in env for k in ("SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NTASKS")):
        nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "localhost"
        try:
            args.nnodes = str(int(env["SLURM_NTASKS"]))
            args.node_rank = int(env["SLURM_PROCID"])
            args.master_addr = env.get("MASTER_ADDR") or first_node(nodes)
            args.master_port = int(env.get("MASTER_PORT") or
                                   20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
        except ValueError as e:
            p.error(f"under srun: cannot take the rendezvous from SLURM's variables: {e}")
        args.rdzv_backend = "static"
        args.rdzv_id = env.get("SLURM_JOB_ID", args.rdzv_id)
        _say(f"under srun: --nnodes {args.nnodes} --node_rank {args.node_rank} "
             f"--master_addr {args.master_addr} --master_port {args.master_port} "
             f"(from SLURM_NTASKS, SLURM_PROCID, "
             f"{'MASTER_ADDR' if env.get('MASTER_ADDR') else 'SLURM_JOB_NODELIST'}, "
             f"{'MASTER_PORT' if env.get('MASTER_PORT') else 'SLURM_JOB_ID'})")
    script = args.training_script
    if not args.module and not args.run_path and args.no_python:
        import shutil
        if not os.path.isfile(script) and shutil.which(script) is None:
            p.error(f"--no_python: command not found: {script}")
    elif not args.module and not os.path.isfile(script):
        p.error(f"no such script: {script}")
    return args


def _std(value: str):
    """--redirects/--tee as torchrun means them ("0", "3", "0:3,1:1"),
    also where Std.from_str cannot (torch 1.13 under Python 3.11)."""
    from torch.distributed.elastic.multiprocessing import Std
    if re.fullmatch(r"[0-3]", value):
        return Std(int(value))
    return {int(i): Std(int(v)) for i, v in (m.split(":") for m in value.split(","))}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # A stop signal while torch loads must not kill the launcher: take it
    # now, and send it on once the workers run.
    FORWARDER.install()
    try:
        import torch.distributed.run  # noqa: F401  (torchrun's machinery)
    except ImportError as e:
        _say(f"error: this launcher is torchrun's machinery and needs PyTorch with "
             f"torch.distributed, which {sys.executable} cannot import ({e})")
        return 1
    args = parse(argv)
    import torch.distributed.launcher.api as launcher_api
    from torch.distributed.run import config_from_args
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.multiprocessing.api import SignalException

    if args.standalone:
        import uuid
        args.rdzv_backend, args.rdzv_endpoint = "c10d", "localhost:29400"
        args.rdzv_id = str(uuid.uuid4())
    try:
        config, cmd, cmd_args = config_from_args(args)
    except (ValueError, RuntimeError, AssertionError) as e:
        _say(f"error: {e or type(e).__name__}")
        return EX_USAGE
    for what in ("redirects", "tee"):
        cur = getattr(config, what, "absent")
        if cur is None or (isinstance(cur, dict) and None in cur.values()):
            setattr(config, what, _std(getattr(args, what)))
    launcher_api.LocalElasticAgent = _agent_class(launcher_api.LocalElasticAgent)
    # torch logs a worker's exit 75 as an ERROR ("failed (exitcode: 75)"):
    # a stop is no error here.
    import logging
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(
        lambda rec: "(exitcode: 75)" not in rec.getMessage())
    try:
        launcher_api.launch_agent(config, cmd, list(cmd_args))
        status, failures = EXIT_DONE, {}
    except ChildFailedError as e:
        global _WORKER_SIGNAL
        failures = e.failures
        status, _WORKER_SIGNAL = _deciding(failures)
    except SignalException as e:
        sig = signal.Signals(e.sigval)
        _say(f"stopped by {sig.name}: the workers were sent {sig.name}; exit {128 + sig}")
        return 128 + sig
    except Exception as e:  # the rendezvous, the store, a worker that cannot start
        _say(f"error: {type(e).__name__}: {e}")
        return 1
    stop = (f" after {signal.Signals(FORWARDER.stopped).name}"
            if FORWARDER.stopped is not None else "")
    if status == EXIT_DONE:
        _say(f"every worker exited 0{stop}: exit 0")
    elif status == EXIT_REQUEUE:
        _say(f"every worker that did not exit 0 exited 75 (stopped, checkpoint "
             f"committed){stop}: exit 75")
    else:
        for r in sorted(failures, key=lambda r: (failures[r].timestamp, r)):
            f = failures[r]
            how = (f"was killed by {signal.Signals(-f.exitcode).name}" if f.exitcode < 0
                   else f"exited {f.exitcode}")
            _say(f"worker rank {r} (local rank {f.local_rank}, pid {f.pid}) {how}")
        _say(f"a worker failed{stop}: exit {status}")
    return status


def run_main() -> None:
    """The console script's entry point (ftrain-torchrun): main(), then
    leave at once (no interpreter teardown: the launchers of one srun step
    should leave together, and srun --kill-on-bad-exit kills those still
    tearing down once one has exited 75)."""
    code = main()
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    if _WORKER_SIGNAL:
        _die_of(_WORKER_SIGNAL)
    os._exit(code)


def _die_of(sig: int) -> None:
    """End this process by signal sig, as the worker it reports on ended
    (no core file of the launcher's own); returns only if that failed."""
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these two keep their action
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        except (OSError, ValueError):
            pass
    try:
        os.kill(os.getpid(), sig)
        time.sleep(1)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    run_main()
