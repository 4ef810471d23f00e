# SPDX-License-Identifier: BSD-3-Clause
"""bench_partner.py -- partner copies in the Python binding (Store(group=...,
partner=True)) on 4 ranks as 2 "nodes" of this machine (gloo, separate
processes), each node a ramdisk directory of its own under --dir.

  tput: every rank saves --steps checkpoints of --size MB back to back, each
      also sent to its partner on the other node (rounds on the partner
      thread, send/recv over the store's own gloo group).  Against it, in the
      same processes: gloo isend/irecv alone, the same bytes in the same
      4 MiB pieces between the same pairs.
      ratio partner_tput_vs_gloo_sendrecv: partner bytes per second (bytes
      sent over the partner thread's busy time) over gloo's alone.
  restart: node 1 is lost (its directory deleted) after a job saved step S
      with partner copies and also with dcp.save into --shared (the job's
      shared file system: a directory on disk here).
      Then restarts of all 4 ranks, each timed from the launch of the
      processes to the end of the first trained step on every rank:
      pmckpt (Store.load: node 0's ranks from their stores, node 1's from
      their partners, no shared directory) and DCP (dcp.load of step S from
      --shared; node 1's files dropped from the page cache first, as a
      replacement node finds them, node 0's warm; then again all warm).
      Process start, torch import and process-group setup are in both.
      ratio restart_to_first_step_vs_dcp: pmckpt over DCP (node 1 cold);
      restart_load_vs_dcp_load(_warm): the loading phase alone.

One run, 4 processes on the machine's CPUs (2 here): expect noise."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
RANKS = 4
PIECE = 4 << 20


def node_of(rank):
    return rank // 2


def make_state(args, rank, step):
    import torch
    n = args.size * (1 << 20) // 4 // args.layers
    g = torch.Generator().manual_seed(rank * 7919 + step)
    sd = {f"layer{i}.w": torch.rand(n, generator=g) for i in range(args.layers)}
    sd["step"] = step
    return sd


def train_step(sd):
    """A training step's stand-in: some compute, then every weight updated in place."""
    import torch
    a = torch.ones(256, 256)
    for _ in range(20):
        a = a @ a.clamp(max=1.0) / 256
    for k, v in sd.items():
        if k.endswith(".w"):
            v.mul_(0.999).add_(0.001)
    sd["step"] = sd["step"] + 1


def open_store(args, rank, d):
    import pmckpt
    return pmckpt.Store(ramdisk=os.path.join(d, f"node{node_of(rank)}"), name="pb", keep=2,
                        group=True, partner=True, node=node_of(rank), threads=1)


def worker(args, mode, rank, rdzv):
    t_start = time.time()
    import datetime
    import logging
    import warnings
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import pmckpt  # noqa: F401 -- at start-up, with torch, as a training script imports it

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=RANKS,
                            timeout=datetime.timedelta(seconds=300))
    d = args.dir
    t_ready = time.time()  # imported, process group up
    if mode == "tput":
        store = open_store(args, rank, d)
        sd = make_state(args, rank, 0)
        for step in range(1, args.steps + 1):
            store.save(sd, step)
        store.wait()
        st = store.stats()["partner"]
        nbytes = st["bytes_sent"]
        busy = st["busy_ns"] / 1e9
        # gloo alone: the same bytes, the same pieces, the same pairs, a group of its own
        from pmckpt.distributed import partner_group
        pg = partner_group(dist.group.WORLD)
        buf = torch.empty(PIECE, dtype=torch.uint8)
        out = torch.ones(PIECE, dtype=torch.uint8)
        dist.barrier()
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            n = min(PIECE, left)
            works = [dist.isend(out[:n], st["target"], group=pg),
                     dist.irecv(buf[:n], st["source"], group=pg)]
            for w in works:
                w.wait()
            left -= n
        raw = time.perf_counter() - t0
        print(f"rank {rank} tput {nbytes} {busy:.6f} {raw:.6f} {st['rounds']}", flush=True)
        store.close()
    elif mode == "prep":
        store = open_store(args, rank, d)
        sd = make_state(args, rank, 0)
        for step in range(1, args.steps + 1):
            train_step(sd)
            store.save(sd, sd["step"])
        dcp.save(sd, checkpoint_id=os.path.join(args.shared, f"step-{sd['step']}"))
        store.close()
        print(f"rank {rank} prep {sd['step']}", flush=True)
    elif mode == "restart-pmckpt":
        store = open_store(args, rank, d)
        sd = store.load()
        t_loaded = time.time()
        tier = store.last_recovery["tier"]
        train_step(sd)
        print(f"rank {rank} first {time.time():.6f} {t_start:.6f} {sd['step']} {tier} "
              f"{t_ready:.6f} {t_loaded:.6f}", flush=True)
        store.close()
    elif mode == "restart-dcp":
        sd = make_state(args, rank, 0)  # the model as built at start-up, then loaded into
        dcp.load(sd, checkpoint_id=os.path.join(args.shared, f"step-{args.steps}"))
        t_loaded = time.time()
        train_step(sd)
        print(f"rank {rank} first {time.time():.6f} {t_start:.6f} {sd['step']} shared "
              f"{t_ready:.6f} {t_loaded:.6f}", flush=True)
    dist.destroy_process_group()


