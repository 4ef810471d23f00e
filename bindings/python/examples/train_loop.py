# SPDX-License-Identifier: BSD-3-Clause
"""A complete training loop checkpointing with pmckpt, four ways (docs/python.md).

    python train_loop.py sync|async|dcp|gradlog [--steps N] [--every K] [--dir DIR]

gradlog checkpoints every step with pmckpt.GradientLog (a whole state and the
next step's gradients in turn); --every then only sets how often it prints.

Run it, kill it (Ctrl-C, kill -9) and run it again: it resumes from the
newest checkpoint.  Without --pm it keeps the store in DIR/pmckpt-NAME.pool
(DIR: /dev/shm); with --shared it also copies every checkpoint out to a
directory as safetensors.
"""
import argparse
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import pmckpt
import pmckpt.dcp

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=("sync", "async", "dcp", "gradlog"))
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--every", type=int, default=20)
ap.add_argument("--dir", default=None,
                help="ramdisk directory for the store (default: your own, /dev/shm/pmckpt-UID)")
ap.add_argument("--pm", default=None, help="a devdax device, fsdax file or namespace name")
ap.add_argument("--pm-records", default=None,
                help="gradlog with --pm: a second file or device for the gradient records")
ap.add_argument("--shared", default=None, help="copy checkpoints out to this directory")
a = ap.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=50, gamma=0.5)

where = dict(name=f"example-{a.mode}", ramdisk=None if a.pm else a.dir, shared_dir=a.shared,
             keep=2)
if a.mode == "gradlog":  # hooks the optimizer itself
    store = pmckpt.GradientLog(opt, path=a.pm, records_path=a.pm_records, **where)
else:
    store = pmckpt.Store(a.pm, **where)


def batch(step):  # synthetic data: a pure function of the step
    g = torch.Generator().manual_seed(step)
    return torch.randn(64, 32, generator=g), torch.randint(0, 10, (64,), generator=g)


def train_step(step):
    x, y = batch(step)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    return loss.item()


# ---------------------------------------------------------------- resume
start = 0
if a.mode in ("sync", "async", "gradlog"):
    try:
        sd = store.load()  # the newest checkpoint whose checksums verify
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])
        sched.load_state_dict(sd["sched"])
        torch.set_rng_state(sd["rng"])
        start = sd["step"]
        print(f"resumed at step {start} ({store.last_recovery})")
    except pmckpt.NoCheckpointError:
        print("no checkpoint: starting fresh")
else:
    warnings.simplefilter("ignore")  # DCP: "assuming a single process"
    if store.newest_step() is not None:
        msd, osd = get_state_dict(model, opt)  # (creates the optimizer's state to load into)
        state = {"model": msd, "optim": osd, "sched": sched.state_dict(), "step": 0}
        dcp.load(state, storage_reader=pmckpt.dcp.StorageReader(store))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        sched.load_state_dict(state["sched"])
        start = state["step"]
        print(f"resumed at step {start}")
    else:
        print("no checkpoint: starting fresh")

# ---------------------------------------------------------------- train
if a.mode == "async":
    pmckpt.hook_optimizer(opt, store)  # opt.step() waits only for the layers it updates

pending = None
for step in range(start, a.steps):
    loss = train_step(step)
    if a.mode == "gradlog":  # every step: a whole state, then the next step's gradients
        state = {"model": model.state_dict(), "optim": opt.state_dict(),
                 "sched": sched.state_dict(), "step": step + 1, "rng": torch.get_rng_state()}
        store.save_async(state, step + 1)
    if (step + 1) % a.every:
        continue
    if a.mode == "sync":
        state = {"model": model.state_dict(), "optim": opt.state_dict(),
                 "sched": sched.state_dict(), "step": step + 1, "rng": torch.get_rng_state()}
        store.save(state, step + 1)  # durable when it returns
    elif a.mode == "gradlog":
        pass  # saved above
    elif a.mode == "async":
        state = {"model": model.state_dict(), "optim": opt.state_dict(),
                 "sched": sched.state_dict(), "step": step + 1, "rng": torch.get_rng_state()}
        pending = store.save_async(state, step + 1)  # returns at once; written layer by layer
    else:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "sched": sched.state_dict(), "step": step + 1}
        if pending is not None:
            pending.result()  # one DCP checkpoint in flight at a time
        pending = dcp.async_save(state, storage_writer=pmckpt.dcp.StorageWriter(store),
                                 checkpoint_id=step + 1)
    print(f"step {step + 1}: loss {loss:.4f}, checkpoint")

if a.mode == "dcp" and pending is not None:
    pending.result()
store.close()  # waits for the checkpoint in flight and the copy-out
