# SPDX-License-Identifier: BSD-3-Clause
"""bench_dcp.py -- pmckpt's Python binding against torch.distributed.checkpoint
(DCP) and torch.save/torch.load, one run, the same state_dict for everyone.

The state: ~SIZE MB of CPU tensors shaped like a model with Adam: NLAYERS
fp32 weight matrices with biases, and for each parameter exp_avg, exp_avg_sq
and a step tensor; plus a step number.  Every store, file and directory is
under --dir (/dev/shm: RAM for everyone); torch.save's disk figure goes to
--disk-dir.  Each figure is the minimum over --reps runs (the machine is
shared and noisy; the minimum is the least disturbed run), except memory
(the maximum).

How each figure is measured:
  stall: the time the training loop is blocked per checkpoint.  A loop
      checkpoints, then "computes" (sleeps --compute s, as a CPU waits for
      its GPU), then updates the state in place.  DCP: the time
      dcp.async_save takes to return (it stages a copy of the state, after
      which the state may change at once).  pmckpt: the time save_async takes
      to return plus the time store.wait_for(all tensors) blocks before the
      update (the layer-wise wait; zero once the write has finished).
  time to durable: from the call until the checkpoint is complete and
      durable at its first tier: DCP until the future of async_save resolves
      (its files written and fsync'd, metadata renamed in place); pmckpt
      until handle.wait() returns (all layers persisted and the slot sealed).
  load: a restart's view, each in a new Python process (the time of the
      call alone, imports not counted): pmckpt.Store(...).load() (maps the
      region, verifies every checksum, copies every byte into new tensors)
      against torch.load of the same state from a file in --dir (reads every
      byte into new tensors; neither is lazy).  And in this process
      store.load(into=state) (a new Store object) against dcp.load(state),
      into the same preallocated tensors.
  save: store.save (synchronous: written, durable, sealed) against
      torch.save to a file, flushed and fsync'd, in --dir and in --disk-dir.
      And dcp.save (synchronous) through pmckpt.dcp.StorageWriter into a
      second store, against store.save of the same state (ratio
      dcp_save_pmckpt_vs_store_save, as speed: issue #30 asks the two to
      save at the same bandwidth; what separates them is DCP's planning and
      the writer's own calls, on the CPU as on a GPU); and the same dcp.save
      with DCP's plan caching (DefaultSavePlanner(enable_plan_caching=True))
      into a third store (ratio dcp_save_cached_plan_vs_store_save).
  extra anon memory: the peak of RssAnon (/proc/self/status, sampled every
      0.2 ms by a thread) during an asynchronous save until it is durable,
      minus RssAnon just before, over the state's size.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp

import pmckpt
import pmckpt.dcp


def make_state(size_mb, nlayers):
    # per layer: weight (d x d) + bias (d), each with exp_avg, exp_avg_sq: 3 copies
    per_layer = size_mb * 1e6 / 3 / nlayers / 4
    d = int(per_layer ** 0.5)
    g = torch.Generator().manual_seed(0)
    model, optim = {}, {}
    for i in range(nlayers):
        for name, shape in ((f"layers.{i}.weight", (d, d)), (f"layers.{i}.bias", (d,))):
            p = torch.randn(shape, generator=g)
            model[name] = p
            optim[name] = {"step": torch.tensor(10.0), "exp_avg": torch.randn(shape, generator=g),
                           "exp_avg_sq": torch.rand(shape, generator=g)}
    return {"model": model, "optim": optim, "step": 10}


def tensors_of(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from tensors_of(x)
    elif isinstance(v, torch.Tensor):
        yield v


def nbytes(state):
    return sum(t.numel() * t.element_size() for t in tensors_of(state))


def rss_anon():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class AnonPeak:
    """Samples RssAnon in a thread; .extra is the peak minus the value at start."""

    def __enter__(self):
        self.base = rss_anon()
        self.peak = self.base
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        return self

    def _run(self):
        while not self.stop:
            self.peak = max(self.peak, rss_anon())
            time.sleep(0.0002)

    def __exit__(self, *a):
        self.stop = True
        self.t.join()
        self.peak = max(self.peak, rss_anon())
        self.extra = self.peak - self.base


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def torch_save(state, path):
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def in_new_process(expr):
    """Seconds that `expr` takes in a new Python process (imports not counted):
    a restart's load, into memory that no earlier tensor has used."""
    code = ("import time, torch, pmckpt\n"
            "torch.set_num_threads(%d)\n"
            "t0 = time.perf_counter()\n"
            "x = %s\n"
            "print(time.perf_counter() - t0)\n" % (os.cpu_count() or 1, expr))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(r.stdout.split()[-1])


