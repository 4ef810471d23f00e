# SPDX-License-Identifier: BSD-3-Clause
"""bench_train.py -- training throughput of a real PyTorch loop while it
checkpoints: pmckpt (save_async + hook_optimizer) against DCP async_save and
torch.save, every step and every 10 steps, and with two ranks (DDP over gloo).

The job: a GPT-2-style decoder in torch.nn (token + position embedding,
causal self-attention and MLP blocks with pre-layer-norm, dropout, untied
head; --tied ties it), AdamW with weight decay, a warm-up + cosine LR
schedule (LambdaLR), tokens drawn from a seeded torch.Generator whose state
is the data loader's position.  A checkpoint holds model, optimizer,
scheduler, step, the generator's state and torch's RNG state.

A run of one configuration: a fresh model from the same seed, --warmup steps
(each checkpointing configuration checkpoints once in them, into each of its
stores, so stores, pools, files and directories exist and the first-time costs
are paid; more steps where a configuration has more stores than that allows), everything in
flight waited for, then --steps measured steps.  Checkpoints fall inside the
measured window (every 10: at measured steps 5, 15, ...), and whatever is in
flight at its end is not waited for: a steady state.  tokens/s = tokens of the
measured steps / their wall time.  Configurations are interleaved within each
of --reps repetitions (none, pm_every1, dcp_every1, ... then again), so that
the machine's noise falls on all alike; each figure is the median over the
repetitions, and the spread (min-max) of each ratio is printed with it.

Configurations (where: --shm, a tmpfs, for every local tier; --disk for copy-out):
  none            no checkpoints
  pm_every{1,10}  Store(ramdisk=--pm-dir).save_async + hook_optimizer
  pmco_every{1,10}  the same with shared_dir on --disk (copy-out of each commit)
  pmco10_every1   every step, copy-out of every 10th (Store(copyout_every=10))
  pm1t_every1     every step with one writer thread (Store(threads=1))
  pmsnap_every{1,10}  CUDA: the state snapshotted on the device, written from
                  there (Store(gpu_source="snapshot")): the optimizer waits for
                  the device copy only
  pmq_every{1,10}, pmqsnap_every{1,10}  pm and pmsnap with Store(on_busy="queue"):
                  a save behind one in flight returns at once and begins in
                  the store's thread when that one has committed
  pmdh_every{1,10}, pmqsnapdh_every1  CUDA: pm and pmqsnap with device hashing
                  (PMCK_GPU_HASH=device: the GPU hashes the sources, the writers
                  only flush what lands); the default since 2026-11-28, so now
                  pm and pmqsnap themselves (:hh for the host's hashing)
  pmsow_every{1,10}, pmqsow_every1  CUDA: pm (and pmq) with snapshots on wait
                  (Store(gpu_snapshot_on_wait=True)): the hook snapshots on the
                  device what the writers have not reached, and the optimizer
                  waits for that copy only
  pmidle_every1   every step, writers SCHED_IDLE (Store(writer_policy="idle"))
  pmgl_every1, pmglsnap_every1, pmglqsnap_every1  pmckpt.GradientLog (a whole
                  state and the next step's gradients in turn, fewer bytes a
                  step), as pm, pmsnap and pmqsnap
  pmglkN_every1, pmglsnapkN_every1, pmglqsnapkN_every1  the same with chains of
                  N records after each whole state (GradientLog(records_per_state=N));
                  pmglq_every1, pmglqkN_every1: with the queue, without the snapshot
  NAME:tN         any of these with N torch intra-op threads (default: --torch-threads)
  NAME:block, NAME:dh, NAME:sub8  CUDA: any of these with the writers
                  sleeping while they wait for their copies (PMCK_GPU_WAIT=block;
                  they spin by default), with device hashing (PMCK_GPU_HASH=device,
                  the default since 2026-11-28 but for pmckpt's older than it),
                  or with 8 MiB sub-copies (PMCK_GPU_SUB_MIB=8: half the writers'
                  CUDA calls); suffixes combine (pmglqsnap_every1:dh:sub8)
  NAME:hh         CUDA: any of these with the writers hashing on the host
                  (Store(gpu_hash="host"), and so 12 of them: the defaults until
                  2026-11-28), against the same without it when both run
  NAME:rateN      CUDA: any of these with the copies out of the device paced to
                  about N GB/s for the whole process (PMCK_GPU_RATE_GBPS=N), against
                  the same unpaced when both run
  bgcopy          no checkpoints: a thread copying device memory to pinned host
                  memory as fast as it can on a stream of its own (CPU: between
                  two host buffers) for the whole run, 64 MiB a copy: the traffic's
                  own cost, without pmckpt (its rate in the cost line)
  bgcopyN         the same paced to about N GB/s: on a GPU each copy is followed on
                  its stream by a wait kernel (torch.cuda._sleep, one thread) as
                  long as the pace leaves, so the host issues a round at a time as
                  bgcopy does (CPU: the thread sleeps); whether the same bytes
                  spread over the step cost training less than at full speed
  bgwait          no checkpoints: bgcopyN's wait kernels alone, a thread keeping
                  four queued (torch.cuda._sleep: one thread of one block, ~5 ms
                  each) on a stream of its own for the whole run, without copies:
                  what holding one block on one SM costs training, the part of
                  bgcopyN's cost that is not its copies' (the cost line: the share
                  of the run they held it; CPU: nothing to hold, the thread sleeps)
  dcp_every{1,10} dcp.async_save(FileSystemWriter(--shm/...)), the previous
                  future waited for before the next (as DCP's documentation
                  advises), two directories used in turn
  tsave_every10   torch.save to a file in --shm (synchronous)
  and with --ranks 2 (torch.multiprocessing, gloo, DDP, init_method file://):
  mr_none, mr_pm_every1, mr_pm_every10 (Store(group=True)).

Where the cost comes from (printed per configuration as `bench: cost ...`):
  the CPU time of pmckpt's threads (writers and copier: the threads running
  SCHED_BATCH, from /proc/self/task/*/schedstat), of the training (main)
  thread and of the others alive at the end (torch's intra-op threads; DCP's
  saving thread exits after each save and is missing); the
  time the loop spends in forward+backward (inflated by CPU and memory
  bandwidth shared with a writer), in optimizer.step (which includes the
  hook's wait for the checkpoint's layers; the pipeline's wait_ns counts it
  apart) and in the checkpoint call itself (with pmckpt, the loop's state_dict()
  in it apart), and the cyclic garbage collector's time in the measured steps
  (its collections, the full ones apart: wherever they fall, a call's objects
  that outlive it set them off).  --profile-call prints, per run
  of a pmckpt configuration, cProfile's view of those calls in the measured
  steps (state_dict() and save_async), as '#' lines.

A CUDA path (--device cuda: GPT-2 medium, bf16 autocast, fp32 weights and
Adam states, checkpointed from device memory) exists but is unverified here.
"""
import argparse
import collections
import contextlib
import cProfile
import gc
import io
import math
import os
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import pmckpt

