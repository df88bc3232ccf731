#!/usr/bin/python3
"""pytorch_ddp.py - a PyTorch DDP training script made requeue-safe with
the ftrain_ckpt binding (docs/python.md).

The workload is what a PyTorch user writes: an MLP fitted to y = sin(2 pi x)
(ftrain's `--data sine`: 100 training points x = k/99, 99 test points
between them) with Adam and a StepLR schedule, fed by a DataLoader, under
DistributedDataParallel on gloo.  The lines
marked "ftrain_ckpt" are what it takes to make it requeue-safe and to
survive a lost node:

  * the stop signal (USR1, or FTRAIN_STOP_SIGNAL; TERM and INT too) is
    held from the first line and handled by the library; every step the
    ranks agree (one small allgather) and all stop after the same step,
    save one sharded checkpoint together and exit 75;
  * at start it resumes from the newest checkpoint that verifies, in
    --run-dir or FTRAIN_RUN_DIR, on any number of processes: parameters,
    Adam moments, the LR schedule, the data position (the ResumableSampler's
    global cursor, which the DataLoader draws from) and RNG state;
  * with --local-root (%n: the node's name), every --local-every steps each
    node saves to its own storage and keeps a partner copy of the node
    before it (fc.LocalTier); every --flush-every-th local save is copied
    into the shared tier; the nodes left after a node is lost resume from
    the newest local step they hold between them;
  * a watchdog (fc.Watchdog) writes ftrain's heartbeats in RUN_DIR/heartbeat,
    which the batch script reads for the step a failed launch reached, and
    ends a rank that makes no progress for --hang-timeout seconds (default:
    ftrain's derived limit) with a failure record and exit 76.

Launch (rank and world from the environment):
  python3 -m ftrain_ckpt.run --nproc_per_node 3 examples/pytorch_ddp.py --run-dir runs/ddp
      (torchrun that exits 75 after a stop and sends USR1 on to the ranks;
      plain torchrun exits 1 then, docs/python.md)
  torchrun --redirects 2 --tee 2 --nproc_per_node 3 examples/pytorch_ddp.py --run-dir runs/ddp
      (--redirects 2 --tee 2: Debian 12's torch 1.13 under Python 3.11
      cannot parse their default "0", docs/python.md; other versions run
      without them)
  srun -n 3 examples/pytorch_ddp.py --run-dir ...   (SLURM_PROCID, SLURM_NTASKS;
      MASTER_ADDR defaults to the job's first node, MASTER_PORT to
      20000 + job id % 20000)
  FTRAIN_PROGRAM=$PWD/examples/pytorch_ddp.py sbatch -N 2 slurm/train.sbatch
  FTRAIN_PROGRAM=$PWD/examples/pytorch_ddp.py FTRAIN_TASKS_PER_NODE=1 sbatch -N 3 \
      slurm/train.sbatch --local-root /dev/shm/$USER-ddp/%n --local-every 50 --flush-every 10
      (a lost node is relaunched in the job on the nodes left, from the local tier)
  examples/pytorch_ddp.py --run-dir runs/one       (one process, no DDP)

Determinism: fixed seeds, torch.use_deterministic_algorithms(True), one
thread per process (--threads), and a global batch (--global-batch) cut
into per-rank slices by fc.ResumableSampler (its order depends on the seed
and the epoch only), each rank's loss scaled so that DDP's average is the
mean over the global batch: the batches and the mathematics do not depend
on the world size.  Bit for bit, a run stopped and resumed on the same
world size ends with the same weights as an uninterrupted run on that
world size.  Across world sizes the sums are taken in another order
(gloo's allreduce and each rank's own partial sums), so the weights agree
to float rounding, not bit for bit.

Output (rank 0 unless said): "world:" lines (every rank: rank, node, pid),
"resume:" (from the node-local tier or a shared checkpoint), "recovery:"
(after an unplanned end, from its heartbeats), "local tier:", "train:",
progress lines, "checkpoint:", "stop:", and
"done: step=S epoch=E samples_hash=D lr=L test_loss=T param_hash=H" (D: the
first 16 hex digits of a SHA-256 chained over the steps, each step's link
the ids of the samples the ranks trained on, rank by rank: the global
batches in the order consumed, the same on any number of processes and
across stops, since the chain is saved with the checkpoint; L: the last
learning rate, in full; H: the first 16 hex digits of the SHA-256 of the
parameters' bytes).

Exit status: 0 finished, 75 stopped on a signal with a committed
checkpoint (requeue me), 1 a failure (a collective that lost its peer: at
once, no interpreter teardown), 2 bad options or a refused resume, 76 a
hang its watchdog detected.
"""
import os
import sys