def update(state):
    for t in tensors_of(state):
        if t.dim():
            t.view(-1)[0] += 1  # in place, like an optimizer step (one element: cheap)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=float, default=500)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--disk-dir", default="/var/tmp")
    ap.add_argument("--compute", type=float, default=1.0)
    a = ap.parse_args()
    warnings.simplefilter("ignore")  # DCP: "assuming a single process"
    torch.set_num_threads(os.cpu_count() or 1)

    state = make_state(a.size_mb, a.layers)
    size = nbytes(state)
    work = tempfile.mkdtemp(prefix="pmck-bench-py-", dir=a.dir)
    disk = tempfile.mkdtemp(prefix="pmck-bench-py-", dir=a.disk_dir)
    name = os.path.basename(work)
    print(f"bench: state {size / 1e6:.1f} MB in {sum(1 for _ in tensors_of(state))} tensors, "
          f"{a.reps} runs each (min), {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"dir {a.dir}, disk {a.disk_dir}", flush=True)
    R = {}

    def rec(key, v, agg=min):
        R[key] = agg(R[key], v) if key in R else v

    store = pmckpt.Store(name=name, ramdisk=work)
    step = 1
    store.save(state, step)  # creates the store (not timed: once per job)
    dstore = pmckpt.Store(name=name + "-dcp", ramdisk=work)  # a DCP checkpoint's layout
    dcp.save(state, storage_writer=pmckpt.dcp.StorageWriter(dstore, step=step))
    # dcp.save with DCP's plan caching, into a store of its own (its first save fills the
    # cache, untimed), where torch has it
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    try:
        cached = lambda: DefaultSavePlanner(enable_plan_caching=True)  # noqa: E731
        cached()
        cstore = pmckpt.Store(name=name + "-dcpc", ramdisk=work)
        dcp.save(state, storage_writer=pmckpt.dcp.StorageWriter(cstore, step=step),
                 planner=cached())
    except TypeError:  # a torch before DCP's plan caching
        cstore = None
    try:
        for rep in range(a.reps):
            # --- synchronous saves
            step += 1
            rec("ours_save", timed(lambda: store.save(state, step))[0])
            rec("ours_dcp_save", timed(lambda: dcp.save(
                state, storage_writer=pmckpt.dcp.StorageWriter(dstore, step=step)))[0])
            if cstore is not None:
                rec("ours_dcp_save_cached_plan", timed(lambda: dcp.save(
                    state, storage_writer=pmckpt.dcp.StorageWriter(cstore, step=step),
                    planner=cached()))[0])
            p = os.path.join(work, "torch.pt")
            rec("torch_save_shm", timed(lambda: torch_save(state, p))[0])
            q = os.path.join(disk, "torch.pt")
            rec("torch_save_disk", timed(lambda: torch_save(state, q))[0])
            os.unlink(q)

            # --- asynchronous: time blocked in the call, and time to durable
            d = os.path.join(work, f"dcp-{rep}")
            with AnonPeak() as m:
                t0 = time.perf_counter()
                fut = dcp.async_save(state, checkpoint_id=d)
                t1 = time.perf_counter()
                fut.result()
                t2 = time.perf_counter()
            rec("dcp_async_call", t1 - t0)
            rec("dcp_async_durable", t2 - t0)
            rec("dcp_anon", m.extra, max)
            step += 1
            with AnonPeak() as m:
                t0 = time.perf_counter()
                h = store.save_async(state, step)
                t1 = time.perf_counter()
                h.wait()
                t2 = time.perf_counter()
            rec("ours_async_call", t1 - t0)
            rec("ours_async_durable", t2 - t0)
            rec("ours_anon", m.extra, max)

            # --- stall in a loop: checkpoint, compute, update in place
            t0 = time.perf_counter()
            fut = dcp.async_save(state, checkpoint_id=d + "-loop")
            stall = time.perf_counter() - t0
            time.sleep(a.compute)
            update(state)
            fut.result()
            rec("dcp_stall", stall)
            step += 1
            t0 = time.perf_counter()
            h = store.save_async(state, step)
            stall = time.perf_counter() - t0
            time.sleep(a.compute)
            t0 = time.perf_counter()
            store.wait_for(tensors_of(state))
            stall += time.perf_counter() - t0
            update(state)
            h.wait()
            rec("ours_stall", stall)
            rec("ours_stall_no_compute", timed(lambda: (store.save_async(state, step + 1),
                                                        store.wait_for(tensors_of(state))))[0])
            step += 1
            store.wait()

            for x in (d, d + "-loop"):
                shutil.rmtree(x, ignore_errors=True)
            os.unlink(p)

        store.close()
        dstore.close()
        if cstore is not None:
            cstore.close()
        p = os.path.join(work, "torch.pt")
        d = os.path.join(work, "dcp")
        torch.save(state, p)
        dcp.save(state, checkpoint_id=d)
        for rep in range(a.reps):
            # --- loads: in a new process (new tensors), and into existing tensors
            rec("torch_load_shm", in_new_process(f"torch.load({p!r})"))
            rec("ours_load", in_new_process(
                f"pmckpt.Store(name={name!r}, ramdisk={work!r}).load()"))
            rec("dcp_load", timed(lambda: dcp.load(state, checkpoint_id=d))[0])
            fresh = pmckpt.Store(name=name, ramdisk=work)
            rec("ours_load_into", timed(lambda: fresh.load(into=state))[0])
            fresh.close()
    finally:
        store.close()
        dstore.close()
        if cstore is not None:
            cstore.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(disk, ignore_errors=True)

    gb = size / 1e9
    print(f"bench: torch_save_shm {R['torch_save_shm']:.3f} s ({gb / R['torch_save_shm']:.2f} GB/s)")
    print(f"bench: torch_save_disk {R['torch_save_disk']:.3f} s ({gb / R['torch_save_disk']:.2f} GB/s)")
    print(f"bench: ours_save {R['ours_save']:.3f} s ({gb / R['ours_save']:.2f} GB/s)")
    print(f"bench: ours_dcp_save {R['ours_dcp_save']:.3f} s ({gb / R['ours_dcp_save']:.2f} GB/s, "
          "dcp.save through pmckpt.dcp.StorageWriter)")
    print(f"bench: dcp_async_save_blocked {R['dcp_async_call']:.4f} s")
    print(f"bench: dcp_async_save_durable {R['dcp_async_durable']:.3f} s")
    print(f"bench: ours_save_async_call {R['ours_async_call']:.6f} s")
    print(f"bench: ours_save_async_durable {R['ours_async_durable']:.3f} s")
    print(f"bench: dcp_stall {R['dcp_stall']:.4f} s (compute {a.compute} s between checkpoint "
          "and update)")
    print(f"bench: ours_stall {R['ours_stall']:.6f} s (same loop)")
    print(f"bench: ours_stall_no_compute {R['ours_stall_no_compute']:.3f} s (update right after "
          "save_async: waits for the whole write)")
    print(f"bench: torch_load_shm {R['torch_load_shm']:.3f} s")
    print(f"bench: dcp_load {R['dcp_load']:.3f} s (into existing tensors)")
    print(f"bench: ours_load {R['ours_load']:.3f} s (new tensors, checksums verified)")
    print(f"bench: ours_load_into {R['ours_load_into']:.3f} s (existing tensors, checksums verified)")
    print(f"bench: ours_extra_anon {R['ours_anon'] / 1e6:.1f} MB")
    print(f"bench: dcp_extra_anon {R['dcp_anon'] / 1e6:.1f} MB")
    print(f"ratio: stall_time_vs_dcp_async_save {R['ours_stall'] / R['dcp_stall']:.4f}")
    print(f"ratio: time_to_durable_vs_dcp_async_save "
          f"{R['ours_async_durable'] / R['dcp_async_durable']:.3f}")
    print(f"ratio: load_time_vs_dcp_load {R['ours_load_into'] / R['dcp_load']:.3f}")
    print(f"ratio: load_time_vs_torch_load_shm {R['ours_load'] / R['torch_load_shm']:.3f}")
    print(f"ratio: save_time_vs_torch_save_disk {R['ours_save'] / R['torch_save_disk']:.3f}")
    print(f"ratio: save_time_vs_torch_save_shm {R['ours_save'] / R['torch_save_shm']:.3f}")
    print(f"ratio: dcp_save_pmckpt_vs_store_save {R['ours_save'] / R['ours_dcp_save']:.3f}")
    if "ours_dcp_save_cached_plan" in R:
        print(f"ratio: dcp_save_cached_plan_vs_store_save "
              f"{R['ours_save'] / R['ours_dcp_save_cached_plan']:.3f}")
    print(f"ratio: extra_anon_memory_vs_state_size {R['ours_anon'] / size:.4f}")
    print(f"bench: dcp_extra_anon_memory_vs_state_size {R['dcp_anon'] / size:.4f}")


if __name__ == "__main__":
    main()