warnings.filterwarnings("ignore", message=".*process group.*")
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")


# ------------------------------------------------------------------ the model

class Attention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d),
                                 nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads, dropout=0.1, tied=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


SIZES = {  # vocab, seq, d, layers, heads, batch
    "cpu": (8192, 64, 512, 7, 8, 4),       # 30.5M parameters, 256 tokens a step
    "tiny": (1024, 32, 128, 2, 4, 2),      # for trying the script out
    # GPT-2 medium's tensors (24 blocks: 293 parameters) on a narrow width: the
    # Python costs of a checkpoint call, which go with the tensors, on a CPU
    "gpt2-shape": (1024, 32, 64, 24, 4, 2),
    "gpt2-medium": (50304, 1024, 1024, 24, 16, 8),
}


class LRSchedule:
    """Linear warm-up, then cosine decay to 10 %: a picklable lr_lambda."""

    def __init__(self, warmup=20, total=2000):
        self.warmup, self.total = warmup, total

    def __call__(self, step):
        if step < self.warmup:
            return (step + 1) / self.warmup
        p = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return 0.1 + 0.45 * (1 + math.cos(math.pi * p))


class Job:
    """Model, optimizer, scheduler and data position, built afresh from the seed."""

    def __init__(self, a, device, ddp_group=None):
        vocab, seq, d, layers, heads, batch = SIZES[a.size]
        self.vocab, self.seq, self.batch = vocab, seq, a.batch or batch
        self.device = device
        torch.manual_seed(a.seed)
        self.model = GPT(vocab, seq, d, layers, heads, tied=a.tied).to(device)
        self.module = self.model
        if ddp_group is not None:
            from torch.nn.parallel import DistributedDataParallel as DDP
            self.model = DDP(self.model, process_group=ddp_group)
        decay = [p for n, p in self.module.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in self.module.named_parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                      {"params": rest, "weight_decay": 0.0}],
                                     lr=3e-4, betas=(0.9, 0.95), foreach=True)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, LRSchedule())
        rank = torch.distributed.get_rank() if ddp_group is not None else 0
        self.gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
        self.step = 0
        self.amp = device.type == "cuda"
        self.t_fb = self.t_opt = 0.0
        # CUDA: events around each step's forward+backward and optimizer step on the
        # current stream (the host's times above are launch times there, and the
        # optimizer's stream-ordered wait for a checkpoint's copies shows only on the GPU)
        self.events = []

    def gpu_times(self):
        """(forward+backward, optimizer step) GPU seconds of the steps since events was
        emptied; the caller has synchronized."""
        fb = sum(e0.elapsed_time(e1) for e0, e1, _ in self.events) / 1e3
        return fb, sum(e1.elapsed_time(e2) for _, e1, e2 in self.events) / 1e3

    def nparams(self):
        return sum(p.numel() for p in self.module.parameters())

    def train_step(self):
        toks = torch.randint(self.vocab, (self.batch, self.seq + 1), generator=self.gen)
        toks = toks.to(self.device, non_blocking=True)
        x, y = toks[:, :-1], toks[:, 1:]
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.amp else None
        t0 = time.perf_counter()
        if ev:
            ev[0].record()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            logits = self.model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        t1 = time.perf_counter()
        if ev:
            ev[1].record()
        self.opt.step()  # pmckpt: the hook waits here for the layers it updates
        self.sched.step()
        self.step += 1
        t2 = time.perf_counter()
        if ev:
            ev[2].record()
            self.events.append(ev)
        self.t_fb += t1 - t0
        self.t_opt += t2 - t1
        return loss

    def state(self):
        return {"model": self.module.state_dict(), "optim": self.opt.state_dict(),
                "sched": self.sched.state_dict(), "step": self.step,
                "data": self.gen.get_state(), "rng": torch.get_rng_state()}

    def tokens_per_step(self, world=1):
        return self.batch * self.seq * world


# ------------------------------------------------------------------ per-thread CPU time

def thread_cpu():
    """{tid: (cpu ns, pmckpt thread?)}: pmckpt's writers and copier run SCHED_BATCH
    (SCHED_IDLE with writer_policy='idle'); nothing else in the process does."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                ns = int(f.read().split()[0])
            batch = os.sched_getscheduler(int(t)) in (os.SCHED_BATCH, os.SCHED_IDLE)
        except (OSError, ValueError):
            continue
        out[int(t)] = (ns, batch)
    return out


def cpu_delta(before, after, main_tid):
    """CPU seconds of the training thread, pmckpt's threads and the others alive at
    the end (a thread that exited meanwhile, like DCP's saving thread, is missing)."""
    d = {"main": 0, "pmckpt": 0, "other": 0}
    for tid, (ns, batch) in after.items():
        ns0 = before.get(tid, (0, batch))[0]
        key = "main" if tid == main_tid else "pmckpt" if batch else "other"
        d[key] += ns - ns0
    return {k: v / 1e9 for k, v in d.items()}


# ------------------------------------------------------------------ checkpointers

class NoCkpt:
    every = 0

    def __init__(self, *a, **k):
        pass

    def save(self, job):
        pass

    def drain(self):
        pass

    def close(self):
        pass

    def stats(self):
        return {}


class Background:
    """Not a checkpoint: a thread running run() for the whole run, until close() (the
    traffic or the kernels of bgcopy, bgcopyN and bgwait without pmckpt); run()'s
    failure is raised by close()."""
    every = 0  # it never saves

    def start(self, name):
        self.error = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=name)
        self.thread.start()

    def _run(self):
        try:
            self.run()
        except BaseException as e:  # noqa: BLE001 -- reported by close()
            self.error = e

    def save(self, job):
        pass

    def drain(self):
        pass

    def close(self):
        self.stop.set()
        self.thread.join()
        if self.error is not None:
            raise self.error


