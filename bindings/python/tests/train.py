# SPDX-License-Identifier: BSD-3-Clause
"""train.py -- a small, deterministic training job that checkpoints with pmckpt
and resumes from its newest checkpoint; test_resume.py kills it with SIGKILL.

An MLP with dropout (so the RNG state matters) trained by Adam on synthetic
batches that depend only on (seed, step).  One thread, deterministic
algorithms: the losses are a pure function of the seed.  Records, one write()
each, appended to --log (they survive a SIGKILL in the page cache):
  R <step>          resumed from the checkpoint of <step> (0: fresh start)
  Y <step> <n>      gradlog: that resume replayed n records, the last of <step>
  L <step> <hex>    loss of <step>, float.hex (also printed to stdout)
  B <step>          a checkpoint of <step> begins (also printed to stdout)
  E <step>          save (sync: durable) / save_async (async: queued) returned
  D <step>          async, gradlog: the checkpoint of <step> is committed (handle.wait;
                    gradlog: a record and the whole state it follows)
  Q <step>          --on-busy queue: the save of <step> was queued behind one in flight
"""
import argparse
import collections
import os
import sys

import torch

import pmckpt

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--name", default="train")
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--every", type=int, default=5, help="checkpoint every N steps; 0: never")
ap.add_argument("--mode", choices=("sync", "async", "gradlog"), default="sync",
                help="gradlog: pmckpt.GradientLog, save_async (whole states and records in turn)")
ap.add_argument("--records-per-state", type=int, default=1,
                help="gradlog: GradientLog(records_per_state=N)")
ap.add_argument("--on-busy", default="wait", choices=("wait", "queue"),
                help="the store's on_busy (async, gradlog)")
ap.add_argument("--in-flight", type=int, default=1,
                help="async, gradlog: checkpoints left in flight before waiting for the "
                     "oldest (its D record)")
ap.add_argument("--log", required=True)
ap.add_argument("--seed", type=int, default=1234)
ap.add_argument("--width", type=int, default=1024)
a = ap.parse_args()

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
logfd = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def log(text, echo=False):
    os.write(logfd, (text + "\n").encode())
    if echo:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


torch.manual_seed(a.seed)
model = torch.nn.Sequential(
    torch.nn.Linear(32, a.width), torch.nn.ReLU(), torch.nn.Dropout(0.1),
    torch.nn.Linear(a.width, a.width), torch.nn.ReLU(), torch.nn.Dropout(0.1),
    torch.nn.Linear(a.width, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if not a.every:
    store = None
elif a.mode == "gradlog":
    store = pmckpt.GradientLog(opt, name=a.name, ramdisk=a.dir,  # hooks the optimizer itself
                               records_per_state=a.records_per_state, on_busy=a.on_busy)
else:
    store = pmckpt.Store(name=a.name, ramdisk=a.dir,
                         on_busy="wait" if a.mode == "sync" else a.on_busy)

start = 0
if store is not None:
    try:
        sd = store.load()
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])
        torch.set_rng_state(sd["rng"])
        start = sd["step"]
    except pmckpt.NoCheckpointError:
        pass
    if a.mode != "gradlog":
        pmckpt.hook_optimizer(opt, store)
log(f"R {start}", echo=True)
if a.mode == "gradlog" and store.last_recovery and store.last_recovery["replayed"]:
    # the step's record replayed onto the whole state before it (and the records between)
    log(f"Y {start} {store.last_recovery['records_replayed']}")


def batch(step):
    g = torch.Generator().manual_seed(a.seed * 1000003 + step)
    x = torch.randn(64, 32, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    return x, y


def done(h):
    if a.mode == "gradlog":  # with its kind ("state" or "record"), for test_resume's kills
        log(f"D {h.step} {h.kind}", echo=True)
    else:
        log(f"D {h.step}")


pending = collections.deque()  # handles in flight, oldest first
for step in range(start, a.steps):
    x, y = batch(step)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()  # with save_async: waits (hook) only for the layers it updates
    log(f"L {step} {loss.item().hex()}", echo=True)
    if store is not None and (step + 1) % a.every == 0:
        state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": step + 1,
                 "rng": torch.get_rng_state()}
        if a.mode == "sync":
            log(f"B {step + 1}", echo=True)
            store.save(state, step + 1)
            log(f"E {step + 1}")
        else:
            while len(pending) >= a.in_flight:
                h = pending.popleft()
                h.wait()
                done(h)
            log(f"B {step + 1}", echo=True)
            h = store.save_async(state, step + 1)
            # queued behind a checkpoint in flight (on_busy="queue"): its handle says so
            if getattr(getattr(h, "_handle", h), "_queued", None) is not None:
                log(f"Q {step + 1}")
            pending.append(h)
            log(f"E {step + 1}")
while pending:
    h = pending.popleft()
    h.wait()
    done(h)
if store is not None:
    store.close()
log("F", echo=True)
