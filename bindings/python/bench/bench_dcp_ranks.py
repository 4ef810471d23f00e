# SPDX-License-Identifier: BSD-3-Clause
"""bench_dcp_ranks.py -- DCP on RANKS ranks (gloo on CPU, separate processes):
pmckpt.dcp's StorageWriter/StorageReader against DCP's FileSystemWriter/
Reader, in the same run, on the same sharded state, everything in --dir
(/dev/shm: RAM for both).

The state, per rank: NLAYERS weights of SIZE MB in all, DTensors sharded by
rows (Shard(0)) on a CPU DeviceMesh, a replicated bias each, an int.  pmckpt
stores are Store(name=f"bench-r{rank}", ramdisk=DIR, shared_dir=DIR/shared).

  save: dcp.save, from a barrier to the return on every rank (a barrier).
  async stall: what training waits for: the time dcp.async_save (thread)
      takes to return, plus, for pmckpt with StorageWriter(staging="none")
      (zero copy, "pz"), the time the next optimizer step blocks in
      pmckpt.hook_optimizer.  Between the two, a training step's compute
      (matmuls reading the weights, --batch rows) runs while the save goes
      on.  FileSystemWriter ("fs") and pmckpt with DCP's default stager
      ("pm") copy the state on the training thread and never block the step.
      The future is waited for before the next kind.
      ratio dcp_multirank_async_stall_vs_dcp_fs: pz against fs;
      ..._default_staging_vs_dcp_fs: pm against fs.
  reshard load: dcp.load into the same weights sharded by columns
      (Shard(1)): every rank needs a piece of every saved rank's chunk, read
      by pmckpt from its own store and the other ranks' copy-out files, by
      DCP from the checkpoint directory.
  group reshard: the same load with Store(group=True) stores (a save of
      their own first), each copy-out file's checksums checked by one of the
      ranks that read it, against every rank checking each file it reads
      (alternated): ratio dcp_reshard_shared_checks_vs_each_rank.
Figures are medians over --reps repetitions, timed on rank 0 between
barriers.  The machine may be shared: expect noise."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def worker(args, rank, rdzv):
    import datetime
    import logging
    import warnings
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    import pmckpt
    import pmckpt.dcp
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    torch.set_num_threads(1)
    world = args.ranks
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    mesh = init_device_mesh("cpu", (world,))
    d = int((args.size * 1e6 / 4 / args.layers) ** 0.5) // world * world

    def state(seed, placement):
        g = torch.Generator().manual_seed(seed)
        model = {}
        for i in range(args.layers):
            w = torch.randn(d, d, generator=g)
            rows = d // world
            local = w[rank * rows:(rank + 1) * rows] if placement == 0 else \
                w[:, rank * rows:(rank + 1) * rows]
            model[f"layers.{i}.weight"] = DTensor.from_local(
                local.clone(memory_format=torch.contiguous_format), mesh, [Shard(placement)],
                run_check=False)
            model[f"layers.{i}.bias"] = DTensor.from_local(
                torch.randn(d, generator=g), mesh, [Replicate()], run_check=False)
        return {"model": model, "step": seed}

    def timed(fn):
        dist.barrier()
        t = time.perf_counter()
        r = fn()
        dist.barrier()
        return time.perf_counter() - t, r

    base = args.dir
    store = pmckpt.Store(name=f"bench-r{rank}", ramdisk=os.path.join(base, "ram"),
                         shared_dir=os.path.join(base, "shared"), rank=rank, world_size=world,
                         keep=2)
    src = state(1, 0)
    # a training step after each async_save: forward/backward-like matmuls reading the
    # weights (--batch rows), then an optimizer step updating them in place (SGD, lr=0: the
    # same bits, written all the same).  With staging="none" the optimizer is hooked
    # (pmckpt.hook_optimizer): the time it blocks there is part of the stall.
    local = [v.to_local() for v in src["model"].values()]
    for t in local:
        t.grad = torch.ones_like(t)
    opt_plain = torch.optim.SGD(local, lr=0.0)
    opt_hooked = torch.optim.SGD(local, lr=0.0)
    blocked = [0.0, 0.0]
    opt_hooked.register_step_pre_hook(lambda *a: blocked.__setitem__(0, time.perf_counter()))
    pmckpt.hook_optimizer(opt_hooked, store)
    opt_hooked.register_step_pre_hook(lambda *a: blocked.__setitem__(1, time.perf_counter()))
    x = torch.randn(args.batch, d)
    weights = [t for t in local if t.dim() == 2]

    def compute():
        t = time.perf_counter()
        for w in weights:
            y = x @ w.t()
            (y @ w).sum()
            (y.t() @ x).sum()
        return time.perf_counter() - t

    fig = {k: [] for k in ("fs_save", "pm_save", "fs_stall", "pm_stall", "pz_stall",
                           "pz_return", "pz_hook_wait", "compute", "fs_async_done",
                           "pm_async_done", "pz_async_done", "fs_reshard", "pm_reshard")}
    for rep in range(args.reps + 1):  # the first: warm-up (pool files created), not counted
        fsdir = os.path.join(base, f"fs-{rep}")
        t, _ = timed(lambda: dcp.save(src, storage_writer=dcp.FileSystemWriter(fsdir)))
        fig["fs_save"].append(t)
        t, _ = timed(lambda: dcp.save(src, storage_writer=pmckpt.dcp.StorageWriter(store),
                                      checkpoint_id=10 * rep + 1))
        fig["pm_save"].append(t)
        for kind in ("fs", "pm", "pz"):
            fsa = os.path.join(base, f"fsa-{rep}")
            dist.barrier()
            t0 = time.perf_counter()
            if kind == "pz":  # zero copy: the writer is the stager
                fut = dcp.async_save(src, storage_writer=pmckpt.dcp.StorageWriter(
                    store, staging="none"), checkpoint_id=10 * rep + 3)
            else:
                # the same staging for both (DCP's default stager; FileSystemWriter's own
                # fails on these DTensors in torch 2.15)
                w = dcp.FileSystemWriter(fsa) if kind == "fs" else pmckpt.dcp.StorageWriter(store)
                fut = dcp.async_save(src, storage_writer=w, checkpoint_id=(
                    fsa if kind == "fs" else 10 * rep + 2),
                    async_stager=DefaultStager(StagingOptions(False, False, False, False)))
            ret = time.perf_counter() - t0
            fig["compute"].append(compute())
            if kind == "pz":
                opt_hooked.step()
                wait = blocked[1] - blocked[0]
                fig["pz_return"].append(ret)
                fig["pz_hook_wait"].append(wait)
            else:
                opt_plain.step()
                wait = 0.0
            fut.result()
            done = time.perf_counter() - t0
            dist.barrier()
            fig[f"{kind}_stall"].append(ret + wait)
            fig[f"{kind}_async_done"].append(done)
        store.wait_copyout()  # the copy-out of the newest step: what another rank reads
        dst = state(99, 1)
        t, _ = timed(lambda: dcp.load(dst, storage_reader=dcp.FileSystemReader(fsdir)))
        fig["fs_reshard"].append(t)
        dst = state(98, 1)
        t, _ = timed(lambda: dcp.load(dst, storage_reader=pmckpt.dcp.StorageReader(
            store, step=10 * rep + 2)))
        fig["pm_reshard"].append(t)
        want = state(1, 1)["model"]
        for k, v in dst["model"].items():
            if not torch.equal(v.to_local(), want[k].to_local()):
                raise SystemExit(f"rank {rank}: {k} differs after the pmckpt reshard load")
        for p in (fsdir, os.path.join(base, f"fsa-{rep}")):
            if rank == 0:
                shutil.rmtree(p, ignore_errors=True)
    # Store(group=True): the copy-out files' checks shared by their readers, or not
    gstore = pmckpt.Store(name="benchg", ramdisk=os.path.join(base, "ram"),
                          shared_dir=os.path.join(base, "sharedg"), group=True, keep=2)
    dcp.save(src, storage_writer=pmckpt.dcp.StorageWriter(gstore), checkpoint_id=5)
    gstore.wait_copyout()
    fig["group_shared"], fig["group_each"] = [], []
    for rep in range(args.reps + 1):
        for shared in ((True, False) if rep % 2 else (False, True)):
            reader = pmckpt.dcp.StorageReader(gstore, step=5)
            reader._share_checks = shared
            dst = state(97, 1)
            t, _ = timed(lambda: dcp.load(dst, storage_reader=reader))
            fig["group_shared" if shared else "group_each"].append(t)
    gstore.close()
    if rank == 0:
        med = {k: statistics.median(v[1:] if k != "compute" else v[3:]) for k, v in fig.items()}
        mb = args.size
        print(f"# {world} ranks, {args.layers} layers, {mb:.0f} MB in all "
              f"({mb / world:.1f} MB per rank), {args.reps} repetitions, medians", flush=True)
        for k, v in med.items():
            print(f"bench: dcp_multirank_{k} {v * 1e3:.1f} ms", flush=True)
        print(f"ratio: dcp_multirank_save_time_vs_dcp_fs {med['pm_save'] / med['fs_save']:.3f}")
        print(f"ratio: dcp_multirank_async_stall_vs_dcp_fs "
              f"{med['pz_stall'] / med['fs_stall']:.3f}")
        print(f"ratio: dcp_multirank_async_stall_default_staging_vs_dcp_fs "
              f"{med['pm_stall'] / med['fs_stall']:.3f}")
        print(f"ratio: dcp_reshard_load_time_vs_dcp_fs "
              f"{med['pm_reshard'] / med['fs_reshard']:.3f}", flush=True)
        print(f"ratio: dcp_reshard_shared_checks_vs_each_rank "
              f"{med['group_shared'] / med['group_each']:.3f}", flush=True)
    store.close()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--size", type=float, default=128, help="MB of weights in all")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=7)  # medians: single runs vary 2x on 2 cores
    ap.add_argument("--batch", type=int, default=32,
                    help="rows of the simulated forward/backward after each async_save")
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--worker", type=int, default=None)
    ap.add_argument("--rdzv", default=None)
    args = ap.parse_args()
    if args.worker is not None:
        return worker(args, args.worker, args.rdzv)
    base = tempfile.mkdtemp(prefix="pmck-bench-dcp-ranks-", dir=args.dir)
    try:
        rdzv = os.path.join(base, "rdzv")
        argv = [sys.executable, HERE, "--ranks", str(args.ranks), "--size", str(args.size),
                "--layers", str(args.layers), "--reps", str(args.reps), "--dir", base, "--batch", str(args.batch),
                "--rdzv", rdzv]
        procs = [subprocess.Popen(argv + ["--worker", str(r)]) for r in range(args.ranks)]
        rc = 0
        for p in procs:
            rc = rc or p.wait(timeout=600)
        return rc
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
