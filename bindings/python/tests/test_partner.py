# SPDX-License-Identifier: BSD-3-Clause
"""Partner copies over torch.distributed (gloo): 4 processes as 2 "nodes" of
this machine (ranks 0, 1 and 2, 3), each node a ramdisk directory of its own,
no shared directory, Store(..., group=True, partner=True, node=rank // 2).

Kill trials: the ranks checkpoint every step with save_async; the parent
kills one node's ranks with SIGKILL at a random moment (then, as a launcher
would, the others), deletes that node's directory (its stores and the
copies it held for the other node) and starts 4 new ranks: every rank must
load the same step, bit-exact, never older than the newest step any rank
logged as global, the lost node's ranks from their partners (no store of
their own: they take the layout from another rank).  Then a rank and the
rank holding its copy lost together: every rank fails with a message that
names both.  Last, partner_every=3: steps 1..9 saved (copies of 1, 4, 7), a
node lost: every rank back on step 7, the survivors from their own copies.

Usage: test_partner.py [TRIALS]  (default $PMCK_PARTNER_TRIALS or 4).
Internally: test_partner.py --worker MODE DIR RANK RDZV."""
import os
import random
import shutil
import signal
import sys
import time

RANKS = 4
HERE = os.path.abspath(__file__)


def node_of(rank):
    return rank // 2


# ------------------------------------------------------------------ ranks

def worker(mode, d, rank, rdzv):
    import torch
    import torch.distributed as dist
    import pmckpt
    from common import same
    from ranks import join_group, state_of

    join_group(rdzv, rank, RANKS)
    if mode == "nccl-refused":  # partner_transport="nccl" where torch sees no CUDA device
        try:
            pmckpt.Store(ramdisk=os.path.join(d, f"node{node_of(rank)}"), name="nccl",
                         group=True, partner=True, node=node_of(rank),
                         partner_transport="nccl")
            print(f"rank {rank} accepted", flush=True)
        except ValueError as e:
            print(f"rank {rank} refused: {e}", flush=True)
        dist.destroy_process_group()
        return
    staged = mode.startswith("staged-")
    if staged:
        # NCCL's path (each piece staged through a device buffer) on the CPU over gloo:
        # the partner group's send/recv go through TorchCollectives' staging buffers.
        from pmckpt import distributed as pd
        init = pd.TorchCollectives.__init__

        def staged_init(self, group, p2p_group=None, p2p_device=None):
            init(self, group, p2p_group, torch.device("cpu") if p2p_group is not None else None)
        pd.TorchCollectives.__init__ = staged_init
        mode = mode[len("staged-"):]
    every = 3 if mode.startswith("every-") else 1
    store = pmckpt.Store(ramdisk=os.path.join(d, f"node{node_of(rank)}"), keep=2, name="pt",
                         group=True, partner=True, node=node_of(rank), threads=1,
                         partner_every=every)
    mode = mode[len("every-"):] if every > 1 else mode
    out = sys.stdout
    if mode == "save9":
        for step in range(1, 10):
            store.save(state_of(rank, step), step)
        st = store.stats()["partner"]
        print(f"rank {rank} sent {st['sent']} confirmed {st['confirmed_step']} own "
              f"{st['self_step']}" + (f" staged {store._coll._stage[0] is not None}"
                                       if staged else ""), file=out, flush=True)
        store.close()
    elif mode == "run":
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
        except pmckpt.Error as e:
            print(f"rank {rank} none: {type(e).__name__}: {e}", file=out, flush=True)
            return
        step = store.step
        why = same(sd, state_of(rank, step))
        tier = store.last_recovery["tier"]
        tier = "own" if "own copy" in store.last_recovery["reason"] else tier
        print(f"rank {rank} step {step} tier {tier} "
              f"{'ok' if why is None else 'BAD ' + why}" +
              (f" staged {store._coll._stage[1] is not None}" if staged else ""),
              file=out, flush=True)
        store.close()
    dist.destroy_process_group()


# ------------------------------------------------------------------ parent

