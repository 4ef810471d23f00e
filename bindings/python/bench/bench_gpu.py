# SPDX-License-Identifier: BSD-3-Clause
"""bench_gpu.py -- the GPU figures of issue #30, each against a baseline measured
in the same run (`make bench-gpu`; `make bench` runs it too and it says why it
skips where there is no GPU):

  ratio: gpu_save_durable_vs_pinned_d2h   Store.save of a CUDA state (call to
          durable in the store) against a pinned D2H of the same bytes, as
          bandwidth (goal >= 0.9): the faster of the tensors copied one by one
          and of one copy of as many bytes
  ratio: gpu_load_into_vs_pinned_h2d      Store.load(into=) the same CUDA tensors,
          verified, against a pinned H2D of them, the faster of the same two
          (goal >= 0.8); and gpu_load_into_gpu_verify_vs_cpu_verify, that load
          (its copies verified on the GPU where they landed: pmck_gpu_hasher,
          pmck_store_recover_given) against the same load with the CPU hashing
          the slot in the region (Store._verify_copies False, the way before
          2026-11-27's last session), the two in turn, as speed
  ratio: gpu_load_new_vs_pinned_h2d       Store.load() of the same state into new
          CUDA tensors (a restart onto the GPU), verified, against the same
          baseline; and gpu_load_new_early_vs_after_verify, the same load with
          its copies started while the CPU verifies the slot (the default)
          against the copies after verification (Store._early_load "never"),
          the two in turn, as speed
  ratio: gpu_save_default_vs_host_hash    the same Store.save with the defaults
          (the GPU hashes the sources, Store(gpu_hash="device"), and the writers,
          4, only flush) against the writers hashing on the host
          (gpu_hash="host", and so 12 of them: the defaults until 2026-11-28),
          as speed (above 1: faster); --threads sets both counts; also
          gpu_save_durable_host_hash_vs_pinned_d2h
  ratio: gpu_save_threads{N}_vs_default   the same Store.save with N writer
          threads (--alt-threads, default 12) against the store's default
          count (--threads), as speed: 12 was the default with the host's
          hashing, 4 is with the GPU's (H200, 2026-11-28: 0.936-0.937 of pinned
          D2H against 0.940)
  ratio: gpu_stall_vs_dcp_async           the time save_async blocks the caller,
          against dcp.async_save's (the training thread's stall)
  ratio: gpu_dcp_save_vs_store_save       dcp.save (synchronous) of the same CUDA
          state through pmckpt.dcp.StorageWriter into the same store, against
          Store.save, as speed (goal: the same bandwidth, 1.0); and
          gpu_dcp_save_pmckpt_vs_filesystem, the same call against dcp.save's own
          FileSystemWriter into a directory on the same tmpfs; and
          gpu_dcp_save_cached_plan_vs_store_save, dcp.save with DCP's plan caching
          (DefaultSavePlanner(enable_plan_caching=True): the plans of the first
          save reused), where torch has it; and gpu_dcp_save_nested_vs_store_save,
          dcp.save of the same tensors under one key ({"state": state}, as a
          training state holds a model's state_dict) into a store of its own:
          dcp.save's own work is per key of the dict it is given (a Stateful check
          and two records of its debug log each: on the development VM, for 128
          small tensors keyed as this state's, 11.5 ms, 7.3 under one key,
          Store.save 0.8; on an H200 with this state, 0.821 against 0.830); and
          gpu_dcp_save_vs_store_save_plus_dcp_own_work, Store.save's time plus
          that of dcp.save through a writer that writes nothing (bench:
          gpu_dcp_own_work: DCP's own work) against dcp.save through the store:
          1 when pmckpt.dcp.StorageWriter adds nothing to Store.save but DCP's
          own work
  ratio: save_async_call_vs_without_memo  the save_async call of a state shaped
          like GPT-2 medium's with AdamW (1172 small tensors), against the same
          call without the store's memo of its previous save (call_cost); and
          load_into_call_vs_without_memo, load(into=) of that state, the same way;
          and load_into_call_vs_copies_after_verify, that load against the same
          one copying each tensor after verification (Store._early_load "never");
          gradlog_{state,record}_call_vs_without_memo, GradientLog.save_async
          of that state after each optimizer step, a whole state and a record
          in turn, against the same calls without the stores' memos
  ratio: gpu_train_every_step_vs_none_b32, _b8, gpu_train_every10_vs_none_b8,
         gpu_train_every_step_vs_dcp_async_every_step,
         gpu_train_{snapshot,queue,queue_snapshot}_every{_step,10}_vs_none_b8
         (Store(gpu_source="snapshot"), Store(on_busy="queue")),
         gpu_train_device_hash_* (pmdh, pmqsnapdh),
         gpu_train_{,queue_}snapshot_on_wait_* (pmsow, pmqsow: Store(
         gpu_snapshot_on_wait=True)),
         gpu_train_gradlog_{,snapshot_,queue_snapshot_}every_step_vs_none_b8
         and gpu_train_gradlog_{,snapshot_}every_step_vs_whole_states_b8
         (pmgl, pmglsnap, pmglqsnap: pmckpt.GradientLog, a whole state and
         the next step's gradients in turn),
         gpu_train_background_copies_vs_none_b8 where --b8 names bgcopy (no
         checkpoints: device-to-host copies as fast as they go, the traffic's own
         cost to training, its GPU forward+backward in the cost line),
         gpu_train_background_copies_Ngbps_vs_{none,full}_b8 where --b8 names
         bgcopyN (the same copies paced to about N GB/s),
         gpu_train_background_wait_kernel_vs_none_b8 where --b8 names bgwait
         (bgcopyN's wait kernels alone, without copies),
         gpu_train_gradlog_kN_..._every_step_vs_{none,k1}_b8 where --b8 names
         pmglqsnapkN_every1 and the like (chains of N records after each whole
         state)
                                               from bench_train.py
          --device cuda (GPT-2 medium), its per-step cost lines passed through

ratio: gpu_load_verify_vs_early_copies says which part of load(into=) bounds
it: recovery (bench: gpu_load_verify: the CPU's hashing of what the GPU does
not verify, then its wait for the copies' checksums), or the copies that cross
meanwhile (bench: gpu_load_early_copies, GPU time); above 1 the CPU is the
bound (LoadPhases).  With the copies verified on the GPU, recovery waits for them.  bench: gpu_load_before_early_copies
and gpu_load_after_verify time the load's two ends around them (wall time): what the
load spends beyond the longer of the two.

bench: gpu_train_every_step_pcie_bound_b8 says what PCIe allows checkpointing
every step: a step's time without checkpoints (gpu_train_step_none_b8) against
the state's crossing at the pinned D2H speed measured above
(gpu_train_state_d2h_b8).  gpu_train_gradlog_every_step_pcie_bound_b8 the same
for GradientLog, whose state and gradient record cross once every two steps
(gpu_train_gradlog_kN_every_step_pcie_bound_b8: a state and N records every N + 1
steps, for each chain length --b8 names).

Each figure is the median of --reps repetitions (the training ratios: of
--train-reps, 10 measured steps after 3 of warm-up each: the every-10
configurations checkpoint once in them, the every-step ones 10 times).
--device cpu runs the same code on host tensors (with unpinned baselines): a
dry run of the script, not a figure.  Usage: bench_gpu.py [--mb N] [--reps N]
[--train-reps N] [--call-reps N] [--threads N] [--alt-threads N] [--no-train] [--device D]
[--b32 CONFIGS] [--b8 CONFIGS]"""
import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

