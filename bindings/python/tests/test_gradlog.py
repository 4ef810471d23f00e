# SPDX-License-Identifier: BSD-3-Clause
"""pmckpt.GradientLog: a checkpoint every step, every other one as that step's
gradients, replayed on load.  Every loaded state must equal, bit for bit, the
state the training held at that step; a record that does not belong to the
newest whole state, or fails its checksums, must not be applied; every step
that cannot be replayed exactly must be saved whole."""
import gc
import os
import subprocess
import sys
import threading
import time
import warnings

import torch

import pmckpt
from common import clone, flip, same, slot_address
from tap import Tap
from pmckpt._lib import lib

T = Tap()
D = T.tmpdir("pmck-py-gradlog-")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


class Job:
    """A small model with what a replay has to get right: two parameter groups
    (weight decay on matrices only), a learning-rate schedule, BatchNorm's
    buffers, dropout (the RNG state), a frozen parameter, one parameter that
    gets no gradient, tied weights (one parameter under two names)."""

    def __init__(self, seed=0, width=64, opt="adamw"):
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(16, width)
        self.body = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.BatchNorm1d(width),
                                        torch.nn.ReLU(), torch.nn.Dropout(0.1))
        self.head = torch.nn.Linear(width, 16, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.unused = torch.nn.Parameter(torch.randn(3))  # in the optimizer, never a gradient
        self.frozen = torch.nn.Parameter(torch.randn(5), requires_grad=False)
        self.model = torch.nn.ModuleDict({"emb": self.emb, "body": self.body, "head": self.head})
        self.model.register_parameter("unused", self.unused)
        self.model.register_parameter("frozen", self.frozen)
        mats = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in self.model.named_parameters() if p.dim() < 2 and p.requires_grad]
        if opt == "adamw":
            self.opt = torch.optim.AdamW([{"params": mats, "weight_decay": 0.1},
                                          {"params": rest, "weight_decay": 0.0}],
                                         lr=1e-2, betas=(0.9, 0.95), foreach=True)
        else:
            self.opt = torch.optim.SGD(mats + rest, lr=0.1,
                                       momentum=0.9 if opt == "sgd" else 0.0)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda k: 1.0 / (1 + k))
        self.step = 0

    def forward_backward(self, step):
        g = torch.Generator().manual_seed(1000 + step)
        x = torch.randint(0, 16, (32,), generator=g)
        y = torch.randint(0, 16, (32,), generator=g)
        logits = self.head(self.body(self.emb(x)))
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.opt.zero_grad()
        loss.backward()

    def train_step(self):
        self.step += 1
        self.forward_backward(self.step)
        self.opt.step()
        self.sched.step()

    def state(self):
        return {"model": self.model.state_dict(), "optim": self.opt.state_dict(),
                "sched": self.sched.state_dict(), "step": self.step,
                "rng": torch.get_rng_state(), "note": ("tuple", 1)}

    def apply(self, sd):
        self.model.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["optim"])
        self.sched.load_state_dict(sd["sched"])
        torch.set_rng_state(sd["rng"])
        self.step = sd["step"]


def reference(n):
    """The states of an uninterrupted run without checkpoints, steps 1..n."""
    job, out = Job(), {}
    for _ in range(n):
        job.train_step()
        out[job.step] = clone(job.state())
    return out


REF = reference(12)


def open_log(name, job, **kw):
    log = pmckpt.GradientLog(job.opt, name=name, ramdisk=D, **kw)
    log.hook_module(job.model)  # BatchNorm's buffers change in the next forward
    return log


def train(log, job, upto, kinds=None):
    while job.step < upto:
        job.train_step()
        h = log.save_async(job.state(), job.step)
        if kinds is not None:
            kinds.append(h.kind)
    log.wait()


def loaded(name, opt="adamw", replay=True, **kw):
    """(state, last_recovery, warnings, job) of a new job's load; kw: open_log's."""
    job = Job(seed=99, opt=opt)  # other initial values: everything from the checkpoint
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with open_log(name, job, **kw) as log:
            sd = log.load(replay=replay)
            return sd, log.last_recovery, [str(x.message) for x in w], job


def replayed_as(name, want, opt="adamw"):
    """None if a new job's load of `name` replays a record and gives want, bit for bit."""
    sd, rec, _, _ = loaded(name, opt=opt)
    return same(want, sd) if rec["replayed"] else f"not replayed: last_recovery {rec}"


def chain_loads_as(name, k, step, replayed, want):
    """None if a new job's load of `name` (records_per_state=k) gives step `step`, with
    `replayed` records replayed, equal to want bit for bit."""
    sd, rec, _, _ = loaded(name, records_per_state=k)
    if rec["step"] != step or rec["records_replayed"] != replayed:
        return f"last_recovery {rec}"
    return same(want, sd)


def resumed_to_12(name, n, sd, job, **kw):
    """None if job, with sd (the loaded state of step n) applied, holds step n's model and
    optimizer state, and trained on from there saves a step 12 that loads bit-exact.
    kw: open_log's."""
    job.apply(sd)
    r = same(REF[n]["model"], job.model.state_dict()) or \
        same(REF[n]["optim"], job.opt.state_dict())
    if r:
        return f"after apply: {r}"
    with open_log(name, job, **kw) as log:
        train(log, job, 12)
    sd, rec, _, _ = loaded(name, **kw)
    return same(REF[12], sd) or (None if rec["step"] == 12 else f"then: {rec}")