def main():
    from tap import Tap
    T = Tap()
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PMCK_PARTNER_TRIALS", 4))
    seed = int(os.environ.get("PMCK_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    T.diag(f"seed {seed} (PMCK_TEST_SEED to repeat); {RANKS} ranks as 2 nodes, gloo, "
           f"{trials} kill trials, no shared directory")
    d = T.tmpdir("pmck-py-partner-")
    from ranks import Ranks
    R = Ranks(HERE, d, RANKS)
    launch, last_global, output, recover = R.launch, R.last_global, R.output, R.recover

    def lose_node(n):
        shutil.rmtree(os.path.join(d, f"node{n}"), ignore_errors=True)

    bad = 0
    from_partner = 0
    for t in range(1, trials + 1):
        before = last_global()
        procs = launch("run")
        R.wait_checkpointing(procs, before, rng)  # a new global step, then a random moment
        lost = t % 2
        for r in range(RANKS):
            if node_of(r) == lost:
                procs[r].send_signal(signal.SIGKILL)
        time.sleep(rng.uniform(0, 0.3))  # the others go on until the launcher stops them
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        lose_node(lost)
        last = last_global() or 0
        steps, tiers, text = recover()
        lost_ranks = [r for r in range(RANKS) if node_of(r) == lost]
        if steps is not None and len(steps) == 1 and min(steps) >= last and \
                all(tiers[r] == "partner" for r in lost_ranks) and \
                all(tiers[r] == "local" for r in range(RANKS) if r not in lost_ranks):
            from_partner += 1
            T.diag(f"trial {t}: node {lost} lost; last global step {last}, every rank "
                   f"recovered {min(steps)}, ranks {lost_ranks} from their partners")
        else:
            bad += 1
            T.diag(f"trial {t}: node {lost} lost; last global step {last}: recovery FAILED\n{text}")
    T.ok(bad == 0, f"{trials} kill trials: node's ranks killed, its directory deleted, every "
         "rank recovered the same step, bit-exact, never older than the last global step, the "
         "lost node's ranks from their partners, no shared directory")

    # Rank 2 and the rank holding its copy (rank 0) lost together: refused, naming both.
    lose_node(1)
    os.unlink(os.path.join(d, "node0", "pmckpt-pt-rank0.partner-of-2.pool"))
    text = output(launch("recover"))
    named = [l for l in text.splitlines() if l.startswith("rank ") and " none: " in l and
             "rank 2 lost both" in l and "held by rank 0" in l]
    T.ok(len(named) == RANKS, "rank 2 and its partner's copy lost, no shared directory: every "
         "rank refuses, naming both", text)

    def fresh_job(prefix, lost):
        """A fresh job of `prefix` modes: steps 1..9 saved, node `lost` lost, every rank
        restarted: (what the saves printed, what the recovery printed)."""
        lose_node(0)
        lose_node(1)
        saved = output(launch(f"{prefix}-save9"))
        lose_node(lost)
        return saved, output(launch(f"{prefix}-recover"))

    # partner_every=3, a fresh job: steps 1..9 saved, 1, 4 and 7 copied; node 0 lost.
    text, recovered = fresh_job("every", 0)
    T.ok(all(f"rank {r} sent 3 confirmed 7 own 7" in text for r in range(RANKS)),
         "partner_every=3: steps 1..9 saved, steps 1, 4, 7 copied and kept as own copies", text)
    want = [f"rank {r} step 7 tier {'partner' if node_of(r) == 0 else 'own'} ok"
            for r in range(RANKS)]
    T.ok(all(w in recovered for w in want), "partner_every=3, node 0 lost: every rank on step "
         "7, the last copied step, bit-exact: node 0's ranks from their partners, node 1's from "
         "their own copies (their slots hold 8 and 9)", recovered)

    # NCCL's staged path, run over gloo with host staging buffers: steps 1..9, node 1 lost.
    text, recovered = fresh_job("staged", 1)
    # (the round of step 9 may still run when the stats are read: 8 or 9)
    T.ok(all(f"rank {r} sent 9 confirmed 9 own -1 staged True" in text or
             f"rank {r} sent 8 confirmed 8 own -1 staged True" in text for r in range(RANKS)),
         "staged send/recv (partner_transport='nccl''s path, over gloo on the CPU): steps 1..9 "
         "saved, each copied through the staging buffers", text)
    want = [f"rank {r} step 9 tier {'partner' if node_of(r) == 1 else 'local'} ok staged True"
            for r in range(RANKS)]
    T.ok(all(w in recovered for w in want), "staged send/recv, node 1 lost: every rank on step "
         "9, bit-exact, node 1's ranks from their partners through the staging buffers",
         recovered)
    text = output(launch("nccl-refused"))
    T.ok(all(f"rank {r} refused: partner_transport='nccl'" in text for r in range(RANKS)),
         "partner_transport='nccl' without a CUDA device: refused on every rank, saying why",
         text)
    return T.done()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.path.insert(0, os.path.dirname(HERE))
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(main())