import pmckpt
import pmckpt.dcp  # noqa: F401  (pmckpt.dcp.StorageWriter)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_train  # noqa: E402  (the training benchmark, its model and helpers)


def state(mb, dev):
    """About `mb` MB of fp32 tensors shaped like a transformer's (a few large, many small)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    out, left, i = {}, mb << 20, 0
    while left > 0:
        n = min(left // 4, (4 << 20) if i % 3 else (16 << 20))
        n = max(n, 1024)
        out[f"t{i}"] = torch.randn(n, generator=g).to(dev)
        out[f"b{i}"] = torch.randn(1024, generator=g).to(dev)
        left -= 4 * (n + 1024)
        i += 1
    return out


class NullWriter(StorageWriter):
    """A DCP StorageWriter that writes nothing: dcp.save through it times DCP's own work
    (the Stateful checks, planning, its logging, each item's resolve_data), the part of
    dcp.save through pmckpt.dcp.StorageWriter that is not the store's."""

    def reset(self, checkpoint_id=None):
        pass

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        for item in plan.items:
            planner.resolve_data(item)
        fut = Future()
        fut.set_result([WriteResult(index=item.index, size_in_bytes=0, storage_data=None)
                        for item in plan.items])
        return fut

    def finish(self, metadata, results):
        pass

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False

    def storage_meta(self):
        return None


def _text(b):
    """A TimeoutExpired's captured output (bytes, whatever text= said) as text."""
    return b.decode(errors="replace") if isinstance(b, bytes) else b or ""


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev):
    sync(dev)
    t0 = time.perf_counter()
    fn()
    sync(dev)
    return time.perf_counter() - t0


