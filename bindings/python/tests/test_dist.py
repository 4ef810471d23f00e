# SPDX-License-Identifier: BSD-3-Clause
"""Multi-rank checkpoints over torch.distributed (gloo), RANKS processes on
this machine, each with its own ramdisk store and copy-out to a shared
directory, through Store(..., group=True).

Kill trials: the ranks checkpoint every step with save_async; the parent
kills one random rank with SIGKILL at a random moment (every 4th trial: all
of them at once) and, as a launcher would, the rest shortly after.  Then a
new set of ranks loads: every rank must get the same step, bit-exact
against what that rank wrote for it, never older than the newest step any
rank had logged as global (Store.global_step).  Then a replaced node (one
rank's ramdisk file deleted: it loads its file from the shared directory,
still the same step everywhere; once right after the kills, once after a step
every rank copied out, which the others then load locally) and ranks with
different layouts (a clear LayoutError on every rank, no hang).

Usage: test_dist.py [TRIALS]  (default $PMCK_DIST_TRIALS or 6).
Internally: test_dist.py --worker MODE DIR RANK RDZV."""
import os
import random
import signal
import sys
import time

RANKS = 3
HERE = os.path.abspath(__file__)


# ------------------------------------------------------------------ ranks

def worker(mode, d, rank, rdzv):
    import torch
    import torch.distributed as dist
    import pmckpt
    from common import same
    from ranks import join_group, state_of

    join_group(rdzv, rank, RANKS)
    store = pmckpt.Store(ramdisk=os.path.join(d, "ramdisk"), shared_dir=os.path.join(d, "shared"),
                         keep=2, name="dist", group=True, threads=1)
    out = sys.stdout
    if mode == "run":
        try:
            store.load()
            first = store.step + 1
        except pmckpt.NoCheckpointError:
            first = 1
        logfd = os.open(os.path.join(d, f"global.{rank}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        for step in range(first, 1 << 30):
            store.save_async(state_of(rank, step), step)
            g = store.global_step  # save_async(step) completed the agreement on step - 1
            if g is not None:
                os.write(logfd, f"{g}\n".encode())
            time.sleep(0.01)  # compute
    elif mode == "recover":
        try:
            sd = store.load()
        except pmckpt.NoCheckpointError as e:
            print(f"rank {rank} none: {e}", file=out, flush=True)
            return
        step = store.step
        why = same(sd, state_of(rank, step))
        print(f"rank {rank} step {step} tier {store.last_recovery['tier']} "
              f"{'ok' if why is None else 'BAD ' + why}", file=out, flush=True)
        store.close()
    elif mode == "settle":
        store.load()
        step = store.step + 1
        store.save(state_of(rank, step), step)
        store.wait_copyout()  # rank 0's copy ends when every rank's file is in (COMPLETE)
        print(f"rank {rank} saved {step}", file=out, flush=True)
        store.close()
    elif mode == "mismatch":
        sd = state_of(rank, 1)
        if rank == 1:
            sd["extra"] = torch.zeros(3)
        store = pmckpt.Store(ramdisk=os.path.join(d, "ramdisk"), name="other", group=True)
        try:
            store.save(sd, 1)
            print(f"rank {rank} mismatch not detected", flush=True)
        except pmckpt.LayoutError as e:
            print(f"rank {rank} mismatch ok: {e}", flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------------ parent

def main():
    from tap import Tap
    T = Tap()
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PMCK_DIST_TRIALS", 6))
    seed = int(os.environ.get("PMCK_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    T.diag(f"seed {seed} (PMCK_TEST_SEED to repeat); {RANKS} ranks, gloo, {trials} kill trials")
    d = T.tmpdir("pmck-py-dist-")
    from ranks import Ranks
    R = Ranks(HERE, d, RANKS)
    launch, last_global, output, recover = R.launch, R.last_global, R.output, R.recover

    bad = 0
    for t in range(1, trials + 1):
        before = last_global()
        procs = launch("run")
        R.wait_checkpointing(procs, before, rng)  # a new global step, then a random moment
        if t % 4 == 0:
            what = "all ranks"
            for p in procs:
                p.send_signal(signal.SIGKILL)
        else:
            victim = rng.randrange(RANKS)
            what = f"rank {victim}"
            procs[victim].send_signal(signal.SIGKILL)
            time.sleep(rng.uniform(0, 0.3))  # the others go on until the launcher stops them
            for p in procs:
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        last = last_global() or 0
        steps, _, text = recover()
        if steps is not None and len(steps) == 1 and min(steps) >= last:
            T.diag(f"trial {t}: killed {what}; last global step {last}, recovered {min(steps)}")
        else:
            bad += 1
            T.diag(f"trial {t}: killed {what}; last global step {last}: recovery FAILED\n{text}")
    T.ok(bad == 0, f"{trials} kill trials: every rank recovered the same step, bit-exact, "
         "never older than the last global step")

    # A replaced node: rank 1's ramdisk store is gone; its data comes from the shared
    # directory.  Right after a kill, the step every rank can produce is the newest one
    # rank 1's copy-out finished, which the other ranks may hold locally or, if recovery
    # discarded the step they had begun over it, only in the shared directory too.
    pool1 = os.path.join(d, "ramdisk", "pmckpt-dist-rank1.pool")
    os.unlink(pool1)
    steps, tiers, text = recover()
    T.ok(steps is not None and len(steps) == 1 and tiers[1] == "shared",
         f"replaced node after a kill: rank 1 loads from the shared directory, all ranks on "
         f"one step ({steps}, tiers {tiers})", text)

    # Once a step is copied out everywhere (a save, then wait_copyout on every rank), a
    # replaced node costs nothing: that step, the others from their local stores.
    text = output(launch("settle"))
    saved = {int(l.split()[3]) for l in text.splitlines() if l.startswith("rank ") and
             l.split()[2] == "saved"}
    os.unlink(pool1)
    steps, tiers, text2 = recover()
    T.ok(len(saved) == 1 and steps == saved and tiers == {0: "local", 1: "shared", 2: "local"},
         f"replaced node after a copied-out step {saved}: rank 1 loads it from the shared "
         f"directory, the others locally ({steps}, tiers {tiers})", text + text2)

    # Different layouts: every rank gets LayoutError (no hang: communicate has a timeout).
    text = output(launch("mismatch"))
    T.ok(text.count("mismatch ok: ") == RANKS and "different layouts" in text,
         "different layouts: every rank gets a clear LayoutError", text)
    return T.done()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.path.insert(0, os.path.dirname(HERE))
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(main())