def phases(lines, t0):
    """The slowest rank's seconds from launch to its process group up (start: interpreter,
    imports, gloo), from there to its state loaded (load), and to its first step's end (step)."""
    first, ready, loaded = ([float(l[i]) for l in lines] for i in (3, 7, 8))
    return (max(r - t0 for r in ready), max(d - r for r, d in zip(ready, loaded)),
            max(f - d for d, f in zip(loaded, first)))


def evict(ckpt_dir, ranks):
    """Drops the files DCP's FileSystemWriter wrote for `ranks` (__R_*.distcp) from the
    page cache: written and fsynced, their pages are clean."""
    for f in os.listdir(ckpt_dir):
        if any(f.startswith(f"__{r}_") for r in ranks):
            fd = os.open(os.path.join(ckpt_dir, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def launch(args, mode, n):
    rdzv = os.path.join(args.dir, f"rdzv.{n}")
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, HERE, "--worker", mode, str(r), rdzv,
                               "--dir", args.dir, "--shared", args.shared, "--size",
                               str(args.size), "--layers", str(args.layers), "--steps",
                               str(args.steps)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(RANKS)]
    lines = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        text = out.decode(errors="replace")
        if p.returncode:
            sys.exit(f"bench_partner: {mode}: a rank failed:\n{text}")
        lines += [l.split() for l in text.splitlines() if l.startswith("rank ")]
    return t0, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64, help="MB per rank (default 64)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--dir", default=None, help="parent of the nodes' ramdisks (/dev/shm)")
    ap.add_argument("--shared", default=None, help="the shared FS for DCP (a disk directory)")
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "RANK", "RDZV"))
    args = ap.parse_args()
    if args.worker:
        worker(args, args.worker[0], int(args.worker[1]), args.worker[2])
        return 0
    made = []
    if args.dir is None:
        args.dir = tempfile.mkdtemp(prefix="pmck-partnerbench.", dir="/dev/shm")
        made.append(args.dir)
    if args.shared is None:
        args.shared = tempfile.mkdtemp(prefix="pmck-partnerbench-shared.", dir="/var/tmp")
        made.append(args.shared)
    try:
        print(f"bench: partner_size_per_rank {args.size} MB")
        _, lines = launch(args, "tput", 1)
        rates = [(int(l[3]) / float(l[4]), int(l[3]) / float(l[5])) for l in lines]
        ours = sum(r[0] for r in rates) / len(rates)
        gloo = sum(r[1] for r in rates) / len(rates)
        print(f"bench: partner_tput_gloo {ours / 1e9:.3f} GB/s")
        print(f"bench: gloo_sendrecv_tput {gloo / 1e9:.3f} GB/s")
        print(f"ratio: partner_tput_vs_gloo_sendrecv {ours / gloo:.4f}")

        for sub in os.listdir(args.dir):
            shutil.rmtree(os.path.join(args.dir, sub), ignore_errors=True)
        launch(args, "prep", 2)
        shutil.rmtree(os.path.join(args.dir, "node1"))  # node 1 lost
        t0, lines = launch(args, "restart-pmckpt", 3)
        tiers = {int(l[1]): l[6] for l in lines}
        steps = {int(l[5]) for l in lines}
        if steps != {args.steps + 1} or tiers[2] != "partner" or tiers[3] != "partner":
            sys.exit(f"bench_partner: the restart did not resume step {args.steps} from the "
                     f"partners: {lines}")
        ours = max(float(l[3]) for l in lines) - t0
        ours_parts = phases(lines, t0)
        # DCP from --shared: node 1's files cold (a replacement node's page cache holds
        # none of them; node 0's stay warm), then all warm.
        evict(os.path.join(args.shared, f"step-{args.steps}"), ranks=(2, 3))
        t0, lines = launch(args, "restart-dcp", 4)
        theirs = max(float(l[3]) for l in lines) - t0
        theirs_parts = phases(lines, t0)
        t0, lines = launch(args, "restart-dcp", 5)
        warm = max(float(l[3]) for l in lines) - t0
        warm_parts = phases(lines, t0)
        print(f"bench: restart_to_first_step_pmckpt_partner {ours:.3f} s")
        print(f"bench: restart_to_first_step_dcp_shared {theirs:.3f} s")
        print(f"bench: restart_to_first_step_dcp_shared_warm {warm:.3f} s")
        for name, a, b, c in zip(("start", "load", "step"), ours_parts, theirs_parts, warm_parts):
            print(f"bench: restart_{name}_pmckpt_partner {a:.3f} s")
            print(f"bench: restart_{name}_dcp_shared {b:.3f} s")
            print(f"bench: restart_{name}_dcp_shared_warm {c:.3f} s")
        print(f"ratio: restart_to_first_step_vs_dcp {ours / theirs:.4f}")
        print(f"ratio: restart_load_vs_dcp_load {ours_parts[1] / theirs_parts[1]:.4f}")
        print(f"ratio: restart_load_vs_dcp_load_warm {ours_parts[1] / warm_parts[1]:.4f}")
    finally:
        for m in made:
            shutil.rmtree(m, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