class LoadPhases:
    """Times the two parts of Store.load(into=) that overlap, inside the timed
    loads: the copies started before verification (_start_early_copies: GPU
    time between events recorded around their enqueueing, on the current
    stream, idle before each timed load) and recovery's verification of the
    slot on the CPU (_recover: wall time).  The load takes about the longer
    of the two plus the rest (the metadata, the copy out of the scratch
    buffer): which one bounds it is what the ratio of the two says.  Also
    the two ends of the load, wall time: from its call until the early
    copies begin (into='s encoding), and from the end of verification
    until it returns, its copies waited for (the metadata, the copy out of
    the scratch buffer, early copies not yet landed).  Wraps the store's
    load and private methods, as call_cost drops its memo: this benchmark's
    only uses of them."""

    def __init__(self, store, dev):
        self.verify, self.copies, self.setup, self._events = [], [], [], []
        self.before, self.after, self._marks = [], [], {}
        self.on = False
        load, recover, early = store.load, store._recover, store._start_early_copies

        def timed_load(*args, **kw):
            if not self.on:
                return load(*args, **kw)
            m = self._marks = {"start": time.perf_counter()}
            out = load(*args, **kw)
            sync(dev)
            m["end"] = time.perf_counter()
            if "early" in m:
                self.before.append(m["early"] - m["start"])
            if "verified" in m:
                self.after.append(m["end"] - m["verified"])
            return out

        def timed_recover(*args):  # fresh buffers (a load into new tensors), if any
            t0 = time.perf_counter()
            try:
                return recover(*args)
            finally:
                if self.on:
                    self._marks["verified"] = time.perf_counter()
                    self.verify.append(self._marks["verified"] - t0)

        def timed_early(targets, **kw):
            if not self.on or dev.type != "cuda":
                return early(targets, **kw)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            t0 = self._marks["early"] = time.perf_counter()
            out = early(targets, **kw)
            e1.record()
            if out is not None:  # None: the load copies after verification, as before
                self._events.append((e0, e1))
                # the host's part (lookups, the scratch buffer), which the GPU time includes
                self.setup.append(time.perf_counter() - t0)
            return out

        store.load, store._recover, store._start_early_copies = \
            timed_load, timed_recover, timed_early

    def report(self):
        if self._events:
            torch.cuda.synchronize()
        self.copies = [e0.elapsed_time(e1) / 1e3 for e0, e1 in self._events]
        med = statistics.median
        if self.verify:
            print(f"bench: gpu_load_verify {med(self.verify) * 1e3:.2f} ms")
        if self.copies:
            print(f"bench: gpu_load_early_copies {med(self.copies) * 1e3:.2f} ms "
                  f"(of which the host's setup, until the last copy was queued: "
                  f"{med(self.setup) * 1e3:.2f} ms)")
        if self.verify and self.copies:
            print(f"ratio: gpu_load_verify_vs_early_copies "
                  f"{med(self.verify) / med(self.copies):.3f}")
        if self.before:
            print(f"bench: gpu_load_before_early_copies {med(self.before) * 1e3:.2f} ms "
                  "(into='s encoding, until the early copies begin)")
        if self.after:
            print(f"bench: gpu_load_after_verify {med(self.after) * 1e3:.2f} ms (from the end "
                  "of verification until the load returns, its copies waited for)")