class BgCopy(Background):
    """Not a checkpoint: a thread that copies, for the whole run, as fast as it can, from
    a device buffer to pinned host memory on a non-blocking stream of its own (CUDA), or
    between two host buffers (CPU), in 64 MiB pieces: what the traffic of a checkpoint
    alone costs training (the GPU's forward+backward while PCIe carries device-to-host
    copies), without pmckpt's threads, events and calls.  gbps: paced to about that
    many GB/s (bgcopyN) instead."""
    every = 0  # it never saves
    PIECE = 64 << 20

    def __init__(self, job, mib, gbps=None):
        n = mib << 20
        self.gbps = gbps
        self.full_gbps = None  # CUDA, paced: the unpaced rate measured first
        self.gap_us = 0.0  # CUDA, paced: the wait kernel after each copy
        self.cuda = job.device.type == "cuda"
        self.src = torch.empty(n, dtype=torch.uint8, device=job.device)
        self.dst = torch.empty(n, dtype=torch.uint8, pin_memory=self.cuda)
        self.stream = torch.cuda.Stream(job.device) if self.cuda else None
        self.copied = 0
        self.gap = 0  # CUDA, paced: the wait kernel's cycles after each copy
        if gbps and self.cuda:
            # measured alone, before the run's warm-up (beside training it would read
            # slower, and the pace would come out faster than asked)
            torch.cuda.synchronize(job.device)
            with torch.cuda.stream(self.stream):
                self.gap = self._gap_cycles(self._pieces())
        self.start("bench-bgcopy")

    def _pieces(self):
        piece = self.PIECE
        return [(self.dst[o:o + piece], self.src[o:o + piece])
                for o in range(0, self.src.numel(), piece)]

    def _gap_cycles(self, pieces):
        """CUDA, paced: the wait kernel's length in GPU clock cycles after each copy,
        from one unpaced round and one wait kernel timed on the stream (current)."""
        t = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        t[0].record()
        for dst, src in pieces:
            dst.copy_(src, non_blocking=True)
        t[1].record()
        cycles = 50_000_000
        torch.cuda._sleep(cycles)
        t[2].record()
        t[2].synchronize()
        full = len(pieces) * self.PIECE / (t[0].elapsed_time(t[1]) / 1e3)
        per_s = cycles / (t[1].elapsed_time(t[2]) / 1e3)
        self.full_gbps = full / 1e9
        gap = max(0.0, self.PIECE / (self.gbps * 1e9) - self.PIECE / full)
        self.gap_us = gap * 1e6
        return int(gap * per_s)

    def run(self):
        n = self.src.numel()
        pieces = self._pieces()
        prev = None  # the event after the round before (CUDA)
        pace = self.gbps and self.PIECE / (self.gbps * 1e9)  # seconds a piece, paced
        gap = self.gap
        with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
            due = time.perf_counter()
            while not self.stop.is_set():
                # Each copy_ takes the GIL again after it is queued, which the
                # training thread may hold for up to 5 ms: two rounds stay queued
                # (the next is issued before the one before it is waited for), so
                # the copies keep crossing meanwhile.
                for dst, src in pieces:
                    dst.copy_(src, non_blocking=True)
                    if gap:  # paced on the GPU: no wake-up of this thread a copy
                        torch.cuda._sleep(gap)
                    elif not self.cuda:
                        self.copied += self.PIECE  # (done: a host copy is synchronous)
                        if pace:
                            # the next copy begins a pace after this one did, or
                            # now if this one took longer (no burst to catch up)
                            due = max(due + pace, time.perf_counter())
                            time.sleep(max(0.0, due - time.perf_counter()))
                if not self.cuda:
                    continue
                ev = torch.cuda.Event()
                ev.record(self.stream)
                if prev is not None:
                    prev.synchronize()
                    self.copied += n
                prev = ev
            if prev is not None:
                prev.synchronize()

    def stats(self):
        return {"bg_bytes": self.copied}

    def close(self):
        try:
            Background.close(self)
        finally:
            if self.full_gbps is not None:
                print(f"# bgcopy{self.gbps:g}: unpaced {self.full_gbps:.1f} GB/s in a round "
                      f"alone, then a wait of {self.gap_us:.0f} us after each 64 MiB copy")
            self.src = self.dst = None
            if self.cuda:
                torch.cuda.empty_cache()  # its device buffer, not the next configuration's