def t_alternates(n):
    name = f"alt{n}"
    job, kinds = Job(), []
    with open_log(name, job) as log:
        train(log, job, n, kinds)
        counts = (log.states_saved, log.records_saved)
    want = ["state", "record"] * (n // 2) + ["state"] * (n % 2)
    if kinds != want:
        return f"kinds {kinds}, wanted {want}"
    if counts != (n - n // 2, n // 2):
        return f"counts {counts}"
    sd, rec, warned, job2 = loaded(name)
    whole = n - (n % 2 == 0)
    if rec["step"] != n or rec["replayed"] != (n % 2 == 0) or rec["whole_state_step"] != whole:
        return f"last_recovery {rec}"
    r = same(REF[n], sd)
    if r:
        return f"step {n} loaded: {r}"
    sd_whole, rec_whole, _, _ = loaded(name, replay=False)  # the whole state alone
    r = same(REF[whole], sd_whole)
    if r or rec_whole["replayed"] or rec_whole["step"] != whole:
        return f"load(replay=False): {r or rec_whole}"
    return resumed_to_12(name, n, sd, job2)


T.run("every step saved, whole states and records in turn: step 7 (a whole state) "
      "loads bit-exact, and training resumed from it reaches step 12 bit-exact", t_alternates, 7)
T.run("step 8 (a record) replayed onto step 7's whole state: bit-exact, the model and "
      "optimizer left at step 8 (load(replay=False): step 7); resumed to step 12 bit-exact",
      t_alternates, 8)


def t_chain(k, n):
    """records_per_state=k: a whole state, then k records, and again; step n loads
    bit-exact (its chain's records replayed in turn), and training resumed from it
    reaches step 12 bit-exact."""
    name = f"chain{k}-{n}"
    job, kinds = Job(), []
    with open_log(name, job, records_per_state=k) as log:
        train(log, job, n, kinds)  # ends with log.wait()
        counts = (log.states_saved, log.records_saved)
        stores = [st.name for st in log.record_stores]
        inflight = [st.name for st in (log.store,) + log.record_stores if st.inflight]
    if inflight:
        return f"still in flight after GradientLog.wait(): {inflight}"
    want = ((["state"] + ["record"] * k) * n)[:n]
    if kinds != want or counts != (want.count("state"), want.count("record")):
        return f"kinds {kinds}, wanted {want}; counts {counts}"
    if stores != [f"{name}-grads"] + [f"{name}-grads{i}" for i in range(2, k + 1)]:
        return f"records' stores {stores}"
    sd, rec, warned, job2 = loaded(name, records_per_state=k)
    whole = n - (n - 1) % (k + 1)
    if (rec["step"], rec["whole_state_step"], rec["records_replayed"], rec["replayed"],
            len(rec["records"])) != (n, whole, n - whole, n > whole, n - whole) or warned or \
            (n > whole and rec["record"]["step"] != whole + 1):
        return f"last_recovery {rec}, warnings {warned}"
    r = same(REF[n], sd)
    if r:
        return f"step {n} loaded: {r}"
    r = resumed_to_12(name, n, sd, job2, records_per_state=k)
    if r:
        return r
    files = [os.path.join(D, f"pmckpt-{x}.pool") for x in [name] + stores]
    with open_log(name, Job(), records_per_state=k) as log:
        log.destroy()
    left = [f for f in files if os.path.exists(f)]
    return f"left by destroy(): {left}" if left else None


T.run("records_per_state=3, step 8 (the third record after whole state 5): records 6, 7 "
      "and 8 replayed in turn, bit-exact; resumed to step 12 bit-exact", t_chain, 3, 8)
T.run("records_per_state=3, step 6 (the first record after whole state 5): bit-exact; "
      "resumed to step 12 bit-exact", t_chain, 3, 6)
T.run("records_per_state=2, step 7 (a whole state after a full chain): bit-exact; resumed "
      "to step 12 bit-exact", t_chain, 2, 7)


def t_chain_releases():
    """A record's gradients are released at the first call after its commit (each call
    polls the records' stores), not when its store begins its next record, K + 1 steps
    later."""
    import weakref
    job = Job(width=256)
    with open_log("chainrel", job, records_per_state=3) as log:
        refs = {}
        for _ in range(3):
            job.forward_backward(job.step + 1)
            job.step += 1
            refs[job.step] = [weakref.ref(p.grad) for p in job.model.parameters()
                              if p.grad is not None]
            job.opt.step()
            job.sched.step()
            log.save_async(job.state(), job.step)
            if job.step == 2:  # record 2: wait for its commit without ending it
                t0 = time.monotonic()
                while lib.pmck_pipeline_busy(log.records._pipe) and time.monotonic() - t0 < 30:
                    time.sleep(0.001)
                gc.collect()
                alive = sum(r() is not None for r in refs[2])
        gc.collect()
        after = sum(r() is not None for r in refs[2])
    if not alive:
        return "record 2's gradients released before any call after it (nothing to test)"
    return None if after == 0 else \
        f"{after} of record 2's {len(refs[2])} gradients still held after the call of step 3"


T.run("records_per_state=3: a record's gradients released by the first call after its "
      "commit", t_chain_releases)


def t_chain_cut():
    """A chain's damaged record ends it: the records before it are replayed, none after;
    a GradientLog with a shorter chain replays that many records (with a warning naming
    the chain saved), and one with a longer chain the records there are."""
    job = Job()
    with open_log("cut", job, records_per_state=3) as log:
        train(log, job, 8)  # state 5, records 6, 7, 8
    for k, step in ((1, 6), (2, 7), (4, 8)):
        sd, rec, warned, _ = loaded("cut", records_per_state=k)
        # a shorter chain than the one saved: a warning says so
        if rec["step"] != step or len(warned) != (k < 3) or \
                (k < 3 and "records_per_state=3" not in warned[0]):
            return f"records_per_state={k}: last_recovery {rec}, warnings {warned}"
        if warned:
            T.diag(warned[0])
        r = same(REF[step], sd)
        if r:
            return f"records_per_state={k}, step {step}: {r}"
    with pmckpt.Store(name="cut-grads2", ramdisk=D) as st:
        st.load()
        newest = st.last_recovery["slot"]  # the record of step 7
    path, off, _ = slot_address(D, "cut-grads2", newest, "grads/0")
    flip(path, off + 8)
    sd, rec, warned, _ = loaded("cut", records_per_state=3)
    if rec["step"] != 6 or rec["records_replayed"] != 1 or \
            not any("record of step 7" in w for w in warned):
        return f"record 7 damaged: last_recovery {rec}, warnings {warned}"
    return same(REF[6], sd)


T.run("a chain cut by a damaged record (7 of 6, 7, 8): step 6 loads, with a "
      "RecoveryWarning; chains of 1, 2 and 4 records replay what they reach (1 and 2 with "
      "a warning)", t_chain_cut)


def t_chain_other_run():
    """A records' store holding a record of the step after the chain's last, from
    another run (another whole state's id): not replayed onto this chain."""
    names = [f"pmckpt-chainrun{x}.pool" for x in ("", "-grads", "-grads2")]
    job = Job()
    with open_log("chainrun", job, records_per_state=2) as log:
        train(log, job, 3)  # state 1, records 2 and 3
    with open(os.path.join(D, names[2]), "rb") as f:
        old = f.read()
    for n in names:
        os.unlink(os.path.join(D, n))
    job = Job()
    for p in job.model.parameters():  # another run
        if p.requires_grad:
            p.data.add_(1e-3)
    with open_log("chainrun", job, records_per_state=2) as log:
        train(log, job, 2)  # state 1, record 2
        want = clone(job.state())
    with open(os.path.join(D, names[2]), "wb") as f:
        f.write(old)  # its record of step 3 follows the first run's whole state 1
    sd, rec, warned, _ = loaded("chainrun", records_per_state=2)
    if rec["step"] != 2 or rec["records_replayed"] != 1 or warned:
        return f"last_recovery {rec}, warnings {warned}"
    return same(want, sd)


T.run("a record of another run's chain in the second records' store: not replayed (the "
      "whole state's id), the chain ends before it", t_chain_other_run)


def t_chain_fallbacks():
    """Within a chain, a step that cannot be recorded is saved whole and starts a new
    chain: parameters changed in place since the last record, two optimizer steps."""
    job = Job()
    kinds = []
    with warnings.catch_warnings(record=True) as w, \
            open_log("chainfb", job, records_per_state=3) as log:
        warnings.simplefilter("always")

        def step(extra=None):
            job.train_step()
            if extra:
                extra()
            kinds.append(log.save(job.state(), job.step).kind)
        step()  # 1 state
        step()  # 2 record
        with torch.no_grad():
            job.unused.mul_(1.0)  # in place, between the record and the next step
        step()  # 3 state: changed since the last checkpoint
        step()  # 4 record
        step()  # 5 record
        step(lambda: job.opt.step())  # 6 state: two optimizer steps since record 5
        for _ in range(3):
            step()  # 7, 8, 9 records
        want = clone(job.state())
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    expect = ["state", "record", "state", "record", "record", "state", "record", "record",
              "record"]
    if kinds != expect:
        return f"kinds {kinds}, wanted {expect}"
    for why in ("changed in place since the last checkpoint",
                "2 optimizer steps since the last checkpoint"):
        if sum(why in m for m in msgs) != 1:
            return f"not one warning saying '{why}': {msgs}"
    return chain_loads_as("chainfb", 3, 9, 3, want)


T.run("records_per_state=3: a parameter changed in place after a record, two optimizer "
      "steps after one: those steps saved whole (one warning each), a new chain after "
      "each; step 9 (three records after state 6) loads bit-exact", t_chain_fallbacks)


def t_bytes():
    """A record holds the gradients and the small rest: a third of Adam's whole state."""
    job = Job(width=512)
    with open_log("bytes", job) as log:
        train(log, job, 2)
        full = lib.pmck_store_tensor_bytes(log.store._h.store)
        rec = lib.pmck_store_tensor_bytes(log.records._h.store)
    T.diag(f"tensor bytes of a slot: whole state {full >> 10} KiB, record {rec >> 10} KiB "
           f"({rec / full:.3f})")
    return None if rec / full < 0.36 else f"a record takes {rec / full:.3f} of a whole state"


T.run("a record's store is about a third of the whole states' (AdamW: gradients against "
      "parameters and two moments)", t_bytes)


def t_grads_released():
    job = Job()
    with open_log("release", job) as log:
        job.train_step()
        log.save(job.state(), job.step)
        if any(p.grad is None for p in job.opt.param_groups[0]["params"]):
            return "a whole state's save took gradients"
        job.train_step()
        grads = [p.grad for g in job.opt.param_groups for p in g["params"]]
        h = log.save_async(job.state(), job.step)
        if h.kind != "record":
            return f"second save: {h.kind}"
        if any(p.grad is not None for g in job.opt.param_groups for p in g["params"]):
            return "a record left .grad on the parameters"
        h.wait()
        if not h.done:
            return "record handle not done after wait"
        del grads
    return None


T.run("a record takes the step's gradients off the parameters (.grad None, as zero_grad), "
      "a whole state leaves them", t_grads_released)


def t_fallbacks():
    """Steps that cannot be replayed exactly are saved whole."""
    out = []
    job = Job()
    with warnings.catch_warnings(record=True) as w, open_log("fallback", job) as log:
        warnings.simplefilter("always")
        job.train_step()
        out.append(log.save(job.state(), job.step).kind)  # state
        job.train_step()
        job.train_step()  # two steps since the whole state
        out.append(log.save(job.state(), job.step).kind)  # state
        job.forward_backward(job.step + 1)
        job.step += 1
        job.opt.step(lambda: None)  # a closure
        job.sched.step()
        out.append(log.save(job.state(), job.step).kind)  # state (after a state)
        job.train_step()
        out.append(log.save(job.state(), job.step).kind)  # record
        job.train_step()
        out.append(log.save(job.state(), job.step).kind)  # state
        job.train_step()
        job.opt.zero_grad(set_to_none=False)  # the step's gradients changed in place
        out.append(log.save(job.state(), job.step).kind)  # state
        job.train_step()
        job.opt.step()  # no: two steps
        out.append(log.save(job.state(), job.step).kind)
        job.train_step()
        out.append(log.save(job.state(), job.step).kind)  # record
        last, want_last = job.step, clone(job.state())
    want = ["state", "state", "state", "record", "state", "state", "state", "record"]
    if out != want:
        return f"kinds {out}, wanted {want}"
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    for why in ("2 optimizer steps", "a closure", "changed in place"):
        if sum(why in m for m in msgs) != 1:
            return f"not one warning saying '{why}': {msgs}"
    sd, rec, _, _ = loaded("fallback")
    if rec["step"] != last or not rec["replayed"]:
        return f"last_recovery {rec}"
    return same(want_last, sd)


T.run("two steps since the whole state, a closure, gradients zeroed in place: saved whole, "
      "each with one warning saying why; records again after, and the last one loads "
      "bit-exact", t_fallbacks)


def with_optimizer(job, cls):
    """job with an optimizer of class cls (an AdamW subclass) over its parameter
    groups, and a constant learning rate."""
    job.opt = cls(job.opt.param_groups, lr=1e-2)
    job.sched = torch.optim.lr_scheduler.LambdaLR(job.opt, lambda k: 1.0)
    return job


def run_loop(name, job, steps, step_fn=None, before_step=None, state_fn=None, **kw):
    """Trains and saves every step (with a custom step call or a change before it, the
    state made by state_fn); (kinds, the state of the last step, GradientLog's warnings)."""
    kinds = []
    with warnings.catch_warnings(record=True) as w, open_log(name, job, **kw) as log:
        warnings.simplefilter("always")
        for _ in range(steps):
            job.step += 1
            job.forward_backward(job.step)
            if before_step:
                before_step(job)
            (step_fn or (lambda j: j.opt.step()))(job)
            job.sched.step()
            st = (state_fn or Job.state)(job)
            kinds.append(log.save(st, job.step).kind)
        want = clone(st)
    return kinds, want, [str(x.message) for x in w if "GradientLog" in str(x.message)]


def t_lr_before_step():
    """The learning rate set before each step, as nanoGPT's loop does (and weight decay
    with it): a replay must use the groups the step ran with, not the whole state's."""
    def set_lr(job):
        for g in job.opt.param_groups:
            g["lr"] = 1e-2 * (1 + job.step % 3)
            g["weight_decay"] = 0.01 * job.step
    job = Job()
    kinds, want, _ = run_loop("lrbefore", job, 4, before_step=set_lr)
    if kinds != ["state", "record"] * 2:
        return f"kinds {kinds}"
    sd, rec, _, _ = loaded("lrbefore")
    if not rec["replayed"]:
        return f"last_recovery {rec}"
    return same(want, sd)


T.run("learning rate and weight decay set before each step: the record replayed with them, "
      "bit-exact", t_lr_before_step)


def t_step_hooks():
    """Another step hook: a replay does not run it, so steps are saved whole (a warning
    says why) unless trust_step_hooks; a hook that scales the gradients before
    GradientLog takes them is then replayed bit-exact from what it left."""
    def scale(opt, args, kwargs):
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad.mul_(0.25)
    job = Job()
    h = job.opt.register_step_pre_hook(scale)
    kinds, _, msgs = run_loop("hooks", job, 4)
    h.remove()
    if kinds != ["state"] * 4 or not any("step hook" in m for m in msgs):
        return f"without trust_step_hooks: kinds {kinds}, warnings {msgs}"
    job = Job()
    h = job.opt.register_step_pre_hook(scale)
    kinds, want, _ = run_loop("hooks-trusted", job, 4, trust_step_hooks=True)
    h.remove()
    if kinds != ["state", "record"] * 2:
        return f"trusted: kinds {kinds}"
    return replayed_as("hooks-trusted", want)


T.run("a step hook of the user's: whole states and a warning; with trust_step_hooks, a hook "
      "scaling the gradients before they are taken replays bit-exact", t_step_hooks)


def t_hook_after_changes_grads():
    """A trusted hook registered after GradientLog replaces the gradients: GradientLog's
    own pre-hook runs last (moved there at each whole state), so the record holds what the
    step used, replayed bit-exact.  A step function that clips the gradients in place
    itself: the step used others than it was given, so the step is saved whole."""
    job = Job()
    with open_log("after", job, trust_step_hooks=True) as log:
        def double(opt, args, kwargs):
            for p in job.model.parameters():
                if p.grad is not None:
                    p.grad = p.grad * 2  # replaced, not changed in place
        h = job.opt.register_step_pre_hook(double)
        kinds = []
        for _ in range(4):
            job.train_step()
            kinds.append(log.save(job.state(), job.step).kind)
        h.remove()
        want = clone(job.state())
    if kinds != ["state", "record"] * 2:
        return f"a later hook: kinds {kinds}"
    sd, rec, _, _ = loaded("after")
    r = same(want, sd) if rec["replayed"] else f"last_recovery {rec}"
    if r:
        return f"a later hook: {r}"

    for name, change in (("clipping", lambda p: p.grad.clamp_(-1e-3, 1e-3)),
                         # new tensors: the ones taken before the step unchanged
                         ("replacing", lambda p: setattr(p, "grad", p.grad * 0.5))):
        class Changing(torch.optim.AdamW):
            def step(self, closure=None, change=change):
                with torch.no_grad():
                    for g in self.param_groups:
                        for p in g["params"]:
                            if p.grad is not None:
                                change(p)
                return super().step(closure)
        kinds, _, msgs = run_loop(name, with_optimizer(Job(), Changing), 4)
        if kinds != ["state"] * 4 or not any("replaced or changed during the step" in m
                                              for m in msgs):
            return f"{name} the gradients in the step: kinds {kinds}, warnings {msgs}"


T.run("gradients replaced by a later trusted hook: recorded as the step used them, "
      "bit-exact; clipped in place or replaced inside the step: saved whole, with a "
      "warning",
      t_hook_after_changes_grads)


def t_params_changed_outside():
    """Parameters clipped in place after each step (WGAN's weight clipping): not the
    optimizer's doing, so no record (their version counters say so)."""
    def clip(job):
        with torch.no_grad():
            for p in job.model.parameters():
                p.clamp_(-0.05, 0.05)

    def decay_moments(job):  # the optimizer's state, not its parameters
        with torch.no_grad():
            for st in job.opt.state.values():
                st["exp_avg"].mul_(0.5)
    for where in ("after the step", "before the forward", "moments after the step",
                  "moments before the forward"):
        job = Job()
        kinds = []
        change = decay_moments if where.startswith("moments") else clip
        with warnings.catch_warnings(record=True) as w, \
                open_log(f"clip-{where.replace(' ', '')[:12]}", job) as log:
            warnings.simplefilter("always")
            for _ in range(4):
                if where.endswith("before the forward"):
                    change(job)  # after the whole state's save, before the step
                job.train_step()
                if where.endswith("after the step"):
                    change(job)
                kinds.append(log.save(job.state(), job.step).kind)
        msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
        if kinds != ["state"] * 4 or not any("outside optimizer.step()" in m for m in msgs):
            return f"clipped {where}: kinds {kinds}, warnings {msgs}"


T.run("parameters clipped, or the optimizer's moments scaled, in place after each step or "
      "before each forward, outside the optimizer: whole states, with a warning",
      t_params_changed_outside)


def t_sparse_grads():
    """An embedding with sparse gradients (SGD takes them): every step saved whole."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(16, 4, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    kinds = []
    with warnings.catch_warnings(record=True) as w, \
            pmckpt.GradientLog(opt, name="sparse", ramdisk=D) as log:
        warnings.simplefilter("always")
        for step in range(1, 5):
            opt.zero_grad()
            emb(torch.tensor([1, 3, 3])).sum().backward()
            opt.step()
            kinds.append(log.save({"model": emb.state_dict(), "optim": opt.state_dict()},
                                  step).kind)
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    if kinds != ["state"] * 4 or not any("sparse" in m for m in msgs):
        return f"kinds {kinds}, warnings {msgs}"


T.run("sparse gradients: whole states, with a warning", t_sparse_grads)


def t_state_read():
    """The optimizer's state of a parameter that has none read after the step (a
    logging callback's opt.state[p]: the defaultdict adds an empty state): not a change,
    so the steps are still recorded in turn, without a warning, and replayed bit-exact."""
    job = Job()

    def state_fn(j):
        j.opt.state[j.unused].get("step")  # `unused` never has a gradient, nor a state
        return Job.state(j)

    def forget(j):  # and a new empty one made at every step: gone before the step
        j.opt.state.pop(j.unused, None)
    kinds, want, msgs = run_loop("stateread", job, 4, state_fn=state_fn, before_step=forget)
    if kinds != ["state", "record"] * 2 or msgs:
        return f"kinds {kinds}, warnings {msgs}"
    return replayed_as("stateread", want)


T.run("an empty optimizer state made by reading it after the step: records as before, "
      "replayed bit-exact", t_state_read)


def t_state_counter():
    """An optimizer that keeps a counter of its own in its state, under a key that is
    not a parameter (torch's state_dict() allows it): its hooks and GradientLog's take
    it as it is; records in turn, replayed bit-exact (the step counts in the replay too)."""
    class Counting(torch.optim.AdamW):
        def step(self, closure=None):
            self.state["n_updates"] = self.state.get("n_updates", 0) + 1
            return super().step(closure)
    kinds, want, msgs = run_loop("counter", with_optimizer(Job(), Counting), 4)
    if kinds != ["state", "record"] * 2 or msgs:
        return f"kinds {kinds}, warnings {msgs}"
    if want["optim"]["state"].get("n_updates") != 4:
        return f"the counter: {want['optim']['state'].get('n_updates')}"
    job = with_optimizer(Job(seed=99), Counting)  # a replay needs the same optimizer
    with open_log("counter", job) as log:
        sd = log.load()
        if not log.last_recovery["replayed"]:
            return f"not replayed: {log.last_recovery}"
    return same(want, sd)


T.run("an optimizer's own counter in its state (not a parameter's): records in turn, "
      "replayed bit-exact", t_state_counter)


def t_add_param_group():
    """A parameter group added between the whole state and the record: saved whole."""
    job = Job()
    extra = torch.nn.Parameter(torch.randn(4))
    kinds = []
    with warnings.catch_warnings(record=True) as w, open_log("addgroup", job) as log:
        warnings.simplefilter("always")
        job.train_step()
        kinds.append(log.save(job.state(), job.step).kind)
        job.opt.add_param_group({"params": [extra], "weight_decay": 0.0})
        job.step += 1
        job.forward_backward(job.step)
        job.opt.step()  # (the scheduler does not know the new group)
        kinds.append(log.save(job.state(), job.step).kind)
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    if kinds != ["state", "state"] or not any("add_param_group" in m for m in msgs):
        return f"kinds {kinds}, warnings {msgs}"


T.run("a parameter group added after the whole state: the next step saved whole, with a "
      "warning", t_add_param_group)


def t_state_swapped():
    """Two parameters' optimizer states swapped between the whole state and the step
    (same shapes, and version counters that line up): the step saved whole."""
    job = Job()
    kinds = []
    with warnings.catch_warnings(record=True) as w, open_log("swapped", job) as log:
        warnings.simplefilter("always")
        for _ in range(2):
            job.train_step()
            kinds.append(log.save(job.state(), job.step).kind)
        job.train_step()
        kinds.append(log.save(job.state(), job.step).kind)
        st, a, b = job.opt.state, job.body[1].weight, job.body[1].bias
        st[a], st[b] = st[b], st[a]
        job.train_step()
        kinds.append(log.save(job.state(), job.step).kind)
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    if kinds != ["state", "record", "state", "state"] or \
            not any("changed in place since the last checkpoint" in m for m in msgs):
        return f"kinds {kinds}, warnings {msgs}"


T.run("two parameters' optimizer states swapped after the whole state: the next step saved "
      "whole, with a warning", t_state_swapped)


def t_step_none():
    """step(None) and step(closure=None), as optimizer wrappers call it: plain steps."""
    for name, fn in (("none-pos", lambda j: j.opt.step(None)),
                     ("none-kw", lambda j: j.opt.step(closure=None))):
        job = Job()
        kinds, want, _ = run_loop(name, job, 4, step_fn=fn)
        if kinds != ["state", "record"] * 2:
            return f"{name}: kinds {kinds}"
        sd, rec, _, _ = loaded(name)
        r = same(want, sd)
        if r or not rec["replayed"]:
            return f"{name}: {r or rec}"


T.run("step(None) and step(closure=None): recorded and replayed bit-exact", t_step_none)


def t_grad_views():
    """Gradients that are views of one buffer (DDP's gradient_as_bucket_view): the next
    backward writes into the same memory, so a record copies them at its call."""
    job = Job()
    params = [p for g in job.opt.param_groups for p in g["params"]]

    def bucket(job):
        n = sum(p.numel() for p in params if p.grad is not None)
        buf = torch.empty(n)
        off = 0
        for p in params:
            if p.grad is not None:
                buf[off:off + p.numel()].copy_(p.grad.reshape(-1))
                p.grad = buf[off:off + p.numel()].view(p.shape)
                off += p.numel()
        job.buf = buf
    kinds, shared = [], []
    with open_log("views", job) as log:
        real = log.records.save_async

        def save_async(rec, step):  # the record's sources: none in the buffer
            ptr = job.buf.untyped_storage().data_ptr()
            shared.extend(g for g in rec["grads"]
                          if g is not None and g.untyped_storage().data_ptr() == ptr)
            return real(rec, step)
        log.records.save_async = save_async
        for _ in range(4):
            job.step += 1
            job.forward_backward(job.step)
            bucket(job)
            job.opt.step()
            job.sched.step()
            kinds.append(log.save_async(job.state(), job.step).kind)
            job.buf.fill_(float("nan"))  # the next backward, in the same memory
        want = clone(job.state())
    if kinds != ["state", "record"] * 2 or shared:
        return f"kinds {kinds}, {len(shared)} recorded gradients in the shared buffer"
    return replayed_as("views", want)


T.run("gradients that are views of one buffer, overwritten right after the call: the record "
      "holds the step's, bit-exact", t_grad_views)


def t_stateless_sgd():
    job = Job(opt="plain-sgd")
    kinds, want, msgs = run_loop("plainsgd", job, 4)
    if kinds != ["state", "record"] * 2:
        return f"kinds {kinds}, warnings {msgs}"
    return replayed_as("plainsgd", want, opt="plain-sgd")


T.run("SGD without momentum (an optimizer without state): recorded and replayed bit-exact",
      t_stateless_sgd)


def t_list_subclass():
    """A tensor in a list subclass, changed in place right after each save: the record
    holds its value at the call (Store loads the subclass as a list)."""
    class Rows(list):
        pass
    job = Job()
    rows = Rows([torch.zeros(4)])
    with open_log("listsub", job) as log:
        for _ in range(4):
            job.train_step()
            rows[0].fill_(float(job.step))
            st = job.state()
            st["rows"] = rows
            log.save_async(st, job.step)
            want = clone(st)
            want["rows"] = [want["rows"][0]]
            rows[0].fill_(-1.0)  # after the call: not the step's
    return replayed_as("listsub", want)


T.run("a tensor in a list subclass, changed right after the call: the record holds the "
      "call's value", t_list_subclass)


def t_large_rest():
    """Tensors outside the optimizer larger than the gradients (frozen weights, an EMA
    copy): records still, with one warning that they are most of a whole state."""
    job = Job()
    ema = {k: v.clone() for k, v in job.model.state_dict().items()}
    frozen = torch.randn(1 << 18)

    def with_rest(job):
        return {**job.state(), "ema": ema, "frozen": frozen}
    kinds, want, msgs = run_loop("largerest", job, 4, state_fn=with_rest)
    if kinds != ["state", "record"] * 2 or len(msgs) != 1 or "most of a whole state" not in \
            msgs[0]:
        return f"kinds {kinds}, warnings {msgs}"
    T.diag(msgs[0])
    return replayed_as("largerest", want)


T.run("tensors outside the optimizer larger than the gradients: recorded (one warning), "
      "replayed bit-exact", t_large_rest)


def t_records_file_truncated():
    """The records' file cut short: load() gives the whole state with a warning, and later
    saves are whole states saying why."""
    job = Job()
    with open_log("trunc", job) as log:
        train(log, job, 4)
        path = log.records.region_path
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    sd, rec, warned, _ = loaded("trunc")
    if rec["step"] != 3 or rec["replayed"] or not any("record of step 4" in m for m in warned):
        return f"last_recovery {rec}, warnings {warned}"
    r = same(REF[3], sd)
    if r:
        return r
    job = Job()
    job.apply(clone(REF[3]))
    kinds, _, msgs = run_loop("trunc", job, 2)
    if kinds != ["state", "state"] or not any("records' store is unusable" in m for m in msgs):
        return f"then: kinds {kinds}, warnings {msgs}"


T.run("the records' file truncated: load() gives the whole state before, with a warning; "
      "later steps saved whole, saying why", t_records_file_truncated)


def t_no_optimizer_state():
    def no_optim(job):
        return {"model": job.model.state_dict(), "step": job.step}

    def no_param(job):
        st = job.state()
        del st["model"]["body.0.weight"]
        return st
    def opt_state(job, how):
        st = job.state()
        st["optim"]["state"] = {i: {k: how(v) if isinstance(v, torch.Tensor) else v
                                    for k, v in s.items()}
                                for i, s in st["optim"]["state"].items()}
        return st
    for name, fn, why in (("noopt", no_optim, "no state_dict() of the optimizer"),
                          ("noparam", no_param, "not in the state_dict"),
                          ("optclone", lambda job: opt_state(job, torch.clone),
                           "no state_dict() of the optimizer")):
        kinds, _, msgs = run_loop(name, Job(), 4, state_fn=fn)
        if kinds != ["state"] * 4 or len(msgs) != 1 or why not in msgs[0]:
            return f"{name}: kinds {kinds}, warnings {msgs}"
        T.diag(msgs[0])
    # The optimizer's state tensors as other objects over the same memory: its state still,
    # the record replayed from the whole state
    kinds, _, msgs = run_loop("optview", Job(), 4,
                              state_fn=lambda job: opt_state(job, lambda v: v.view_as(v)))
    if kinds != ["state", "record"] * 2 or msgs:
        return f"optimizer state as views: kinds {kinds}, warnings {msgs}"


T.run("a state_dict without the optimizer's state, or without one of its parameters, or "
      "with copies of its state: whole states only, one warning saying why; with views of "
      "its state: records", t_no_optimizer_state)


def t_damaged_record():
    job = Job()
    with open_log("damaged", job) as log:
        train(log, job, 4)
    with pmckpt.Store(name="damaged-grads", ramdisk=D) as st:
        st.load()
        newest = st.last_recovery["slot"]  # the record of step 4
    path, off, _ = slot_address(D, "damaged-grads", newest, "grads/0")
    flip(path, off + 8)
    sd, rec, warned, _ = loaded("damaged")
    if rec["step"] != 3 or rec["replayed"]:
        return f"last_recovery {rec}"
    if not any("record of step 4" in w for w in warned):
        return f"warnings {warned}"
    T.diag(next(w for w in warned if "record of step 4" in w)[:300])
    return same(REF[3], sd)


T.run("a damaged record is not replayed: the whole state before it loads, with a "
      "RecoveryWarning", t_damaged_record)


def t_other_state():
    """A record follows one whole state, named by its id, not by its step number: the
    whole states' store lost (its file removed) and the job rerun from step 5 to a
    whole state of step 7, the old step 8's record is not applied to it, and no record
    older than it is saved."""
    job = Job()
    with open_log("other", job) as log:
        train(log, job, 8)  # state 7, record 8
    os.unlink(os.path.join(D, "pmckpt-other.pool"))
    job = Job()
    job.apply(clone(REF[5]))
    for p in job.model.parameters():  # a different run from there (a GPU's rerun differs)
        if p.requires_grad:
            p.data.add_(1e-3)
    kinds = []
    with warnings.catch_warnings(record=True) as w, open_log("other", job) as log:
        warnings.simplefilter("always")
        train(log, job, 7, kinds)
        want = clone(job.state())
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    if kinds != ["state", "state"] or not any("holds step 8" in m for m in msgs):
        return f"kinds {kinds}, warnings {msgs}: a record of step 7 behind the record of step 8"
    sd, rec, _, _ = loaded("other")
    if rec["step"] != 7 or rec["replayed"]:
        return f"the old record was applied: {rec}"
    return same(want, sd)


T.run("a record is applied only to the whole state it follows (its id), not to another "
      "state of the same step", t_other_state)


class Held:
    """A SaveHandle held as not committed until gate is set (a whole state fallen behind)."""

    def __init__(self, h, gate):
        self._h, self._gate = h, gate
        self.skipped = h.skipped

    @property
    def done(self):
        return self._gate.is_set() and self._h.done

    def wait(self):
        self._gate.wait()
        self._h.wait()


def held_save(log, job, wrap, gate, kinds, steps):
    """Trains and saves `steps` steps, the whole states' SaveHandles of the steps in wrap
    wrapped (step -> wrapper), then saves one step more in a thread: True if that save
    was still blocked after a second, then sets gate.  kinds: each save's kind."""
    real = log.store.save_async

    def save_async(state, step):
        h = real(state, step)
        return wrap[step](h) if step in wrap else h
    log.store.save_async = save_async
    for _ in range(steps):
        job.train_step()
        kinds.append(log.save_async(job.state(), job.step).kind)
    return blocked_save(log, job, kinds, gate)


def blocked_save(log, job, kinds, gate):
    """Trains a step and saves it in a thread: True if that save was still blocked after
    a second; then sets gate and lets it end.  kinds: its kind appended."""
    job.train_step()
    t = threading.Thread(target=lambda: kinds.append(log.save_async(job.state(),
                                                                    job.step).kind))
    t.start()
    t.join(1.0)
    blocked = t.is_alive()
    gate.set()
    t.join()
    return blocked


def t_record_waits():
    """Record 6 goes into record 2's slot.  Until the whole state of step 3 (record 4's
    base) commits, record 2 on whole state 1 is the newest loadable step: record 6 must
    wait for whole state 3, or a crash then would load step 1."""
    job = Job()
    gate = threading.Event()
    out = []
    with open_log("behind", job) as log:
        # state 1, record 2, state 3 (held), record 4, state 5; then record 6
        blocked = held_save(log, job, {3: lambda h: Held(h, gate)}, gate, out, 5)
    if out != ["state", "record"] * 3:
        return f"kinds {out}"
    return None if blocked else "record 6 began while whole state 3 was not committed"


T.run("a record waits for the whole state of the record before it (fallen behind, as "
      "on_busy='queue' allows): the newest loadable step never goes back", t_record_waits)


class Failed(Held):
    def wait(self):
        self._h.wait()
        raise pmckpt.Error("whole state failed (test)")


def t_previous_state_failed():
    """The whole state of the record before failed: that record never counted, so the one
    before it is still the newest loadable step; this step is saved whole instead of
    overwriting it, and the next record waits for that whole state (held here)."""
    job = Job()
    out = []
    gate = threading.Event()
    with warnings.catch_warnings(record=True) as w, open_log("prevfail", job) as log:
        warnings.simplefilter("always")
        blocked = held_save(log, job, {3: lambda h: Failed(h, None),
                                       6: lambda h: Held(h, gate)}, gate, out, 6)
        for _ in range(3):
            job.train_step()
            out.append(log.save_async(job.state(), job.step).kind)
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    # 6 whole instead of a record, 7 a record again once whole state 6 committed
    want = ["state", "record", "state", "record", "state", "state", "record", "state",
            "record", "state"]
    if out != want or not any("before failed" in m for m in msgs):
        return f"kinds {out}, wanted {want}; warnings {msgs}"
    return None if blocked else "record 7 began before whole state 6 committed"


T.run("the whole state of the record before failed: this step saved whole, with a warning, "
      "not over the record before that; records again from the next step",
      t_previous_state_failed)


def t_chain_waits():
    """records_per_state=2: state 1, records 2 and 3, state 4 (held), records 5 and 6,
    state 7, record 8.  Records 5 and 6 go into their stores' second slots, not over
    records 2 and 3, which whole state 1 still makes loadable: they begin at once, and
    their handles are done only when whole state 4 and the records before them are
    (record 5 fails here: record 6's wait raises it).  Record 8 goes into the slot of chain 1's
    record 2, the newest loadable step's chain until whole state 4 commits: it waits for
    whole state 4, as a chain's first record waits for the whole state of the chain
    before."""
    job = Job()
    gate, failed = threading.Event(), threading.Event()
    failed.set()
    timer = threading.Timer(10, gate.set)  # a wait that should not be: a failure, not a hang
    kinds, handles = [], {}
    with open_log("chainwait", job, records_per_state=2) as log:
        def wrapped(save, step, wrap):
            def save_async(state, s):
                h = save(state, s)
                return wrap(h) if s == step else h
            return save_async
        log.store.save_async = wrapped(log.store.save_async, 4, lambda h: Held(h, gate))
        log.records.save_async = wrapped(log.records.save_async, 5,
                                         lambda h: Failed(h, failed))
        timer.start()
        for _ in range(7):
            job.train_step()
            h = log.save_async(job.state(), job.step)
            handles[job.step], _ = h, kinds.append(h.kind)
        early = gate.is_set()
        handles[6]._handle.wait()  # record 6 itself is committed
        done_early = handles[6].done
        blocked = blocked_save(log, job, kinds, gate)
        try:
            handles[6].wait()
            raised = None
        except pmckpt.Error as e:
            raised = str(e)
    timer.cancel()
    if early:
        return "a record of whole state 4's chain waited for it"
    if kinds != ["state", "record", "record"] * 2 + ["state", "record"]:
        return f"kinds {kinds}"
    if done_early:
        return "record 6's handle done while whole state 4 was not committed"
    if not blocked:
        return "record 8 began while whole state 4 was not committed"
    return None if raised and "test" in raised else \
        f"record 6's wait did not raise record 5's failure: {raised}"


T.run("records_per_state=2: a chain's later records begin while its whole state is in "
      "flight, their handles wait for it and the records before; the next chain's first "
      "record waits for that whole state", t_chain_waits)


class Lost:
    """The handle of a save that never happened (the process died before it)."""
    skipped = False
    done = True

    def wait(self):
        pass


class Skipped(Lost):
    skipped = True


def t_restart_waits(how):
    """A run leaves a record newer than the newest loadable step (whole state 3 lost,
    record 4 of its chain committed).  Loaded from step 2 again (how: "rollback", by the
    same GradientLog, which saved before; "restart", by a new one; "elsewhere", a new one
    that does not load: the state of step 2 restored by other means), the first chain's
    first record (step 5, the records' newest being 4) overwrites record 2, which step 2
    needs, so it waits for the first whole state saved since (held)."""
    rollback = how == "rollback"
    name = f"restart-{how}"
    job = Job()
    gate, out = threading.Event(), []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        log = open_log(name, job)
        real = log.store.save_async
        log.store.save_async = lambda state, step: Lost() if step == 3 else real(state, step)
        kinds = []
        train(log, job, 4, kinds)
        log.store.save_async = real
        if not rollback:
            log.close()
            job = Job()
            log = open_log(name, job)
        with log:
            if how == "elsewhere":
                job.apply(clone(REF[2]))
                step = 2
            else:
                job.apply(log.load())
                step = log.last_recovery["step"]
            blocked = held_save(log, job, {3: lambda h: Held(h, gate)}, gate, out, 2)
    msgs = [str(x.message) for x in w if "GradientLog" in str(x.message)]
    if kinds != ["state", "record", "state", "record"]:
        return f"first run: kinds {kinds}"
    if step != 2 or out != ["state", "state", "record"] or \
            not any("holds step 4" in m for m in msgs):
        return f"loaded step {step}, kinds {out}, warnings {msgs}"
    return None if blocked else "record 5 began while whole state 3 was not committed"


T.run("after a restart, the first record waits for a whole state of the restart: one "
      "left by the run before may have been newer than the step loaded", t_restart_waits,
      "restart")
T.run("after a rollback (load() by the GradientLog that saved), the same", t_restart_waits,
      "rollback")
T.run("a new GradientLog that does not load (the state restored by other means): the same",
      t_restart_waits, "elsewhere")


def t_chain_skipped():
    """A record skipped (on_busy='skip') ends its chain: the next step is a whole state,
    not a record that would follow a record no store holds."""
    job = Job()
    with open_log("chainskip", job, records_per_state=2) as log:
        real = log.records.save_async
        log.records.save_async = lambda rec, step: Skipped() if step == 2 else real(rec, step)
        kinds = []
        train(log, job, 5, kinds)
        counts = (log.states_saved, log.records_saved)
        want = clone(job.state())
    if kinds != ["state", "record", "state", "record", "record"] or counts != (2, 2):
        return f"kinds {kinds}, counts {counts}"
    return chain_loads_as("chainskip", 2, 5, 2, want)


T.run("a chain's record skipped: the next step saved whole, and the chain after it loads "
      "bit-exact", t_chain_skipped)


def t_chain_store_broken():
    """The second position's store truncated: its records refused (whole states, with a
    warning naming it); the first position's records still saved and replayed."""
    job = Job()
    with open_log("chainbroken", job, records_per_state=2) as log:
        train(log, job, 3)
        path = log.record_stores[1].region_path
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    job = Job()
    job.apply(clone(REF[3]))
    kinds, want, msgs = run_loop("chainbroken", job, 4, records_per_state=2)
    if kinds != ["state", "record", "state", "record"] or \
            sum("chainbroken-grads2" in m and "unusable" in m for m in msgs) != 1:
        return f"kinds {kinds}, warnings {msgs}"
    return chain_loads_as("chainbroken", 2, 7, 1, want)


T.run("the second records' store truncated: records there refused, whole states instead "
      "(one warning naming it); first records still saved and replayed", t_chain_store_broken)


def t_open_fails():
    """A records' store that cannot be made: the stores made before it are closed, and
    the error raised is that one's."""
    from pmckpt import gradlog
    made, closed = [], []

    class Counting(gradlog.Store):
        def __init__(self, *a, **kw):
            if len(made) == 2:
                raise pmckpt.Error("the third store refused (test)")
            super().__init__(*a, **kw)
            made.append(self)

        def close(self):
            closed.append(self.name)
            super().close()
    real, gradlog.Store = gradlog.Store, Counting
    try:
        pmckpt.GradientLog(Job().opt, name="openfail", ramdisk=D, records_per_state=2)
        return "opened"
    except pmckpt.Error as e:
        if "(test)" not in str(e):
            return f"raised {e!r}"
    finally:
        gradlog.Store = real
    return None if closed == ["openfail", "openfail-grads"] else f"closed {closed}"


T.run("a records' store that cannot be made: the others closed, its error raised",
      t_open_fails)


def t_skipped_after_failed():
    """The whole state after a failed one skipped (on_busy='skip'): it guards nothing, so
    the next whole state does: state 3 fails, record 4 follows it, step 6 is saved whole
    (the chain before failed) and skipped, step 7 whole (held), and record 8 waits for
    it."""
    job = Job()
    out = []
    gate = threading.Event()
    with warnings.catch_warnings(record=True), open_log("skipfail", job) as log:
        warnings.simplefilter("always")
        real = log.store.save_async

        def save_async(state, step):
            if step == 6:
                return Skipped()
            h = real(state, step)
            return Failed(h, gate) if step == 3 else Held(h, gate) if step == 7 else h
        log.store.save_async = save_async
        blocked = held_save(log, job, {}, gate, out, 7)
    want = ["state", "record", "state", "record", "state", "state", "state", "record"]
    if out != want:
        return f"kinds {out}, wanted {want}"
    return None if blocked else "record 8 began while whole state 7 was not committed"


T.run("a skipped whole state after a failed one: the next whole state guards the next "
      "record", t_skipped_after_failed)


def t_sgd():
    job = Job(opt="sgd")
    with open_log("sgd", job) as log:
        train(log, job, 6)
        want = clone(job.state())
    return replayed_as("sgd", want, opt="sgd")


T.run("SGD with momentum: a record replayed bit-exact", t_sgd)


def t_bad_input():
    job = Job()
    T.raises("group= refused", ValueError, lambda: open_log("bad", job, group=True),
             match="one rank's")
    T.raises("path without records_path refused", ValueError,
             lambda: pmckpt.GradientLog(job.opt, name="bad", path=os.path.join(D, "x.pool")),
             match="records_path")
    T.raises("not an optimizer", TypeError, lambda: pmckpt.GradientLog(object(), name="bad",
                                                                          ramdisk=D))
    for k in (0, -1, True, 2.0, "3", None):
        T.raises(f"records_per_state={k!r} refused", ValueError,
                 lambda: open_log("bad", job, records_per_state=k), match="records_per_state")
    pm = [os.path.join(D, f"pm{i}.pool") for i in range(4)]
    for why, paths, k in (("one file for two positions", pm[1], 2),
                          ("two files for three", pm[1:3], 3),
                          ("the whole states' file again", [pm[1], pm[0]], 2),
                          ("one file twice", [pm[1], pm[1]], 2),
                          ("not a path", [pm[1], 3], 2)):
        T.raises(f"records_path: {why}: refused", ValueError,
                 lambda: pmckpt.GradientLog(job.opt, name="bad", path=pm[0], records_path=paths,
                                            records_per_state=k), match="records_path")
    T.ok(not any(os.path.exists(p) for p in pm), "nothing created by the refused calls")
    with open_log("empty", job) as log:
        T.raises("nothing saved: NoCheckpointError", pmckpt.NoCheckpointError, log.load)
    with pmckpt.Store(name="plain", ramdisk=D) as s:
        s.save(job.state(), 1)
    with open_log("plain", Job()) as log:
        T.raises("a store written by Store.save: CorruptError naming it", pmckpt.CorruptError,
                 log.load, match="GradientLog")
    # a record replayed with an optimizer of other parameters
    with open_log("mismatch", job) as log:
        train(log, job, 2)
    other = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    with pmckpt.GradientLog(other, name="mismatch", ramdisk=D) as log:
        T.raises("an optimizer of other parameters: Error naming both counts", pmckpt.Error,
                 log.load, match="parameters")


t_bad_input()


def t_without_numpy():
    """numpy is an optional dependency of the package: import pmckpt and a GradientLog's
    record and replay work where it cannot be imported."""
    code = f"""
import builtins
real = builtins.__import__
def imp(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and (name == "numpy" or name.startswith("numpy.")):
        raise ModuleNotFoundError("no numpy (test)")
    return real(name, globals, locals, fromlist, level)
builtins.__import__ = imp
import torch, pmckpt
m = torch.nn.Linear(4, 2)
opt = torch.optim.AdamW(m.parameters())
with pmckpt.GradientLog(opt, name="nonumpy", ramdisk={D!r}) as log:
    kinds = []
    for step in (1, 2):
        m(torch.ones(3, 4)).sum().backward()
        opt.step()
        kinds.append(log.save({{"model": m.state_dict(), "optim": opt.state_dict()}}, step).kind)
    want = {{k: v.clone() for k, v in m.state_dict().items()}}
m2 = torch.nn.Linear(4, 2)
opt2 = torch.optim.AdamW(m2.parameters())
with pmckpt.GradientLog(opt2, name="nonumpy", ramdisk={D!r}) as log:
    sd = log.load()
print(kinds, log.last_recovery["replayed"],
      all(torch.equal(want[k], sd["model"][k]) for k in want))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    out = p.stdout.strip()
    return None if out == "['state', 'record'] True True" else \
        f"rc {p.returncode}: {out}\n{p.stderr[-1500:]}"


T.run("without numpy (an optional dependency): import pmckpt, a record saved and replayed "
      "bit-exact", t_without_numpy)
T.done()