def call_cost(dev, a):
    """The save_async call for a state shaped like GPT-2 medium's with AdamW (24
    blocks: 1172 tensors, ~4500 values; small tensors, so that the call is what
    is timed), against the same call without the memo of the store's previous
    save (Flattener(memo=): a tensor at the same key path with the same address,
    shape, strides, dtype and device is declared as then).  The baseline is made
    by dropping the store's memo before the call (a private attribute: this
    benchmark's only use of one); the two alternate, each call's checkpoint
    waited for outside the timing."""
    torch.manual_seed(0)
    model = bench_train.GPT(1024, 64, 64, 24, 4).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=3e-4, foreach=True)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    st = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 1}
    ntensors = sum(1 for _ in bench_train.pmckpt_tensors(st))
    d = tempfile.mkdtemp(prefix="pmck-bench-call-", dir=a.shm)
    memo, cold, load_memo, load_cold, load_late = [], [], [], [], []
    try:
        with pmckpt.Store(name="bench-call", ramdisk=d) as s:
            s.save(st, 1)
            for i in range(2, 2 + 2 * a.call_reps):
                forget = i % 2 == 1
                if forget:
                    s._memo = None
                sync(dev)
                t0 = time.perf_counter()
                h = s.save_async(st, i)
                (cold if forget else memo).append(time.perf_counter() - t0)
                h.wait()
            # load(into=) of the same state: into='s walk with the memo, and without it
            kept = s._memo
            for i in range(2 * a.call_reps):
                s._memo = None if i % 2 else kept
                (load_cold if i % 2 else load_memo).append(timed(lambda: s.load(into=st), dev))
            s._memo = kept
            # and with the copies after verification, one per tensor (Store._early_load
            # "never"; the default copies these many small tensors early, _EARLY_MANY)
            early_bytes = s.last_recovery.get("early_bytes", 0)
            s._early_load = "never"
            for i in range(a.call_reps):
                load_late.append(timed(lambda: s.load(into=st), dev))
            s._early_load = "auto"
        gl_calls = gradlog_calls(model, opt, st, d, a.call_reps)
    finally:
        subprocess.run(["rm", "-rf", d])
    med = statistics.median
    print(f"bench: save_async_call_{ntensors}_tensors {med(memo) * 1e3:.2f} ms")
    print(f"bench: save_async_call_{ntensors}_tensors_without_memo {med(cold) * 1e3:.2f} ms")
    print(f"ratio: save_async_call_vs_without_memo {med(memo) / med(cold):.3f}")
    print(f"bench: load_into_call_{ntensors}_tensors {med(load_memo) * 1e3:.2f} ms")
    print(f"bench: load_into_call_{ntensors}_tensors_without_memo {med(load_cold) * 1e3:.2f} ms")
    print(f"ratio: load_into_call_vs_without_memo {med(load_memo) / med(load_cold):.3f}")
    print(f"bench: load_into_call_{ntensors}_tensors_copies_after_verify "
          f"{med(load_late) * 1e3:.2f} ms (the default's: {early_bytes} bytes crossed early)")
    print(f"ratio: load_into_call_vs_copies_after_verify {med(load_memo) / med(load_late):.3f}")
    for kind in ("state", "record"):
        memo, cold = (med(gl_calls[kind, forget]) for forget in (False, True))
        print(f"bench: gradlog_{kind}_call_{ntensors}_tensors {memo * 1e3:.2f} ms")
        print(f"bench: gradlog_{kind}_call_{ntensors}_tensors_without_memo {cold * 1e3:.2f} ms")
        print(f"ratio: gradlog_{kind}_call_vs_without_memo {memo / cold:.3f}")


