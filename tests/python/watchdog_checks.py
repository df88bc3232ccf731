"""watchdog_checks.py - ftrain_ckpt.Watchdog in one process, for
tests/python/python_watchdog.sh (no torch needed: the ranks' peers are
heartbeat files this script writes, as ftrain's would be).

Usage: watchdog_checks.py WORKDIR
Prints "plan N" first, then "PASS <name>" or "FAIL <name>: <why>" per
check; exits 0 when it ran to its end.

1. The rules are the C ones: allowance, stop_allowance and beat_period on
   tests/fault/watchdog.c's cases; phase_text's words; the heartbeat line
   (write_beat's format) and its parse; the launch's identity from the
   environment (failure_launch_from_env's rules) and the record's name.
2. A live watchdog: its heartbeat is there at once and follows the marks
   within a beat period; a heartbeat folder removed under it comes back;
   close() removes the file and the folder; an earlier launch's heartbeats
   are read and removed (rank 0).
3. The diagnosis, five runs at once (timeout 1 s; peers faked): a peer
   whose heartbeat stopped with its process alive -> "hang" naming it; the
   same with its pid gone -> "peer_lost"; gone but on another host ->
   "hang"; every peer beating, one behind -> it is named; a peer with no
   heartbeat -> named.  Each record: docs/failure-records.md's fields in
   their order, its file name, no temporary left.
4. A failure inside wd.step() while the hang is being declared waits for
   the verdict; a stop_requested that raises changes nothing; a suspended
   process (SIGSTOP longer than the timeout) is not a hang.
5. Bad input: a timeout <= 0 (or not a number), a run directory that cannot
   be written, rank >= world_size, an unknown phase, the arguments swapped.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import ftrain_ckpt as fc  # noqa: E402
from ftrain_ckpt import watchdog as W  # noqa: E402

PLAN = 34
from checks import check, raises, results  # noqa: E402  (tests/python/checks.py)

WORK = sys.argv[1]
print(f"plan {PLAN}", flush=True)


def close_to(a, b):
    return abs(a - b) < 1e-9


# ---- 1. the rules ------------------------------------------------------------------
none, fast, slow = {}, {"step": 0.02, "eval": 0.5, "save": 0.05}, {"step": 6, "eval": 1, "save": 10}
cases = [("reduce", None, none, 45), ("start", None, none, 600), ("load", None, none, 600),
         ("save", None, none, 300), ("eval", None, none, 300), ("finish", None, none, 60),
         ("control", None, fast, 45), ("save", None, fast, 45), ("compute", None, slow, 100),
         ("compute", 3, fast, 3), ("save", 3, fast, 3), ("eval", 3, fast, 5),
         ("save", 3, none, 300), ("start", 3, none, 600), ("load", 3, none, 3),
         ("load_sync", None, none, 600), ("save_sync", None, slow, 100)]
bad = [(c, W.allowance(c[0], c[1], c[2])) for c in cases if not close_to(W.allowance(*c[:3]), c[3])]
check("allowance(): tests/fault/watchdog.c's 17 cases", not bad, f"differ: {bad}")
slow2 = {"step": 2, "eval": 1, "save": 10}
cases = [("control", None, fast, 5), ("reduce", None, slow2, 20), ("reduce", 3, fast, 3),
         ("save", None, slow2, 100), ("compute", None, fast, 45), ("control", None, none, 45)]
bad = [c for c in cases if not close_to(W.stop_allowance(*c[:3]), c[3])]
check("stop_allowance(): the C test's 6 cases", not bad, f"differ: {bad}")
got = [W.beat_period(3), W.beat_period(None), W.beat_period(3600)]
check("beat_period(): 0.5 s for 3, 1.5 s derived, at most 5 s", got == [0.5, 1.5, 5.0], got)
got = [W.phase_text("reduce", 12), W.phase_text("eval", 4), W.phase_text("start", 0),
       W.phase_text("save_sync", 7), W.phase_text(11, 3)]
want = ["the gradient allreduce of step 12", "the evaluation after step 4", "the start-up",
        "the checkpoint commit of step 7", "an unknown phase 11 of step 3"]
check("phase_text(): watchdog_phase_text's words", got == want, got)
check("the phase numbers are watchdog_phase_t's (compute 3, reduce 5, save 8, finish 10)",
      [W.phase_number(n) for n in ("compute", "reduce", "save", "finish")] == [3, 5, 8, 10],
      W.PHASES)
line = W.heartbeat_line(0xab, 2, 4001, 7, 5, 12, 0.25, "n2")
check("heartbeat_line(): write_beat's format",
      line == "ftrain-heartbeat 2 token 00000000000000ab rank 2 pid 4001 seq 7 phase 5 "
              "step 12 idle 0.250 host n2\n", repr(line))
got = W.parse_heartbeat(line)
check("parse_heartbeat() reads it back; refuses another magic or a field out of order",
      got == {"token": 0xab, "rank": 2, "pid": 4001, "seq": 7, "phase": 5, "step": 12,
              "idle": 0.25, "host": "n2"}
      and W.parse_heartbeat(line.replace("heartbeat 2", "heartbeat 1")) is None
      and W.parse_heartbeat(line.replace("rank 2 pid 4001", "pid 4001 rank 2")) is None
      and W.parse_heartbeat(line[:40]) is None, got)
env0 = dict(os.environ)
os.environ.update(SLURM_JOB_ID="4242", SLURM_RESTART_COUNT="1", FTRAIN_LAUNCH_ID="3")
l1 = W.launch_from_env()
os.environ.update(SLURM_JOB_ID="42.1", SLURM_RESTART_COUNT="-1", FTRAIN_LAUNCH_ID="12345678901")
l2 = W.launch_from_env()
os.environ.clear()
os.environ.update(env0)
check("launch_from_env(): failure_launch_from_env's rules (bad values: '' and 0)",
      l1 == {"job": "4242", "restart": 1, "id": 3} and l2 == {"job": "", "restart": 0, "id": 0},
      f"{l1} {l2}")
check("failure_file_name(): j<job>-r<restart>-l<launch>-rank<rank>.json",
      W.failure_file_name(l1, 5) == "j4242-r1-l3-rank5.json"
      and W.failure_file_name(l2, 0) == "j-r0-l0-rank0.json", W.failure_file_name(l1, 5))

# ---- 2. a live watchdog ---------------------------------------------------------------
run = os.path.join(WORK, "live")
wd = fc.Watchdog(run, timeout=30)
hb = os.path.join(run, "heartbeat", "rank-0")
first = W.parse_heartbeat(open(hb).read()) if os.path.exists(hb) else None
check("the heartbeat is written at once: rank 0, this pid and host, start-up",
      first is not None and (first["rank"], first["pid"], first["host"], first["phase"],
                             first["seq"]) == (0, os.getpid(), W.host_name(), 0, 1), first)
wd.phase(5, "save")
time.sleep(wd.beat_s + 0.4)
now = W.parse_heartbeat(open(hb).read())
check("it follows the marks within a beat period (save of step 5), same token, seq grows",
      now is not None and (now["phase"], now["step"], now["token"]) == (8, 5, first["token"])
      and now["seq"] > first["seq"], now)
os.unlink(hb)
os.rmdir(os.path.dirname(hb))
time.sleep(wd.beat_s + 0.4)
check("a heartbeat folder removed under it comes back", os.path.exists(hb), os.listdir(run))
wd.close()
check("close(): the heartbeat and its folder are removed (a clean end)",
      not os.path.exists(os.path.dirname(hb)), os.listdir(run))
old = os.path.join(WORK, "old")
for r, step, phase, age in ((0, 9, 6, 5), (1, 9, 5, 20), (2, 8, 8, 10)):
    os.makedirs(os.path.join(old, "heartbeat"), exist_ok=True)
    f = os.path.join(old, "heartbeat", f"rank-{r}")
    with open(f, "w") as fh:
        fh.write(W.heartbeat_line(99, r, 1000 + r, 5, phase, step, 0.0, f"n{r}"))
    os.utime(f, (time.time() - age, time.time() - age))
wd = fc.Watchdog(old, timeout=30)
left, files = wd.leftovers, sorted(os.listdir(os.path.join(old, "heartbeat")))
wd.close()
check("rank 0 reads an earlier launch's heartbeats (watchdog_leftovers' rules), then removes them",
      left is not None and files == ["rank-0"]
      and {k: left[k] for k in ("ranks", "step_done", "first_rank", "first_pid", "first_host")}
      == {"ranks": 3, "step_done": 9, "first_rank": 1, "first_pid": 1001, "first_host": "n1"},
      f"{left} {files}")
with fc.Watchdog(os.path.join(WORK, "ctx"), timeout=30) as wd2:
    wd2.phase(1, "compute")
check("a with-block closes it cleanly", not os.path.exists(os.path.join(WORK, "ctx", "heartbeat")),
      os.listdir(os.path.join(WORK, "ctx")))

# ---- 3. the diagnosis ------------------------------------------------------------------
TOKEN = 0x1234abcd
HOST = W.host_name()
dead = subprocess.Popen(["true"])
dead.wait()
alive = os.getppid()


def put_beat(run_dir, rank, pid, seq, phase, step, host):
    d = os.path.join(run_dir, "heartbeat")
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f"rank-{rank}.new")
    with open(tmp, "w") as f:
        f.write(W.heartbeat_line(TOKEN, rank, pid, seq, phase, step, 0.0, host))
    os.rename(tmp, os.path.join(d, f"rank-{rank}"))


# name: {rank: (pid, host, phase, step, beating)}; what the verdict must say.
scenarios = {
    "stopped": ({1: (alive, HOST, 5, 3, False), 2: (alive, HOST, 5, 3, True)},
                "hang", 1, HOST, "stopped making progress"),
    "gone": ({1: (dead.pid, HOST, 5, 3, False), 2: (alive, HOST, 5, 3, True)},
             "peer_lost", 1, HOST, "its process is gone: no such pid on this host"),
    "elsewhere": ({1: (dead.pid, "otherhost", 5, 3, False), 2: (alive, HOST, 5, 3, True)},
                  "hang", 1, "otherhost", "the process is stopped, dead or cut off"),
    "behind": ({1: (alive, HOST, 5, 3, True), 2: (alive, "n9", 5, 2, True)},
               "hang", 2, "n9", "is behind the others, stuck in the gradient allreduce of step 2"),
    "silent": ({2: (alive, HOST, 5, 3, True)},
               "hang", 1, "?", "left no heartbeat: it never got this far"),
}
got = {}
stop_fakes = threading.Event()


def fakes():
    seq = 0
    while not stop_fakes.is_set():
        seq += 1
        for name, (peers, *_r) in scenarios.items():
            for r, (pid, host, phase, step, beating) in peers.items():
                if beating or seq == 1:
                    put_beat(os.path.join(WORK, name), r, pid, seq, phase, step, host)
        time.sleep(0.2)


faker = threading.Thread(target=fakes, daemon=True)
faker.start()
time.sleep(0.3)
os.environ.update(SLURM_JOB_ID="77", SLURM_RESTART_COUNT="2", FTRAIN_LAUNCH_ID="5")
dogs = {}
for name in scenarios:
    dogs[name] = fc.Watchdog(os.path.join(WORK, name), timeout=1.0, rank=0, world_size=3,
                             token=TOKEN, on_hang=lambda rep, rec, n=name: got.update({n: (rep, rec)}))
    dogs[name].phase(3, "reduce")
os.environ.clear()
os.environ.update(env0)
deadline = time.monotonic() + 20
while len(got) < len(scenarios) and time.monotonic() < deadline:
    time.sleep(0.1)
stop_fakes.set()
KEYS = ["format", "version", "launch", "kind", "rank", "host", "pid", "step", "phase", "time",
        "culprit", "message"]
for name, (_peers, kind, crank, chost, words) in scenarios.items():
    rep, rec = got.get(name, ("(no verdict)", None))
    path = os.path.join(WORK, name, "failures", "j77-r2-l5-rank0.json")
    on_disk = json.load(open(path)) if os.path.exists(path) else None
    left = [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".")] \
        if os.path.isdir(os.path.dirname(path)) else []
    ok = (rec is not None and on_disk == rec and list(on_disk) == KEYS and not left
          and (rec["kind"], rec["culprit"], rec["rank"], rec["step"], rec["phase"])
          == (kind, {"rank": crank, "host": chost}, 0, 3, "reduce")
          and rec["launch"] == {"job": "77", "restart": 2, "id": 5} and words in rep
          and rec["message"] == rep and rep.startswith("ftrain: hang: rank 0 (host "))
    check(f"diagnosis '{name}': kind {kind}, culprit rank {crank} host {chost}, "
          f"'{words}'", ok, f"report: {rep!r} record: {rec} on disk: {on_disk} left: {left}")
for d in dogs.values():
    d.close()

# ---- 4. the program's side ---------------------------------------------------------------
verdict = {}


def slow_verdict(rep, rec):
    time.sleep(0.5)
    verdict["done"] = True


wd = fc.Watchdog(os.path.join(WORK, "await"), timeout=0.5, on_hang=slow_verdict)
caught = None
try:
    with wd.step(1):
        deadline = time.monotonic() + 10
        while not wd.hang_declared and time.monotonic() < deadline:
            time.sleep(0.02)
        raise RuntimeError("the collective failed: a peer closed the connection")
except RuntimeError as e:
    caught = (str(e), verdict.get("done"))
check("an exception inside wd.step() while a hang is declared waits for the verdict, then "
      "goes on", caught == ("the collective failed: a peer closed the connection", True), caught)
wd.close()


def boom():
    raise RuntimeError("stop_requested failed")


hangs = []
wd = fc.Watchdog(os.path.join(WORK, "boom"), timeout=0.6, stop_requested=boom,
                 on_hang=lambda rep, rec: hangs.append(rep))
for s in range(8):
    with wd.step(s):
        time.sleep(0.1)
alive_thread = wd._thread.is_alive()
wd.close()
check("a stop_requested that raises changes nothing (no false hang, the thread lives)",
      not hangs and alive_thread, hangs)

# The child waits in its phase for a line on stdin (no clock: a sleep's
# deadline would pass while it is stopped, and it would mark progress first).
child = subprocess.Popen([sys.executable, "-c", """
import sys, time
sys.path.insert(0, sys.argv[1])
import ftrain_ckpt as fc
wd = fc.Watchdog(sys.argv[2], timeout=1.5, on_hang=lambda r, rec: print("HANG", r, flush=True))
wd.phase(1, "compute")
print("ready", flush=True)
sys.stdin.readline()
wd.phase(2, "compute")
time.sleep(0.3)
wd.close()
print("done", flush=True)
""", os.path.join(HERE, "..", "..", "python"), os.path.join(WORK, "suspend")],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
ready = child.stdout.readline()
child.send_signal(signal.SIGSTOP)
time.sleep(3)
child.send_signal(signal.SIGCONT)
time.sleep(0.5)
try:
    out, _ = child.communicate("go\n", timeout=30)
except subprocess.TimeoutExpired:
    child.kill()
    out = "(timed out)"
check("a process suspended (SIGSTOP 3 s in a phase, timeout 1.5 s) is not a hang once it runs "
      "again", ready == "ready\n" and out == "done\n" and child.returncode == 0,
      f"rc {child.returncode}: {ready!r} {out!r}")

# ---- 5. bad input ------------------------------------------------------------------------
for t in (0, -1, float("nan"), float("inf"), "3", True):
    raises(f"timeout={t!r} is refused, naming the timeout",
           lambda t=t: fc.Watchdog(os.path.join(WORK, "bad"), timeout=t), ValueError,
           "timeout must be a number of seconds > 0", repr(t))
blocker = os.path.join(WORK, "a-file")
open(blocker, "w").close()
raises("a run directory that cannot be made or written: OSError naming the folder",
       lambda: fc.Watchdog(os.path.join(blocker, "run"), timeout=5), OSError,
       f"cannot write heartbeats in '{os.path.join(blocker, 'run', 'heartbeat')}'",
       "Not a directory")
raises("rank >= world_size is refused", lambda: fc.Watchdog(None, rank=3, world_size=3),
       ValueError, "rank 3 is not below world_size 3")
wd = fc.Watchdog(None, timeout=30)
raises("an unknown phase is refused, listing the names", lambda: wd.phase(1, "backward"),
       ValueError, "unknown watchdog phase 'backward'", "compute, control, reduce")
raises("phase(phase, step) swapped is refused", lambda: wd.phase("compute", 1), TypeError,
       "the step comes first")
wd.close()

check(f"all {PLAN} checks made", len(results) == PLAN - 1, f"{len(results) + 1} made")