# ftrain_ckpt: the package from this source tree, unless one is installed.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ftrain_ckpt as fc  # noqa: E402  (light: ctypes only)

fc.hold_stop_signals()  # ftrain_ckpt: a stop signal during start-up waits

import argparse  # noqa: E402
import datetime  # noqa: E402
import hashlib  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

EX_USAGE = 2


def first_node(nodelist):
    """The first host of a SLURM node list ("n[1-3],m2" -> "n1")."""
    head = re.match(r"[^,\[]+(\[[^\]]*\])?", nodelist)
    if not head:
        return nodelist
    m = re.match(r"([^\[]*)\[([^\],\-]+)", head.group(0))
    return m.group(1) + m.group(2) if m else head.group(0)


def world_from_env():
    """(rank, world, launcher) from torchrun's variables (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT) or srun's (SLURM_PROCID, SLURM_NTASKS), else
    a world of one."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), "torchrun"
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "localhost"
        env.setdefault("MASTER_ADDR", first_node(nodes))
        env.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), "srun"
    return 0, 1, "single"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", default=os.environ.get("FTRAIN_RUN_DIR"),
                    help="checkpoints go to RUN_DIR/ckpt (default: $FTRAIN_RUN_DIR)")
    ap.add_argument("--steps", type=int, default=3000, help="optimizer steps in all")
    ap.add_argument("--global-batch", type=int, default=20,
                    help="samples per step, split over the ranks")
    ap.add_argument("--layers", default="64,64", help="hidden widths")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lr-step", type=int, default=100, help="StepLR: decay every N steps")
    ap.add_argument("--lr-gamma", type=float, default=0.9, help="StepLR: by this factor")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--ckpt-every", type=int, default=0,
                    help="also save every N steps (0: only at a stop and at the end)")
    ap.add_argument("--ckpt-keep", type=int, default=3, help="checkpoints kept")
    ap.add_argument("--log-every", type=int, default=500)
    ap.add_argument("--step-delay", type=float, default=0.0,
                    help="sleep this many seconds after each step (tests, demos)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds a collective may wait for a peer")
    ap.add_argument("--local-root", help="the node-local tier: each node's directory "
                    "(%%n: the node's name); none: no local tier")
    ap.add_argument("--local-every", type=int, default=10,
                    help="a local save (with partner copies) every N steps")
    ap.add_argument("--flush-every", type=int, default=0,
                    help="copy every K-th local save into the shared tier (0: never)")
    ap.add_argument("--hang-timeout", type=float, default=0,
                    help="seconds without progress that make a hang (exit 76; 0: "
                    "ftrain's derived limit)")
    a = ap.parse_args()
    if not a.run_dir:
        ap.error("no run directory: give --run-dir or set FTRAIN_RUN_DIR")
    try:
        a.widths = [int(w) for w in a.layers.split(",") if w]
    except ValueError:
        ap.error(f"--layers: not a list of widths: {a.layers}")
    if a.steps < 1 or a.global_batch < 1 or a.lr_step < 1 or any(w < 1 for w in a.widths):
        ap.error("--steps, --global-batch, --lr-step and --layers must be positive")
    if a.local_every < 1 or a.flush_every < 0 or a.hang_timeout < 0:
        ap.error("--local-every must be positive, --flush-every and --hang-timeout not negative")
    if a.flush_every and not a.local_root:
        ap.error("--flush-every needs --local-root")
    return a


def main():
    a = parse_args()
    rank, world, launcher = world_from_env()
    # ftrain_ckpt: handlers in place; a signal held since the first line is taken now.
    guard = fc.StopGuard()

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    say = (lambda *m: print(*m, flush=True)) if rank == 0 else (lambda *m: None)
    print(f"world: rank {rank} of {world} ({launcher}) host {fc.node_name()} "
          f"pid {os.getpid()}", flush=True)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=a.timeout))
    comm = fc.TorchComm() if world > 1 else fc.SINGLE
    # ftrain_ckpt: heartbeats in RUN_DIR/heartbeat (the batch script reads the
    # step reached from them); no progress for too long: a report, a
    # failure record and exit 76, which the batch script relaunches.
    wd = fc.Watchdog(a.run_dir, a.hang_timeout or None, stop_requested=guard)

    tier = None  # ftrain_ckpt: the node-local tier, made below

    def wait_local():
        """ftrain_ckpt: the node-local save in the background ends (sealed on
        every node, flushed; its failure raises on every rank), said once."""
        if tier is None or tier.wait() is None:
            return
        last = tier.last_save
        say(f"checkpoint: local step {last['step']} sealed on every node in "
            f"{last['total_s']:.3f} s (training stall {last['stall_s']:.3f} s)")
        if rank == 0 and a.flush_every and last["step"] % (a.local_every * a.flush_every) == 0:
            fc.prune(root, a.ckpt_keep)  # the flush added a shared checkpoint

    def leave(code):
        """ftrain_ckpt: every rank leaves together, at once.  srun
        --kill-on-bad-exit kills a rank still tearing Python down once another
        has exited 75, and torch 1.13 can hang at interpreter exit in gloo's
        destructor: the checkpoint is committed, so skip the teardown."""
        wd.close()  # a planned end: the heartbeat goes
        try:
            # ftrain_ckpt: the local save in the background ends (sealed or
            # failed, within the tier's timeout) before the rank leaves.
            wait_local()
        except Exception as e:  # noqa: BLE001 (the shared checkpoint is committed)
            say(f"local tier: the last local save failed: {e}")
        if world > 1:
            dist.barrier()
        fc.exit_now(code)

    # Data: ftrain's sine set.
    n = 100
    x = torch.tensor([k / 99.0 for k in range(n)], dtype=torch.float32).reshape(-1, 1)
    y = torch.sin(2 * math.pi * x.double()).float()
    tx = torch.tensor([(k + 0.5) / 99.0 for k in range(99)], dtype=torch.float32).reshape(-1, 1)
    ty = torch.sin(2 * math.pi * tx.double()).float()

    torch.manual_seed(a.seed)
    layers, prev = [], 1
    for w in a.widths:
        layers += [torch.nn.Linear(prev, w), torch.nn.Tanh()]
        prev = w
    model = torch.nn.Sequential(*layers, torch.nn.Linear(prev, 1))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=a.lr_step, gamma=a.lr_gamma)
    config = {"layers": a.widths, "lr": a.lr, "lr_step": a.lr_step, "lr_gamma": a.lr_gamma,
              "global_batch": a.global_batch, "seed": a.seed, "data": "sine",
              "activation": "tanh", "optimizer": "adam"}

    # ftrain_ckpt: the data order, world-size invariant and resumable: rank r
    # takes the r-th share of each global batch of a permutation that depends
    # on the seed and the epoch only (ftrain's own order for --data sine).
    try:
        if a.global_batch < world:
            raise ValueError(f"fewer samples than the {world} ranks")
        sampler = fc.ResumableSampler(n, a.global_batch, seed=a.seed, rank=rank,
                                      world_size=world)
    except ValueError as e:
        if rank == 0:
            print(f"pytorch_ddp: --global-batch {a.global_batch}: {e}", file=sys.stderr)
        leave(EX_USAGE)
    # Each batch: this rank's share of one global batch (ids, x, y).
    loader = DataLoader(TensorDataset(torch.arange(n), x, y),
                        batch_sampler=sampler.batch_sampler())
    # ftrain_ckpt: what a resume restores besides the model and the optimizer
    # (objects in place; the plain value samples_hash replaced).
    state = {"scheduler": sched, "sampler": sampler, "samples_hash": ""}

    # ftrain_ckpt: the node-local tier: every --local-every steps each node
    # saves to its own storage and keeps a partner copy of the node before
    # it, so the nodes left after a loss restore without the shared tier;
    # every --flush-every-th local save is copied into the shared tier.
    root = os.path.join(a.run_dir, "ckpt")  # the shared tier
    tier = None
    if a.local_root:
        try:
            tier = fc.LocalTier(a.local_root, every=a.local_every, shared=root,
                                flush_every=a.flush_every, comm=comm,
                                log=lambda m: say(f"local tier: {m}"))
        except (OSError, ValueError) as e:
            if rank == 0:
                print(f"pytorch_ddp: --local-root {a.local_root}: {e}", file=sys.stderr)
            leave(EX_USAGE)

    # ftrain_ckpt: resume from the newest good checkpoint, on any world size:
    # the shared tier's, or a newer one the nodes' local tiers hold between
    # them (assembled whole on each node from their own and partner copies).
    step, saved = 0, None
    wd.phase(0, "load")
    path = fc.resume_point(root, comm=comm, local=tier,
                           on_skip=lambda name, why: say(f"resume: skipped {name}: {why}"))
    if path:
        t0 = time.perf_counter()
        with fc.Checkpoint(path) as ck:  # the options first: a clear refusal
            old = ck.record.get("config", {})
        diff = [f"{k} {old.get(k)} -> {v}" for k, v in config.items() if old.get(k) != v]
        if diff:
            if rank == 0:
                print(f"pytorch_ddp: resume from {path} refused: options differ: "
                      f"{', '.join(diff)}", file=sys.stderr)
            leave(EX_USAGE)
        rec = fc.load_state(path, model, opt, state=state)
        local = tier is not None and tier.last_resume[0] == "local"
        if tier is not None:
            tier.release()  # every rank has read the assembled copy
        step = saved = rec["step"]
        fc.set_rng_state(rec["rng"])
        say(f"resume: from {'the node-local tier (' + path + ')' if local else path} step "
            f"{step} (epoch {sampler.epoch}, cursor {sampler.cursor}), "
            f"world {rec['world_size']} -> {world}, loaded in {time.perf_counter() - t0:.3f} s")
        before = wd.leftovers  # rank 0: heartbeats an unplanned end left
        if before:
            say(f"recovery: the launch before ended unplanned after step {before['step_done']}: "
                f"rank {before['first_rank']} (host {before['first_host']}) went silent first; "
                f"resumed from step {step}: {max(0, before['step_done'] - step)} step(s) redone")
    ddp = DDP(model) if world > 1 else model
    if world > 1:
        # DDP lays its gradient buckets out anew after its first iteration.
        # Take that iteration here, on an empty batch (zero gradients, no
        # optimizer step), so that every launch, fresh or resumed, trains
        # with the same layout: with 3 or more ranks the allreduce's sums,
        # and so the last bits of the weights, depend on it.
        ddp(x[:0]).sum().backward()
        opt.zero_grad(set_to_none=True)

    def record(at):
        return {"format": "pytorch_ddp", "version": 3, "step": at, "epoch": sampler.epoch,
                "cursor": sampler.cursor, "config": config, "rng": fc.rng_state(),
                "world_size": world, "saved_at": int(time.time())}

    def save(at):
        """ftrain_ckpt: every rank passes the whole state and writes its slice."""
        wd.phase(at, "save")
        wait_local()  # a local save's flush into the same root ends first
        t0 = time.perf_counter()
        p = fc.save_state(root, at, model, opt, state=state, record=record(at), comm=comm)
        if rank == 0:
            fc.prune(root, a.ckpt_keep, in_use=p)
        say(f"checkpoint: {p} committed in {time.perf_counter() - t0:.3f} s")
        return p

    def save_local(at):
        """ftrain_ckpt: the same state into the node-local tier (collective),
        in the background: save() takes the state and returns, opt.step()
        waits for the copy, a helper thread exchanges and seals."""
        wd.phase(at, "save")
        wait_local()  # the save before (save() would wait for it too)
        t0 = time.perf_counter()
        tier.save(at, model, opt, state=state, record=record(at))
        say(f"checkpoint: local step {at} saving in the background "
            f"({time.perf_counter() - t0:.3f} s in save())")

    say(f"train: mlp 1-{'-'.join(map(str, a.widths))}-1 tanh, adam lr {a.lr} "
        f"(x{a.lr_gamma} every {a.lr_step} steps), data sine "
        f"({n} train / {tx.shape[0]} test), global batch {a.global_batch} over {world} "
        f"rank(s), steps {step} -> {a.steps}, {a.threads} thread(s) per rank")
    def global_ids(ids):
        """The ids the ranks train on this step, rank by rank: the global batch."""
        parts = [ids.tolist()]
        if world > 1:
            parts = [None] * world
            dist.all_gather_object(parts, ids.tolist())
        return [i for part in parts for i in part]

    while step < a.steps:  # epochs: each pass of the loader starts at the sampler's cursor
        for ids, xb, yb in loader:  # this rank's share of each global batch
            take = len(sampler.global_batch_at())  # the global batch (an epoch's last is short)
            with wd.step(step + 1):  # ftrain_ckpt: the watchdog sees the step's progress
                opt.zero_grad(set_to_none=True)
                # Sum of this rank's squared errors scaled by world/take: DDP's
                # mean over the ranks is then the mean over the global batch.
                loss_sum = ((ddp(xb) - yb) ** 2).sum()
                (loss_sum * (world / take)).backward()
                opt.step()
                sched.step()
            step += 1
            sampler.advance()  # ftrain_ckpt: one global batch consumed
            link = f"{state['samples_hash']}:{global_ids(ids)}"
            state["samples_hash"] = hashlib.sha256(link.encode()).hexdigest()
            if a.step_delay > 0:
                time.sleep(a.step_delay)
            if a.log_every and step % a.log_every == 0:
                s = loss_sum.detach().clone()
                if world > 1:
                    dist.all_reduce(s)
                say(f"step {step}/{a.steps} epoch {sampler.epoch} loss {s.item() / take:.6g}")
            # ftrain_ckpt: one agreed stop step for every rank.
            stop = guard.check(step)
            if stop is not None:
                if stop != step:
                    raise RuntimeError(f"ranks out of step: at {step}, agreed {stop}")
                save(step)
                sig, t_sig = guard.stop_signal.name[3:], guard.requested_at
                say(f"stop: signal {sig} at step {step}: checkpoint committed "
                    f"{time.time() - t_sig:.3f} s after this rank's signal" if t_sig else
                    f"stop: signal {sig} (another rank's) at step {step}: checkpoint committed")
                leave(fc.EXIT_REQUEUE)
            if a.ckpt_every and step % a.ckpt_every == 0 and step < a.steps:
                save(step)
            if tier is not None and tier.due(step) and step < a.steps:
                save_local(step)
            if step == a.steps:
                break

    if saved != step:
        save(step)
    with torch.no_grad():
        test_loss = ((model(tx) - ty) ** 2).mean().item()
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().numpy().tobytes())
    say(f"done: step={step} epoch={sampler.epoch} samples_hash={state['samples_hash'][:16]} "
        f"lr={sched.get_last_lr()[0]!r} test_loss={test_loss:.9g} param_hash={h.hexdigest()[:16]}")
    leave(fc.EXIT_DONE)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        # ftrain_ckpt: a failure (a collective that lost its peer) ends the
        # rank at once: torch 1.13 can hang at exit in gloo's destructor.
        traceback.print_exc()
        fc.exit_now(1)