def gradlog_calls(model, opt, st, d, reps):
    """GradientLog.save_async of call_cost's state after each optimizer step, a
    whole state and a record (the step's 293 gradients, new tensors each time)
    in turn, against the same calls without the stores' memos of their
    previous saves (dropped before every other pair of calls; the stores'
    private attribute, as call_cost's).  {(kind, without memo): [seconds, ...]}."""
    out = {(k, f): [] for k in ("state", "record") for f in (False, True)}
    with pmckpt.GradientLog(opt, name="bench-call-gl", ramdisk=d) as gl:
        for i in range(2 + 4 * reps):
            forget = i // 2 % 2 == 1
            if forget and i % 2 == 0:  # (before a pair: the state's store's memo is then
                gl.store._memo = gl.records._memo = None  # the next pair's)
            for p in model.parameters():
                p.grad = torch.randn_like(p)
            opt.step()
            st["optim"] = opt.state_dict()
            t0 = time.perf_counter()
            h = gl.save_async(st, i + 2)
            took = time.perf_counter() - t0
            h.wait()
            if i >= 2:  # the first pair fills the memos
                out[h.kind, forget].append(took)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--threads", type=int, default=0,
                    help="the stores' writer threads (Store(threads=); 0: its default)")
    ap.add_argument("--alt-threads", type=int, default=12,
                    help="a third store's writer threads, saved in turn with the others "
                         "(0: none)")
    ap.add_argument("--call-reps", type=int, default=20,
                    help="save_async calls timed with the store's memo and as many without")
    ap.add_argument("--train-reps", type=int, default=2,
                    help="bench_train.py's repetitions (DCP every step takes ~5 s a step at "
                         "batch 8 on an H100)")
    ap.add_argument("--train-timeout", type=int, default=300,
                    help="seconds for each batch's bench_train.py run: what it printed by "
                         "then is still reported")
    ap.add_argument("--shm", default="/dev/shm")
    ap.add_argument("--b32", default="none,pm_every1",
                    help="bench_train.py configurations at batch 32 (--b32= for none)")
    ap.add_argument("--b8", default="none,pm_every1,pm_every10,pmsnap_every1,pmsnap_every10,"
                    "pmq_every1,pmqsnap_every1,pmqsnap_every10,pmgl_every1,pmglsnap_every1,"
                    "pmglqsnap_every1,dcp_every1",
                    help="bench_train.py configurations at batch 8")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("bench: gpu skipped: torch sees no CUDA device")
            return 0
        if not pmckpt.gpu_available(dev.index or 0):
            print(f"bench: gpu skipped: {pmckpt.gpu_unavailable_reason(dev.index or 0)}")
            return 0
        print(f"# {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
              f"{pmckpt.library_path}")
    if os.environ.get("PMCK_GPU_HASH"):
        print(f"# PMCK_GPU_HASH={os.environ['PMCK_GPU_HASH']} is set: it decides every store's "
              "hashing, so gpu_save_default_vs_host_hash compares one hashing with itself")
    st = state(a.mb, dev)
    nbytes = sum(t.numel() * t.element_size() for t in st.values())
    pin = dev.type == "cuda"
    host = {k: torch.empty(t.shape, dtype=t.dtype, pin_memory=pin) for k, t in st.items()}
    print(f"# {nbytes / 1e9:.2f} GB in {len(st)} tensors, medians of {a.reps}")

    # Two baselines each way, the faster one counting: the tensors copied one by one
    # (torch copy_ into pinned tensors), and the same bytes as one copy between one
    # device buffer and one pinned buffer (a single cudaMemcpy, as pmck-pipebench's).
    # On the H200 the first ran at half of pmck-pipebench's pinned D2H.
    flat_dev = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    flat_host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)

    def d2h():
        for k, t in st.items():
            host[k].copy_(t, non_blocking=pin)

    def h2d():
        for k, t in st.items():
            t.copy_(host[k], non_blocking=pin)

    def d2h_flat():
        flat_host.copy_(flat_dev, non_blocking=pin)

    def h2d_flat():
        flat_dev.copy_(flat_host, non_blocking=pin)

    for f in (d2h, h2d, d2h_flat, h2d_flat):
        f()  # the baselines' first touch of their buffers, untimed, as the store's first save
    d = tempfile.mkdtemp(prefix="pmck-bench-gpu-", dir=a.shm)
    save, load, d2h_t, h2d_t, stall, dcp_stall = [], [], [], [], [], []
    load_new, load_new_late, load_new_early = [], [], []
    load_cpu_verify, gpu_verified = [], []
    dcp_save, dcp_fs_save, dcp_cached_save, dcp_nested_save, dcp_own = [], [], [], [], []
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    try:
        DefaultSavePlanner(enable_plan_caching=True)
        caching = True
    except TypeError:  # a torch before DCP's plan caching
        caching = False
    d2h_flat_t, h2d_flat_t = [], []
    import torch.distributed.checkpoint as dcp
    # The same saves with the writers hashing on the host (the defaults until 2026-11-28).
    sh = pmckpt.Store(name="bench-gpu-hh", ramdisk=d, threads=a.threads, gpu_hash="host")
    sh.save(st, 1)
    save_hh, save_alt = [], []
    alt = None
    # dcp.save of the same tensors under one key, into a store of the defaults
    sn = pmckpt.Store(name="bench-gpu-nested", ramdisk=d, threads=a.threads)
    # the writers a store of a.threads uses for this device: none to compare if alike
    mine = sn._gpu_threads if dev.type == "cuda" else sn.threads
    if a.alt_threads and a.alt_threads != mine:
        alt = pmckpt.Store(name="bench-gpu-alt", ramdisk=d, threads=a.alt_threads)
        alt.save(st, 1)
    nested = {"state": st}  # the same tensors under one key (their names "state.t0", ...)
    with sh, sn, alt or contextlib.nullcontext(), \
            pmckpt.Store(name="bench-gpu", ramdisk=d, threads=a.threads) as s:
        s.save(st, 1)  # the first save makes the store and the pipeline
        dcp.save(nested, storage_writer=pmckpt.dcp.StorageWriter(sn, step=1))
        turns = [(s, save), (sh, save_hh)] + ([(alt, save_alt)] if alt else [])
        phases = LoadPhases(s, dev)
        step = 1
        if caching:  # DCP's plan cache filled once: the timed saves with it reuse its plans
            step += 1
            dcp.save(st, storage_writer=pmckpt.dcp.StorageWriter(s, step=step),
                     planner=DefaultSavePlanner(enable_plan_caching=True))
        for rep in range(a.reps):
            d2h_t.append(timed(d2h, dev))
            d2h_flat_t.append(timed(d2h_flat, dev))
            step += 1
            # The stores in turn (two hashings, two writer counts), each first in turn.
            for store, times in turns[rep % len(turns):] + turns[:rep % len(turns)]:
                times.append(timed(lambda: store.save(st, step), dev))
            h2d_t.append(timed(h2d, dev))
            h2d_flat_t.append(timed(h2d_flat, dev))
            # load(into=), its copies verified on the GPU (the default) and by the CPU in
            # the region, in turn; the phases timed for the default's
            ways = [(True, load), (False, load_cpu_verify)]
            for verify, times in ways[rep % 2:] + ways[:rep % 2]:
                s._verify_copies = phases.on = verify
                times.append(timed(lambda: s.load(into=st), dev))
                phases.on = False
                if verify:  # none verified on the GPU would make the ratio void
                    gpu_verified.append(s.last_recovery.get("copies_verified_bytes", 0))
            s._verify_copies = True
            # Into new tensors (a restart's load), the early copies on and off in turn.
            ways = [("auto", load_new), ("never", load_new_late)]
            for mode, times in ways[rep % 2:] + ways[:rep % 2]:
                s._early_load = mode
                times.append(timed(lambda: s.load(), dev))
                if mode == "auto":  # what crossed early: none would make the ratio void
                    load_new_early.append(s.last_recovery.get("early_bytes", 0))
            s._early_load = "auto"
            step += 1
            sync(dev)
            t0 = time.perf_counter()
            h = s.save_async(st, step)
            stall.append(time.perf_counter() - t0)
            h.wait()
            sync(dev)
            t0 = time.perf_counter()
            fut = dcp.async_save(st, checkpoint_id=os.path.join(d, f"dcp{step}"))
            dcp_stall.append(time.perf_counter() - t0)
            fut.result()
            subprocess.run(["rm", "-rf", os.path.join(d, f"dcp{step}")])
            # dcp.save (synchronous), through the store and through DCP's own writer
            step += 1
            dcp_save.append(timed(lambda: dcp.save(
                st, storage_writer=pmckpt.dcp.StorageWriter(s, step=step),
                checkpoint_id=str(step)), dev))
            dcp_nested_save.append(timed(lambda: dcp.save(
                nested, storage_writer=pmckpt.dcp.StorageWriter(sn, step=step),
                checkpoint_id=str(step)), dev))
            # DCP's own work: the same call with a writer that writes nothing
            dcp_own.append(timed(lambda: dcp.save(st, storage_writer=NullWriter()), dev))
            fs = os.path.join(d, f"dcpfs{step}")
            dcp_fs_save.append(timed(lambda: dcp.save(st, checkpoint_id=fs), dev))
            subprocess.run(["rm", "-rf", fs])
            if caching:
                step += 1
                dcp_cached_save.append(timed(lambda: dcp.save(
                    st, storage_writer=pmckpt.dcp.StorageWriter(s, step=step),
                    planner=DefaultSavePlanner(enable_plan_caching=True)), dev))
    # The state, its host copies and the baselines' buffers freed before the training runs
    # (their processes need the device memory); the figures below need only the times.
    flat_dev = flat_host = st = host = nested = None
    med = statistics.median
    d2h_best = min(med(d2h_t), med(d2h_flat_t))
    h2d_best = min(med(h2d_t), med(h2d_flat_t))
    print(f"bench: gpu_save_durable {nbytes / med(save) / 1e9:.2f} GB/s")
    print(f"bench: gpu_pinned_d2h_per_tensor {nbytes / med(d2h_t) / 1e9:.2f} GB/s")
    print(f"bench: gpu_pinned_d2h_one_copy {nbytes / med(d2h_flat_t) / 1e9:.2f} GB/s")
    print(f"ratio: gpu_save_durable_vs_pinned_d2h {d2h_best / med(save):.3f}")
    print(f"bench: gpu_save_durable_host_hash {nbytes / med(save_hh) / 1e9:.2f} GB/s")
    print(f"ratio: gpu_save_durable_host_hash_vs_pinned_d2h {d2h_best / med(save_hh):.3f}")
    print(f"ratio: gpu_save_default_vs_host_hash {med(save_hh) / med(save):.3f}")
    if alt:
        print(f"bench: gpu_save_durable_threads{a.alt_threads} "
              f"{nbytes / med(save_alt) / 1e9:.2f} GB/s")
        print(f"ratio: gpu_save_threads{a.alt_threads}_vs_default "
              f"{med(save) / med(save_alt):.3f}")
    print(f"bench: gpu_load_into {nbytes / med(load) / 1e9:.2f} GB/s")
    print(f"bench: gpu_pinned_h2d_per_tensor {nbytes / med(h2d_t) / 1e9:.2f} GB/s")
    print(f"bench: gpu_pinned_h2d_one_copy {nbytes / med(h2d_flat_t) / 1e9:.2f} GB/s")
    print(f"ratio: gpu_load_into_vs_pinned_h2d {h2d_best / med(load):.3f}")
    print(f"bench: gpu_load_into_cpu_verify {nbytes / med(load_cpu_verify) / 1e9:.2f} GB/s "
          f"(the default's loads verified {min(gpu_verified) / 1e9:.2f}-"
          f"{max(gpu_verified) / 1e9:.2f} GB on the GPU)")
    print(f"ratio: gpu_load_into_cpu_verify_vs_pinned_h2d {h2d_best / med(load_cpu_verify):.3f}")
    print(f"ratio: gpu_load_into_gpu_verify_vs_cpu_verify "
          f"{med(load_cpu_verify) / med(load):.3f}")
    phases.report()
    print(f"bench: gpu_load_new {nbytes / med(load_new) / 1e9:.2f} GB/s "
          f"({min(load_new_early) / 1e9:.2f}-{max(load_new_early) / 1e9:.2f} GB crossed "
          "during verification)")
    print(f"bench: gpu_load_new_after_verify {nbytes / med(load_new_late) / 1e9:.2f} GB/s")
    print(f"ratio: gpu_load_new_vs_pinned_h2d {h2d_best / med(load_new):.3f}")
    print(f"ratio: gpu_load_new_early_vs_after_verify {med(load_new_late) / med(load_new):.3f}")
    print(f"bench: gpu_save_async_stall {med(stall) * 1e3:.2f} ms")
    print(f"bench: gpu_dcp_async_save_stall {med(dcp_stall) * 1e3:.2f} ms")
    print(f"ratio: gpu_stall_vs_dcp_async {med(stall) / med(dcp_stall):.4f}")
    print(f"bench: gpu_dcp_save_pmckpt {nbytes / med(dcp_save) / 1e9:.2f} GB/s")
    print(f"bench: gpu_dcp_save_filesystem {nbytes / med(dcp_fs_save) / 1e9:.2f} GB/s")
    print(f"ratio: gpu_dcp_save_vs_store_save {med(save) / med(dcp_save):.3f}")
    print(f"ratio: gpu_dcp_save_pmckpt_vs_filesystem {med(dcp_fs_save) / med(dcp_save):.3f}")
    print(f"bench: gpu_dcp_own_work {med(dcp_own) * 1e3:.2f} ms")
    print(f"ratio: gpu_dcp_save_vs_store_save_plus_dcp_own_work "
          f"{(med(save) + med(dcp_own)) / med(dcp_save):.3f}")
    print(f"bench: gpu_dcp_save_nested {nbytes / med(dcp_nested_save) / 1e9:.2f} GB/s")
    print(f"ratio: gpu_dcp_save_nested_vs_store_save {med(save) / med(dcp_nested_save):.3f}")
    if dcp_cached_save:
        print(f"bench: gpu_dcp_save_cached_plan {nbytes / med(dcp_cached_save) / 1e9:.2f} GB/s")
        print(f"ratio: gpu_dcp_save_cached_plan_vs_store_save "
              f"{med(save) / med(dcp_cached_save):.3f}")
    subprocess.run(["rm", "-rf", d])
    call_cost(dev, a)
    if a.no_train:
        return 0
    if dev.type == "cuda":
        torch.cuda.empty_cache()  # what torch's allocator kept of the above, for bench_train

    names = {("32", "train_tput_ckpt_every_step_vs_none"): "gpu_train_every_step_vs_none_b32",
             ("8", "train_tput_ckpt_every_step_vs_none"): "gpu_train_every_step_vs_none_b8",
             ("8", "train_tput_ckpt_every10_vs_none"): "gpu_train_every10_vs_none_b8",
             ("8", "train_tput_every_step_vs_dcp_async_every_step"):
                 "gpu_train_every_step_vs_dcp_async_every_step",
             ("8", "train_tput_snapshot_every10_vs_none"): "gpu_train_snapshot_every10_vs_none_b8",
             ("8", "train_tput_snapshot_every_step_vs_none"):
                 "gpu_train_snapshot_every_step_vs_none_b8",
             ("8", "train_tput_queue_every_step_vs_none"): "gpu_train_queue_every_step_vs_none_b8",
             ("8", "train_tput_queue_every10_vs_none"): "gpu_train_queue_every10_vs_none_b8",
             ("8", "train_tput_queue_snapshot_every_step_vs_none"):
                 "gpu_train_queue_snapshot_every_step_vs_none_b8",
             ("8", "train_tput_queue_snapshot_every10_vs_none"):
                 "gpu_train_queue_snapshot_every10_vs_none_b8",
             ("8", "train_tput_device_hash_every_step_vs_none"):
                 "gpu_train_device_hash_every_step_vs_none_b8",
             ("8", "train_tput_device_hash_every10_vs_none"):
                 "gpu_train_device_hash_every10_vs_none_b8",
             ("8", "train_tput_device_hash_every_step_vs_host_hash"):
                 "gpu_train_device_hash_every_step_vs_host_hash_b8",
             ("8", "train_tput_queue_snapshot_device_hash_every_step_vs_none"):
                 "gpu_train_queue_snapshot_device_hash_every_step_vs_none_b8",
             ("32", "train_tput_device_hash_every_step_vs_none"):
                 "gpu_train_device_hash_every_step_vs_none_b32",
             ("8", "train_tput_background_copies_vs_none"):
                 "gpu_train_background_copies_vs_none_b8",
             ("8", "train_tput_snapshot_on_wait_every_step_vs_none"):
                 "gpu_train_snapshot_on_wait_every_step_vs_none_b8",
             ("8", "train_tput_snapshot_on_wait_every10_vs_none"):
                 "gpu_train_snapshot_on_wait_every10_vs_none_b8",
             ("8", "train_tput_queue_snapshot_on_wait_every_step_vs_none"):
                 "gpu_train_queue_snapshot_on_wait_every_step_vs_none_b8"}
    for batch in ("8", "32"):  # GradientLog: whole states and gradient records in turn
        for kind in ("", "snapshot_", "queue_snapshot_"):
            names[(batch, f"train_tput_gradlog_{kind}every_step_vs_none")] = \
                f"gpu_train_gradlog_{kind}every_step_vs_none_b{batch}"
        for kind in ("", "snapshot_"):
            names[(batch, f"train_tput_gradlog_{kind}every_step_vs_whole_states")] = \
                f"gpu_train_gradlog_{kind}every_step_vs_whole_states_b{batch}"
    for batch, configs in (("32", a.b32), ("8", a.b8)):
        if not configs:
            continue
        cmd = [sys.executable, os.path.join(HERE, "bench_train.py"), "--device", a.device,
               "--ranks", "0", "--batch", batch, "--steps", "10", "--warmup", "3", "--reps",
               str(a.train_reps), "--configs", configs, "--threads", str(a.threads)]
        try:  # unbuffered: a run cut short by the timeout still gives what it printed
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.train_timeout,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired as e:
            out = subprocess.CompletedProcess(cmd, -9, _text(e.stdout), _text(e.stderr))
            print(f"bench: bench_train batch {batch} timed out after {a.train_timeout} s")
        for line in out.stdout.splitlines():
            w = line.split()
            if line.startswith("ratio: "):
                # a name bench_gpu does not map is passed through with the batch (a
                # GradientLog chain's, train_tput_gradlog_kN_..., as gpu_train_gradlog_kN_...,
                # paced copies' train_tput_background_copies_Ngbps_..., the wait
                # kernels' train_tput_background_wait_kernel_vs_none)
                name = names.get((batch, w[1]), "gpu_" + (
                    w[1].replace("_tput", "", 1) if w[1].startswith(
                        ("train_tput_gradlog_k", "train_tput_background_"))
                    else w[1]) + f"_b{batch}")
                print(f"ratio: {name} {' '.join(w[2:])}")
            elif line.startswith("bench: config "):
                print(f"bench: b{batch} {line[len('bench: '):]}")
            elif line.startswith("  rep "):  # progress: how far a run cut short got
                print(f"# b{batch} {line.strip()}")
            elif line.startswith("bench: cost"):
                print(f"bench: cost b{batch} {line[len('bench: cost '):]}")
            elif line.startswith("bench: train model"):
                state_mb = float(w[w.index("checkpoint") + 1])
                record_mb = float(w[w.index("record") + 1]) if "record" in w else None
                tokens = int(w[w.index("tokens") - 1])
            elif line.startswith("bench: train_tput_none "):
                # What PCIe allows: the state crosses once per checkpoint, at the pinned
                # D2H speed measured above, while a step without checkpoints takes this long.
                step = tokens / float(w[2])
                cross = state_mb * 1e6 / (nbytes / d2h_best)
                print(f"bench: gpu_train_step_none_b{batch} {step * 1e3:.1f} ms")
                print(f"bench: gpu_train_state_d2h_b{batch} {cross * 1e3:.1f} ms "
                      f"({state_mb:.0f} MB)")
                print(f"bench: gpu_train_every_step_pcie_bound_b{batch} "
                      f"{min(1.0, step / cross):.3f} of none")
                if record_mb:  # GradientLog: a state and a record cross every two steps
                    cross = (state_mb + record_mb) / 2 * 1e6 / (nbytes / d2h_best)
                    print(f"bench: gpu_train_gradlog_every_step_pcie_bound_b{batch} "
                          f"{min(1.0, step / cross):.3f} of none ({record_mb:.0f} MB a record)")
                    # chains of k records: a state and k records every k + 1 steps
                    for k in sorted({int(k) for k in re.findall(r"\bpmglq?(?:snap)?k(\d+)_",
                                                                 configs)}):
                        cross = (state_mb + k * record_mb) / (k + 1) * 1e6 / (nbytes / d2h_best)
                        print(f"bench: gpu_train_gradlog_k{k}_every_step_pcie_bound_b{batch} "
                              f"{min(1.0, step / cross):.3f} of none")
        if out.returncode:
            print(f"bench: bench_train batch {batch} failed ({out.returncode}): "
                  f"{out.stderr.strip().splitlines()[-1:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