def set_env(values):
    """Sets environment variables; returns what restore_env needs to undo it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    return old


def restore_env(old):
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class PmCkpt:
    def __init__(self, a, job, every, name, shared=None, group=None, env=None, **store_kw):
        """env: variables set for this run (read by the library when the store
        makes its pipeline, at the first save), restored at close()."""
        self.every = every
        self.shared = shared
        self.env = set_env(env or {})
        self.saver = self.open(a, job, name, shared, group, store_kw)
        self.call = 0.0
        self.state_s = 0.0
        self.prof = cProfile.Profile() if a.profile_call else None

    def open(self, a, job, name, shared, group, store_kw):
        """The object whose save_async the checkpoints call (sets self.store)."""
        self.store = pmckpt.Store(name=name, ramdisk=a.pm_dir, shared_dir=shared, keep=2,
                                  group=group, **store_kw)
        self.hook = pmckpt.hook_optimizer(job.opt, self.store)
        return self.store

    def save(self, job):
        t0 = time.perf_counter()
        if self.prof:
            self.prof.enable()
        state = job.state()
        t1 = time.perf_counter()
        self.saver.save_async(state, job.step)
        if self.prof:
            self.prof.disable()
        self.state_s += t1 - t0  # the loop's state_dict() calls: the user's, in the call
        self.call += time.perf_counter() - t0

    def profile(self, title, lines=30):
        """The calls' profile (--profile-call), as '#' lines: the functions by
        cumulative time, then by own time (a ctypes call counts in its caller's)."""
        if not self.prof:
            return
        out = io.StringIO()
        st = pstats.Stats(self.prof, stream=out)
        st.sort_stats("cumulative").print_stats(lines)
        st.sort_stats("tottime").print_stats(lines)
        print(f"# profile of the checkpoint calls (state_dict() + save_async), {title}:")
        for line in out.getvalue().splitlines():
            if line.strip():
                print(f"#   {line}")

    def drain(self):
        self.store.wait()
        self.store.wait_copyout()

    def stats(self, store=None):
        s = (store or self.store).stats()
        out = {"wait_s": s.get("pipeline", {}).get("wait_ns", 0) / 1e9, "call_s": self.call,
               "state_s": self.state_s,
               "committed": s.get("pipeline", {}).get("committed", 0),
               "skipped": s.get("pipeline", {}).get("skipped", 0),
               "snapshot_on_wait_b": s.get("pipeline", {}).get("snapshot_on_wait_bytes", 0)}
        # where the writers' time went (summed over the writers), as writer_NAME_s
        out.update({k[:-3] + "_s": v / 1e9 for k, v in s.get("pipeline", {}).items()
                    if k.startswith("writer_") or k == "commit_ns"})
        # save_async's time by phase (Store.stats()["call"]), as phase_NAME_s
        out.update({f"phase_{k}_s": v / 1e9 for k, v in s.get("call", {}).items()
                    if k != "calls"})
        if "copyout" in s:
            out["copied"] = s["copyout"]["copied"]
            out["copy_busy_s"] = s["copyout"]["busy_ns"] / 1e9
        return out

    def close(self):
        self.hook.remove()
        path = self.store.region_path
        self.store.destroy()
        restore_env(self.env)
        for p in (path,):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        if self.shared:
            shutil.rmtree(self.shared, ignore_errors=True)


class GradLogCkpt(PmCkpt):
    """pmckpt.GradientLog: whole states and the next step's gradients in turn (its own
    optimizer hook); the stores' figures summed."""

    def open(self, a, job, name, shared, group, store_kw):
        self.log = pmckpt.GradientLog(job.opt, name=name, ramdisk=a.pm_dir, **store_kw)
        self.store = self.log.store
        self.stores = 1 + len(self.log.record_stores)  # for the warm-up
        return self.log

    def drain(self):
        self.log.wait()

    def stats(self):
        out = PmCkpt.stats(self)
        for records in self.log.record_stores:
            for k, v in PmCkpt.stats(self, records).items():
                if k not in ("call_s", "state_s"):
                    out[k] = out.get(k, 0) + v
        out["records"] = self.log.records_saved
        return out

    def close(self):
        paths = [st.region_path for st in (self.log.store,) + self.log.record_stores]
        self.log.destroy()
        restore_env(self.env)
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


class DcpCkpt:
    def __init__(self, a, job, every, name):
        import torch.distributed.checkpoint as dcp
        self.dcp, self.every = dcp, every
        self.dirs = [os.path.join(a.shm, f"{name}-{i}") for i in (0, 1)]
        self.fut = None
        self.n = 0
        self.call = 0.0

    def save(self, job):
        t0 = time.perf_counter()
        if self.fut is not None:
            self.fut.result()  # DCP: one async_save in flight at a time
        d = self.dirs[self.n % 2]
        self.n += 1
        self.fut = self.dcp.async_save(job.state(), checkpoint_id=d,
                                       storage_writer=self.dcp.FileSystemWriter(d))
        self.call += time.perf_counter() - t0

    def drain(self):
        if self.fut is not None:
            self.fut.result()
            self.fut = None

    def stats(self):
        return {"call_s": self.call}

    def close(self):
        self.drain()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


class TorchSave:
    def __init__(self, a, job, every, name):
        self.every = every
        self.path = os.path.join(a.shm, f"{name}.pt")
        self.call = 0.0

    def save(self, job):
        t0 = time.perf_counter()
        torch.save(job.state(), self.path)
        self.call += time.perf_counter() - t0

    def drain(self):
        pass

    def stats(self):
        return {"call_s": self.call}

    def close(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class BgWait(Background):
    """Not a checkpoint: bgcopyN's wait kernels alone, for the whole run (bgwait).  A
    thread keeps wait kernels of about 5 ms each (torch.cuda._sleep, one thread of one
    block) queued on a non-blocking stream of its own, four in flight, so that the
    queue outlasts the thread's waits for the GIL (up to 5 ms a handoff while the
    training thread runs Python), as bgcopy's whole rounds do: one block held on one
    SM, the part of bgcopyN's cost that is not its copies'.  stats() counts the
    kernels' time, and the cost line says what share of the run a wait kernel ran.
    On the CPU there is nothing to hold: the thread waits for the end."""
    KERNEL_MS = 5.0
    IN_FLIGHT = 4

    def __init__(self, job):
        self.cuda = job.device.type == "cuda"
        self.stream = torch.cuda.Stream(job.device) if self.cuda else None
        self.kernels = 0
        self.cycles = 0  # CUDA: a kernel's length in GPU clock cycles (about KERNEL_MS)
        if self.cuda:
            torch.cuda.synchronize(job.device)
            with torch.cuda.stream(self.stream):
                torch.cuda._sleep(1000)  # loaded (lazily, at its first launch) before timing
                t = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                t[0].record()
                torch.cuda._sleep(50_000_000)
                t[1].record()
                t[1].synchronize()
                self.cycles = int(50_000_000 * self.KERNEL_MS / t[0].elapsed_time(t[1]))
        self.start("bench-bgwait")

    def run(self):
        if not self.cuda:
            self.stop.wait()
            return
        queued = collections.deque()  # the events after the kernels in flight
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                torch.cuda._sleep(self.cycles)
                ev = torch.cuda.Event()
                ev.record(self.stream)
                queued.append(ev)
                if len(queued) >= self.IN_FLIGHT:
                    queued.popleft().synchronize()
                    self.kernels += 1
            for ev in queued:
                ev.synchronize()

    def stats(self):
        return {"bg_wait_ms": self.kernels * self.KERNEL_MS}


def make_ckpt(cfg, a, job, name, group=None, store_kw=None):
    if cfg.endswith("none"):
        return NoCkpt()
    bg = re.fullmatch(r"bgcopy([1-9][0-9]*)?", cfg)
    if bg:  # the copies' traffic alone, 1 GiB a round on a GPU; bgcopyN: paced, N GB/s
        return BgCopy(job, 1024 if job.device.type == "cuda" else 256,
                      gbps=int(bg.group(1)) if bg.group(1) else None)
    if cfg == "bgwait":  # the wait kernels of bgcopyN alone
        return BgWait(job)
    kind, _, every = cfg.rpartition("_every")
    kind, every = kind.removeprefix("mr_"), int(every)
    kw = {**(dict(threads=a.threads) if a.threads else {}), **(store_kw or {})}
    if kind == "pm":
        return PmCkpt(a, job, every, name, group=group, **kw)
    if kind == "pmco":
        return PmCkpt(a, job, every, name, shared=os.path.join(a.disk, name), group=group, **kw)
    if kind == "pmco10":  # copy-out of every 10th commit only (Store(copyout_every=10))
        return PmCkpt(a, job, every, name, shared=os.path.join(a.disk, name), group=group,
                      copyout_every=10, **kw)
    if kind == "pmidle":  # writers (and copier) SCHED_IDLE: Store(writer_policy="idle")
        return PmCkpt(a, job, every, name, group=group, writer_policy="idle", **kw)
    if kind == "pmsnap":  # GPU: a device snapshot first, then D2H (Store(gpu_source="snapshot"))
        return PmCkpt(a, job, every, name, group=group, gpu_source="snapshot", **kw)
    if kind in ("pmdh", "pmqsnapdh"):  # CUDA: the GPU hashes the sources (PMCK_GPU_HASH=device)
        extra = dict(on_busy="queue", gpu_source="snapshot") if kind == "pmqsnapdh" else {}
        return PmCkpt(a, job, every, name, group=group, env={"PMCK_GPU_HASH": "device"},
                      **extra, **kw)
    if kind in ("pmsow", "pmqsow"):  # CUDA: Store(gpu_snapshot_on_wait=True)
        extra = dict(on_busy="queue") if kind == "pmqsow" else {}
        return PmCkpt(a, job, every, name, group=group, gpu_snapshot_on_wait=True, **extra,
                      **kw)
    if kind == "pmq":  # a save behind one in flight begins in the store's thread (on_busy="queue")
        return PmCkpt(a, job, every, name, group=group, on_busy="queue", **kw)
    if kind == "pmqsnap":  # both
        return PmCkpt(a, job, every, name, group=group, on_busy="queue", gpu_source="snapshot",
                      **kw)
    gl = re.fullmatch(r"pmgl(q?)(snap)?(?:k([1-9][0-9]*))?", kind)
    if gl:  # GradientLog: states and records in turn
        queue, snap, k = gl.groups()
        extra = dict(records_per_state=int(k or 1))
        if snap:
            extra["gpu_source"] = "snapshot"
        if queue:
            extra["on_busy"] = "queue"
        return GradLogCkpt(a, job, every, name, **extra, **kw)
    if kind == "pm1t":  # one writer thread (Store(threads=1))
        return PmCkpt(a, job, every, name, group=group, **{**kw, "threads": 1})
    if kind == "dcp":
        return DcpCkpt(a, job, every, name)
    if kind == "tsave":
        return TorchSave(a, job, every, name)
    raise SystemExit(f"bench_train: unknown configuration {cfg}")


# ------------------------------------------------------------------ one run

SUFFIX_ENV = {"block": {"PMCK_GPU_WAIT": "block"}, "dh": {"PMCK_GPU_HASH": "device"},
              "sub8": {"PMCK_GPU_SUB_MIB": "8"}}
SUFFIX_STORE = {"hh": {"gpu_hash": "host"}}  # the stores' arguments


def config_suffixes(cfg):
    """NAME[:tN][:block][:dh][:hh][:sub8][:rateN] -> (NAME, torch threads or None,
    environment, the stores' arguments)"""
    cfg, *suffixes = cfg.split(":")
    tt, env, store_kw = None, {}, {}
    for x in suffixes:
        if x in SUFFIX_ENV:
            env.update(SUFFIX_ENV[x])
        elif x in SUFFIX_STORE:
            store_kw.update(SUFFIX_STORE[x])
        elif x[:1] == "t" and x[1:].isdigit() and int(x[1:]) > 0:
            tt = int(x[1:])
        elif re.fullmatch(r"rate([1-9][0-9]{0,2}|1000)", x):
            env["PMCK_GPU_RATE_GBPS"] = x[4:]
        else:
            raise SystemExit(f"bench_train: unknown suffix :{x} of configuration {cfg} "
                             f"(:tN with N > 0, :rateN with N from 1 to 1000, "
                             f"{', '.join(':' + k for k in {**SUFFIX_ENV, **SUFFIX_STORE})})")
    base = cfg.removeprefix("mr_")
    if store_kw and (not base.startswith("pm") or base.startswith(("pmdh", "pmqsnapdh"))
                     or "PMCK_GPU_HASH" in env):
        # $PMCK_GPU_HASH (:dh, pmdh) overrides Store(gpu_hash=); the others make no store
        raise SystemExit(f"bench_train: :hh does not apply to {cfg}"
                         f"{':dh' if 'PMCK_GPU_HASH' in env else ''} (pmckpt stores only, "
                         "not with :dh, pmdh or pmqsnapdh, whose PMCK_GPU_HASH=device "
                         "overrides it)")
    return cfg, tt, env, store_kw


class GcClock:
    """The cyclic garbage collector's collections and their time while it is
    installed (gc.callbacks), by generation: a checkpoint's objects that outlive
    its call set off collections in the training loop, outside the call."""

    def __init__(self):
        self.n = [0, 0, 0]
        self.ns = [0, 0, 0]
        self._t = 0

    def __call__(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter_ns()
        else:
            g = info["generation"]
            self.n[g] += 1
            self.ns[g] += time.perf_counter_ns() - self._t

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self)


def run(cfg, a, device, rep, group=None, ddp_group=None, world=1):
    label = cfg
    cfg, tt, env, store_kw = config_suffixes(cfg)
    torch.set_num_threads(tt or a.torch_threads)
    job = Job(a, device, ddp_group)
    name = f"bt{os.getpid()}-{label.replace(':', '-')}-{rep}"
    old_env = set_env(env)  # read by the library when the store opens
    try:
        ck = make_ckpt(cfg, a, job, name, group, store_kw)
    except BaseException:
        restore_env(old_env)
        raise
    main = threading.get_native_id()
    try:
        # every store of the configuration has saved once (GradientLog's chain of N
        # records: N + 1 stores, one checkpoint each a step from the second step)
        stores = getattr(ck, "stores", 1)
        for i in range(a.warmup if stores == 1 else max(a.warmup, stores + 1)):
            job.train_step()
            if ck.every and (i == 1 or (ck.every == 1 and i > 1)):
                ck.save(job)
        ck.drain()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if world > 1:
            torch.distributed.barrier(ddp_group)
        # The setup's objects (a fresh model, its optimizer, the store) are collected
        # now, not by a full collection that the first configuration to make objects
        # in the measured steps would set off there
        gc.collect()
        s0, job.t_fb, job.t_opt, job.events = ck.stats(), 0.0, 0.0, []
        if getattr(ck, "prof", None):
            ck.prof = cProfile.Profile()  # the measured steps' calls only
        c0 = thread_cpu()
        t0 = time.perf_counter()
        with GcClock() as gcc:
            for i in range(1, a.steps + 1):
                job.train_step()
                if ck.every and (i - ck.every // 2) % ck.every == 0:
                    ck.save(job)
            if device.type == "cuda":
                # the training's own stream: a checkpoint's copies still crossing on
                # other streams (or bgcopy's) would be overlapped by the next step
                torch.cuda.current_stream(device).synchronize()
        wall = time.perf_counter() - t0
        gpu = job.gpu_times() if job.events else None
        cpu = cpu_delta(c0, thread_cpu(), main)
        s1 = ck.stats()
        st = {k: s1[k] - s0.get(k, 0) for k in s1}
        ck.drain()
        if hasattr(ck, "profile"):
            ck.profile(f"{label} repetition {rep}, measured steps")
    finally:
        try:
            ck.close()
        finally:
            restore_env(old_env)
    r = {"tput": job.tokens_per_step(world) * a.steps / wall, "wall": wall,
         "fb": job.t_fb, "opt": job.t_opt, **{"cpu_" + k: v for k, v in cpu.items()}, **st,
         "gc_s": sum(gcc.ns) / 1e9, "gc_full": gcc.n[2], "gc_n": sum(gcc.n)}
    if gpu:
        r["gpu_fb"], r["gpu_opt"] = gpu
    return r, job.nparams()


# ------------------------------------------------------------------ two ranks

def mr_worker(rank, a, world, initfile, outpath):
    a.torch_threads = a.mr_threads
    torch.distributed.init_process_group("gloo", init_method=f"file://{initfile}",
                                         rank=rank, world_size=world)
    res = {}
    try:
        for rep in range(a.reps):
            for cfg in (a.mr_configs if rep % 2 == 0 else a.mr_configs[::-1]):
                r, n = run(cfg, a, torch.device("cpu"), rep, group=True,
                           ddp_group=torch.distributed.group.WORLD, world=world)
                res.setdefault(cfg, []).append(r)
                if rank == 0:
                    print(f"  rep {rep} {cfg}: {r['tput']:.1f} tokens/s", flush=True)
        if rank == 0:
            torch.save(res, outpath)
    finally:
        torch.distributed.destroy_process_group()


def multirank(a):
    import torch.multiprocessing as mp
    tmp = tempfile.mkdtemp(prefix="bench-train-")
    out = os.path.join(tmp, "res.pt")
    try:
        mp.spawn(mr_worker, args=(a, a.ranks, os.path.join(tmp, "init"), out), nprocs=a.ranks)
        return torch.load(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------ report

# The parts of the writers' time in a cost line (pmck_pipeline_stats, in seconds).
WRITER_TIME = [("busy", "writer_busy_s"), ("copy wait", "writer_copy_wait_s"),
               ("tail", "writer_tail_s"), ("hash wait", "writer_hash_wait_s"),
               ("commits", "commit_s")]


def med(rs, key):
    return statistics.median(r.get(key, 0) for r in rs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default=None, choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="Store(threads=); 0: its default")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch intra-op threads; 0: one core less than the machine's on up "
                    "to 4 cores (one for the writers), torch's default above")
    ap.add_argument("--configs", default="none,pm_every1,pm_every10,pmco_every1,pmco_every10,"
                    "pmco10_every1,pmidle_every1,dcp_every1,dcp_every10,tsave_every10,"
                    "none:t2,pm_every1:t2")
    ap.add_argument("--ranks", type=int, default=2, help="0: no multi-rank part")
    ap.add_argument("--mr-configs", default="mr_none,mr_pm_every1,mr_pm_every10")
    ap.add_argument("--mr-threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--shm", default="/dev/shm", help="RAM for the baselines' files (DCP, torch.save)")
    ap.add_argument("--pm-dir", default=None,
                    help="pmckpt's ramdisk directory (default: the user's own, /dev/shm/pmckpt-UID)")
    ap.add_argument("--disk", default="/var/tmp")
    ap.add_argument("--profile-call", action="store_true",
                    help="cProfile the pmckpt configurations' checkpoint calls and print the "
                    "profile of each run ('#' lines; the calls take longer profiled)")
    ap.add_argument("--quick", action="store_true",
                    help="the short version of make bench: 3 warm-up + 15 steps, 1 repetition, "
                    "fewer configurations")
    a = ap.parse_args()
    if a.quick:
        a.warmup, a.steps, a.reps = 3, 15, 1
        a.mr_configs = "mr_none,mr_pm_every1"
        if a.configs == ap.get_default("configs"):
            a.configs = "none,pm_every1,pm_every10,pmco10_every1,dcp_every1"
    device = torch.device(a.device)
    if a.size is None:
        a.size = "gpt2-medium" if device.type == "cuda" else "cpu"
    if not a.torch_threads:
        n = os.cpu_count() or 1
        a.torch_threads = max(1, n - 1) if n <= 4 else torch.get_num_threads()
    a.configs = [c for c in a.configs.split(",") if c]
    a.mr_configs = [c for c in a.mr_configs.split(",") if c]
    for c in a.configs + a.mr_configs:  # a typo refused before any configuration runs
        config_suffixes(c)
    with open("/proc/loadavg") as f:
        load0 = f.read().split()[:3]

    R = {}
    if a.configs:  # not counted: first-time costs of torch (allocator, kernels)
        run("none", a, device, -1)
    failed = 0
    for rep in range(a.reps):
        order = a.configs if rep % 2 == 0 else a.configs[::-1]
        for cfg in order:
            try:
                r, _ = run(cfg, a, device, rep)
            except Exception as e:  # one configuration's failure: the others still measure
                traceback.print_exc()
                print(f"bench: config {cfg} failed (repetition {rep}): {type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}", flush=True)
                failed += 1
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()  # what it held, for the next configuration
                continue
            R.setdefault(cfg, []).append(r)
            print(f"  rep {rep} {cfg}: {r['tput']:.1f} tokens/s", flush=True)
    MR = multirank(a) if a.ranks > 1 and a.mr_configs else {}
    with open("/proc/loadavg") as f:
        load1 = f.read().split()[:3]

    job = Job(a, device)
    job.train_step()  # the optimizer's state exists from the first step on
    nparams = job.nparams()
    sbytes = sum(t.numel() * t.element_size() for t in pmckpt_tensors(job.state()))
    # a GradientLog record: the gradients (as the parameters), the rest of the state small
    gbytes = sum(p.numel() * p.element_size() for p in job.module.parameters()
                 if p.requires_grad)
    print(f"bench: train model {a.size} {nparams / 1e6:.1f} M parameters, "
          f"{job.tokens_per_step()} tokens a step, checkpoint {sbytes / 1e6:.0f} MB "
          f"(gradient record {gbytes / 1e6:.0f} MB) "
          f"(after the first step), torch threads {a.torch_threads} (unless :tN), "
          f"{os.cpu_count()} CPUs, {a.warmup} warm-up + {a.steps} measured steps, "
          f"medians of {a.reps}; load average {' '.join(load0)} before, {' '.join(load1)} after")
    for cfg, rs in list(R.items()) + list(MR.items()):
        print(f"bench: train_tput_{cfg} {med(rs, 'tput'):.1f} tokens/s "
              f"(min {min(r['tput'] for r in rs):.1f}, max {max(r['tput'] for r in rs):.1f})")
    for cfg, rs in list(R.items()) + list(MR.items()):
        steps = a.steps
        parts = [f"fwd+bwd {med(rs, 'fb') / steps * 1e3:.0f}",
                 f"opt.step {med(rs, 'opt') / steps * 1e3:.1f}"]
        if "gpu_fb" in rs[0]:
            parts.append(f"on the GPU: fwd+bwd {med(rs, 'gpu_fb') / steps * 1e3:.1f}, "
                         f"opt.step {med(rs, 'gpu_opt') / steps * 1e3:.1f}")
        if "wait_s" in rs[0]:
            parts.append(f"hook+begin wait {med(rs, 'wait_s') / steps * 1e3:.1f}")
        if "call_s" in rs[0]:
            parts.append(f"ckpt call {med(rs, 'call_s') / steps * 1e3:.1f}" +
                         (f" (state_dict() {med(rs, 'state_s') / steps * 1e3:.1f})"
                          if "state_s" in rs[0] else ""))
        parts.append(f"gc {med(rs, 'gc_s') / steps * 1e3:.2f} ({med(rs, 'gc_n'):.0f} "
                     f"collections, {med(rs, 'gc_full'):.0f} full, in {steps} steps)")
        parts.append(f"cpu main {med(rs, 'cpu_main') / steps * 1e3:.0f} other "
                     f"{med(rs, 'cpu_other') / steps * 1e3:.0f} pmckpt "
                     f"{med(rs, 'cpu_pmckpt') / steps * 1e3:.0f}")
        extra = ""
        if "copied" in rs[0]:
            extra = (f"; copied {med(rs, 'copied'):.0f} of {med(rs, 'committed'):.0f} commits, "
                     f"copier busy {med(rs, 'copy_busy_s'):.1f} of {med(rs, 'wall'):.1f} s")
        if rs[0].get("skipped"):
            extra += f"; skipped {med(rs, 'skipped'):.0f}"
        phases = [k for k in rs[0] if k.startswith("phase_")]
        if phases:
            extra += "; ckpt call by phase: " + ", ".join(
                f"{k[6:-2]} {med(rs, k) / steps * 1e3:.1f}" for k in phases)
        if rs[0].get("writer_busy_s"):  # Store.stats()["pipeline"]: pmck_pipeline_stats
            extra += "; writers' ms per step, summed over them: " + ", ".join(
                f"{name} {med(rs, k) / steps * 1e3:.1f}" for name, k in WRITER_TIME
                if rs[0].get(k))
        if "bg_bytes" in rs[0]:
            extra += (f"; background copies {med(rs, 'bg_bytes') / med(rs, 'wall') / 1e9:.1f}"
                      " GB/s")
        if "bg_wait_ms" in rs[0]:
            extra += (f"; a wait kernel ran {med(rs, 'bg_wait_ms') / 1e3 / med(rs, 'wall'):.2f}"
                      " of the time (one block on one SM)")
        if rs[0].get("snapshot_on_wait_b"):
            extra += f"; snapshotted on wait {med(rs, 'snapshot_on_wait_b') / 1e6:.0f} MB"
        print(f"bench: cost {cfg}: ms per step: {', '.join(parts)}{extra}")

    def ratio(name, num, den, table):
        if num not in table or den not in table:
            return
        rs = [x["tput"] / y["tput"] for x, y in zip(table[num], table[den])]
        print(f"ratio: {name} {med(table[num], 'tput') / med(table[den], 'tput'):.3f} "
              f"(per repetition {min(rs):.3f}-{max(rs):.3f})")

    ratio("train_tput_ckpt_every_step_vs_none", "pm_every1", "none", R)
    ratio("train_tput_background_copies_vs_none", "bgcopy", "none", R)
    ratio("train_tput_background_wait_kernel_vs_none", "bgwait", "none", R)
    for cfg in R:  # paced: against none, and against the same copies at full speed
        if re.fullmatch(r"bgcopy[1-9][0-9]*", cfg):
            ratio(f"train_tput_background_copies_{cfg[6:]}gbps_vs_none", cfg, "none", R)
            ratio(f"train_tput_background_copies_{cfg[6:]}gbps_vs_full", cfg, "bgcopy", R)
    ratio("train_tput_ckpt_every10_vs_none", "pm_every10", "none", R)
    ratio("train_tput_every_step_vs_dcp_async_every_step", "pm_every1", "dcp_every1", R)
    ratio("train_tput_every10_vs_dcp_async_every10", "pm_every10", "dcp_every10", R)
    ratio("train_tput_copyout_every_step_vs_none", "pmco_every1", "none", R)
    ratio("train_tput_copyout_every10_vs_none", "pmco_every10", "none", R)
    ratio("train_tput_every_step_copyout_every10_vs_none", "pmco10_every1", "none", R)
    ratio("train_tput_every_step_1writer_vs_none", "pm1t_every1", "none", R)
    ratio("train_tput_every_step_writers_idle_vs_none", "pmidle_every1", "none", R)
    ratio("train_tput_snapshot_every_step_vs_none", "pmsnap_every1", "none", R)
    ratio("train_tput_snapshot_every10_vs_none", "pmsnap_every10", "none", R)
    ratio("train_tput_queue_every_step_vs_none", "pmq_every1", "none", R)
    ratio("train_tput_queue_every10_vs_none", "pmq_every10", "none", R)
    ratio("train_tput_queue_snapshot_every_step_vs_none", "pmqsnap_every1", "none", R)
    ratio("train_tput_queue_snapshot_every10_vs_none", "pmqsnap_every10", "none", R)
    ratio("train_tput_device_hash_every_step_vs_none", "pmdh_every1", "none", R)
    ratio("train_tput_device_hash_every10_vs_none", "pmdh_every10", "none", R)
    ratio("train_tput_device_hash_every_step_vs_host_hash", "pmdh_every1", "pm_every1", R)
    ratio("train_tput_queue_snapshot_device_hash_every_step_vs_none", "pmqsnapdh_every1",
          "none", R)
    ratio("train_tput_snapshot_on_wait_every_step_vs_none", "pmsow_every1", "none", R)
    ratio("train_tput_snapshot_on_wait_every10_vs_none", "pmsow_every10", "none", R)
    ratio("train_tput_queue_snapshot_on_wait_every_step_vs_none", "pmqsow_every1", "none", R)
    ratio("train_tput_gradlog_every_step_vs_none", "pmgl_every1", "none", R)
    ratio("train_tput_gradlog_snapshot_every_step_vs_none", "pmglsnap_every1", "none", R)
    ratio("train_tput_gradlog_queue_snapshot_every_step_vs_none", "pmglqsnap_every1", "none", R)
    ratio("train_tput_gradlog_every_step_vs_whole_states", "pmgl_every1", "pm_every1", R)
    ratio("train_tput_gradlog_snapshot_every_step_vs_whole_states", "pmglsnap_every1",
          "pmsnap_every1", R)
    ratio("train_tput_every_step_vs_none_2_torch_threads", "pm_every1:t2", "none:t2", R)
    ratio("train_tput_none_2_vs_1_torch_threads", "none:t2", "none", R)
    ratio("train_tput_every10_vs_torch_save_every10", "pm_every10", "tsave_every10", R)
    for cfg in R:  # the suffixes against the same configuration without them
        if cfg + ":block" in R:
            ratio(f"train_tput_{cfg.replace(':', '_')}_block_vs_spin", cfg + ":block", cfg, R)
        if cfg + ":sub8" in R:
            ratio(f"train_tput_{cfg.replace(':', '_')}_sub8_vs_default_sub", cfg + ":sub8",
                  cfg, R)
        unpaced, _, rate = cfg.rpartition(":rate")
        if unpaced in R and rate.isdigit():
            ratio(f"train_tput_{unpaced.replace(':', '_')}_rate{rate}_vs_unpaced", cfg,
                  unpaced, R)
        if cfg + ":hh" in R:  # the default (the GPU hashes, 4 writers) against the host's
            ratio(f"train_tput_{cfg.replace(':', '_')}_vs_host_hash", cfg, cfg + ":hh", R)
        if cfg.endswith(":dh"):
            ratio(f"train_tput_{cfg[:-3].replace(':', '_')}_device_hash_vs_none", cfg, "none",
                  R)
        gl = re.fullmatch(r"pmgl(q?)(snap)?k([1-9][0-9]*)(_every1)", cfg)
        if gl:  # chains of N records: against none, and against chains of one
            kind = "_".join(x for x in ("queue" if gl[1] else "", gl[2] and "snapshot") if x)
            name = f"train_tput_gradlog_k{gl[3]}_{kind + '_' if kind else ''}every_step"
            ratio(f"{name}_vs_none", cfg, "none", R)
            ratio(f"{name}_vs_k1", cfg, f"pmgl{gl[1]}{gl[2] or ''}_every1", R)
    bench_ratio = [("dcp_async_every_step_vs_none", "dcp_every1"),
                   ("dcp_async_every10_vs_none", "dcp_every10"),
                   ("torch_save_every10_vs_none", "tsave_every10")]
    for name, cfg in bench_ratio:
        if cfg in R and "none" in R:
            print(f"bench: train_tput_{name} {med(R[cfg], 'tput') / med(R['none'], 'tput'):.3f}")
    ratio("train_tput_multirank_every_step_vs_none", "mr_pm_every1", "mr_none", MR)
    ratio("train_tput_multirank_every10_vs_none", "mr_pm_every10", "mr_none", MR)
    return 1 if failed else 0  # after every figure the others gave


def pmckpt_tensors(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from pmckpt_tensors(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from pmckpt_tensors(x)
    elif isinstance(v, torch.Tensor):
        yield v


if __name__ == "__main__":
    sys.exit(main())
