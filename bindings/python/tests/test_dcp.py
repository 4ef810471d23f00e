# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed.checkpoint against a pmckpt store, unchanged DCP calls:
dcp.save, dcp.async_save and dcp.load round trips (one process, no process
group), with DCP's own state_dict helpers and planner."""
import inspect
import logging
import os
import time
import warnings

import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
import torch.distributed.checkpoint.default_planner
import torch.distributed.checkpoint.staging
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import pmckpt
import pmckpt.dcp

from common import clone, mlp, one_step, same
from tap import Tap

warnings.simplefilter("ignore")  # DCP: "assuming a single process"
logging.disable(logging.CRITICAL)  # DCP logs the tracebacks of the failures provoked here
torch.set_num_threads(1)
T = Tap()
D = T.tmpdir("pmck-py-dcp-")
SHARED = os.path.join(T.tmpdir("pmck-py-dcp-shared-"), "ckpt")


def job(seed):
    m = mlp(seed=seed, bn=True)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    one_step(m, opt, seed)
    return m, opt


def app_state(m, opt, step):
    msd, osd = get_state_dict(m, opt)
    return {"model": msd, "optim": osd, "trainer": {"step": step, "name": "run", "lr": [0.1, 0.2]}}


m1, o1 = job(1)
want1 = clone(app_state(m1, o1, 11))


def fresh():
    m, opt = job(99)  # other values, same structure
    return m, opt, app_state(m, opt, 0)


def test_save_load():
    with pmckpt.Store(name="dcp", ramdisk=D, shared_dir=SHARED) as s:
        dcp.save(app_state(m1, o1, 11), storage_writer=pmckpt.dcp.StorageWriter(s))
        T.diag(f"dcp.save committed step {s.step}")
        s.wait_copyout()
    m, opt, st = fresh()
    with pmckpt.Store(name="dcp", ramdisk=D) as s:  # a new object: the region mapped anew
        dcp.load(st, storage_reader=pmckpt.dcp.StorageReader(s))
    set_state_dict(m, opt, model_state_dict=st["model"], optim_state_dict=st["optim"])
    r = same(want1, st)
    if r:
        return r
    return same(want1["model"], m.state_dict())


def test_async_save():
    m2, o2 = job(2)
    want2 = clone(app_state(m2, o2, 22))
    with pmckpt.Store(name="dcp", ramdisk=D) as s:
        fut = dcp.async_save(app_state(m2, o2, 22), storage_writer=pmckpt.dcp.StorageWriter(s),
                             checkpoint_id="22")
        fut.result()
        if s.step != 22:
            return f"checkpoint_id 22 committed as step {s.step}"
    m, opt, st = fresh()
    with pmckpt.Store(name="dcp", ramdisk=D) as s:
        dcp.load(st, storage_reader=pmckpt.dcp.StorageReader(s))
        if s.last_recovery["step"] != 22:
            return f"loaded {s.last_recovery}"
    return same(want2, st)


def test_partial_load():
    """DCP's planner loads a subset of the checkpoint (here: the model only)."""
    m, _, st = fresh()
    part = {"model": st["model"]}
    with pmckpt.Store(name="dcp", ramdisk=D) as s:
        dcp.load(part, storage_reader=pmckpt.dcp.StorageReader(s))
    m2, o2 = job(2)
    return same(get_state_dict(m2, o2)[0], part["model"])


def test_resolve_shortcut():
    """With DCP's default planner the writer takes each plain tensor item straight from
    the planner's state_dict (what resolve_data returns for it) and asks resolve_data
    for the other items; a planner that overrides transform_object is honoured."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.planner import WriteItemType
    calls, real = [], DefaultSavePlanner.resolve_data

    def counting(self, item):
        calls.append(item.type)
        return real(self, item)

    DefaultSavePlanner.resolve_data = counting
    try:
        with pmckpt.Store(name="dcp-resolve", ramdisk=D) as s:
            dcp.save(app_state(m1, o1, 11), storage_writer=pmckpt.dcp.StorageWriter(s))
    finally:
        DefaultSavePlanner.resolve_data = real
    if not calls or WriteItemType.TENSOR in calls:
        return (f"resolve_data asked for {len(calls)} items, "
                f"{calls.count(WriteItemType.TENSOR)} of them tensors")

    class Doubling(DefaultSavePlanner):
        def transform_object(self, write_item, object):
            if write_item.type == WriteItemType.TENSOR and object.is_floating_point():
                return object * 2
            return super().transform_object(write_item, object)

    got = {}
    for name, planner in (("dcp-resolve", None), ("dcp-doubling", Doubling())):
        with pmckpt.Store(name=name, ramdisk=D) as s:
            if planner is not None:
                dcp.save(app_state(m1, o1, 11), storage_writer=pmckpt.dcp.StorageWriter(s),
                         planner=planner)
            _, _, got[name] = fresh()
            dcp.load(got[name], storage_reader=pmckpt.dcp.StorageReader(s))
    r = same(want1, got["dcp-resolve"])
    if r:
        return r
    for k, v in want1["model"].items():
        r = same(v * 2 if v.is_floating_point() else v, got["dcp-doubling"]["model"][k], k)
        if r:
            return r


def test_metadata_room():
    """One rank: the writer builds and pickles DCP's global Metadata only to learn its size,
    once per shape of plan on a store (the commit stores the Metadata DCP hands finish);
    a state of 1200 tensors, whose metadata outgrows the default meta_capacity, saves and
    loads; values that outgrow the store's room fail the save before any copy, the
    previous checkpoint kept."""
    W = pmckpt.dcp.StorageWriter
    built, real = [], W._global_metadata

    def counting(self, plans):
        built.append(len(plans[0].items))
        return real(self, plans)

    many = {f"t{i}": torch.full((3,), float(i)) for i in range(1200)}
    W._global_metadata = counting
    try:
        with pmckpt.Store(name="dcp-room", ramdisk=D) as s:
            for step in (1, 2, 3):
                many["t0"][0] = step
                dcp.save({"w": many, "note": "a"}, storage_writer=W(s), checkpoint_id=step)
            if len(built) != 1:
                return f"3 saves of one shape built the metadata {len(built)} times"
            dcp.save({"w": many, "note": "a", "more": "b"}, storage_writer=W(s),
                     checkpoint_id=4)
            if len(built) != 2:
                return f"a save of another shape did not measure its metadata ({built})"
            big = {"w": many, "note": "x" * (8 << 20)}
            T.raises("values beyond the store's room: the save fails, saying what DCP's "
                     "metadata adds", BaseException,
                     lambda: dcp.save(big, storage_writer=W(s), checkpoint_id=5),
                     match="bytes of metadata, and DCP's metadata")
    finally:
        W._global_metadata = real
    got = {"w": {k: torch.zeros(3) for k in many}, "note": None, "more": None}
    with pmckpt.Store(name="dcp-room", ramdisk=D) as s:
        dcp.load(got, storage_reader=pmckpt.dcp.StorageReader(s))
        if s.last_recovery["step"] != 4:
            return f"loaded {s.last_recovery}, not step 4"
    if got["more"] != "b" or got["w"]["t0"][0] != 3 or not torch.equal(got["w"]["t1199"],
                                                                       many["t1199"]):
        return "step 4's values did not come back"


def test_plan_caching():
    """DCP's plan caching (DefaultSavePlanner(enable_plan_caching=True)): from the second
    save on, DCP sends the writer an empty plan (usable=False) and writes the plan it
    cached; every step loads bit-exact, a non-tensor value changed and one added among
    them (the plan changes once, then stays)."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    state = {"w": {f"t{i}": torch.full((4, 3), float(i)) for i in range(20)}, "note": "a"}
    empty = []
    real = pmckpt.dcp.StorageWriter.prepare_local_plan

    def counting(self, plan):
        empty.append(not getattr(plan, "usable", True))
        return real(self, plan)

    pmckpt.dcp.StorageWriter.prepare_local_plan = counting
    try:
        with pmckpt.Store(name="dcp-cached", ramdisk=D) as s:
            for step in range(1, 6):
                for t in state["w"].values():
                    t.add_(1)
                state["note"] = "b" * step
                if step == 3:
                    state["more"] = 7
                dcp.save(state, storage_writer=pmckpt.dcp.StorageWriter(s, step=step),
                         planner=DefaultSavePlanner(enable_plan_caching=True))
                got = {"w": {k: torch.zeros(4, 3) for k in state["w"]}, "note": None}
                if "more" in state:
                    got["more"] = None
                dcp.load(got, storage_reader=pmckpt.dcp.StorageReader(s))
                r = same(state, got)
                if r:
                    return f"step {step}: {r}"
    finally:
        pmckpt.dcp.StorageWriter.prepare_local_plan = real
    if empty != [False, True, False, True, True]:
        return f"plans sent empty, per save: {empty} (wanted the 2nd, 4th and 5th)"
    # One rank: a new store's first save with DCP's cache already holding the plan works
    # (no replicas to restore; the metadata's room is that of the plan DCP cached)
    with pmckpt.Store(name="dcp-cached2", ramdisk=D) as s:
        dcp.save(state, storage_writer=pmckpt.dcp.StorageWriter(s, step=1),
                 planner=DefaultSavePlanner(enable_plan_caching=True))
        got = {"w": {k: torch.zeros(4, 3) for k in state["w"]}, "note": None, "more": None}
        dcp.load(got, storage_reader=pmckpt.dcp.StorageReader(s))
        r = same(state, got)
        if r:
            return f"a second store: {r}"


def test_collector_paused():
    """Python's cyclic collector is off in the writer's and the reader's own calls (planner
    calls made from them see it off) and on again after dcp.save and dcp.load."""
    import gc
    from torch.distributed.checkpoint.default_planner import (DefaultLoadPlanner,
                                                              DefaultSavePlanner)
    seen = []

    class SavePlanner(DefaultSavePlanner):
        def resolve_data(self, write_item):
            seen.append(("write_data", gc.isenabled()))
            return super().resolve_data(write_item)

    class LoadPlanner(DefaultLoadPlanner):
        def resolve_tensor(self, read_item):
            seen.append(("read_data", gc.isenabled()))
            return super().resolve_tensor(read_item)

    class Reader(pmckpt.dcp.StorageReader):  # the inner halves of the reader's calls
        def _read_metadata(self):
            seen.append(("read_metadata", gc.isenabled()))
            return super()._read_metadata()

        def _set_up(self, metadata):
            seen.append(("set_up_storage_reader", gc.isenabled()))
            return super()._set_up(metadata)

    st = {"w": torch.ones(4), "note": "n"}
    with pmckpt.Store(name="dcp-gc", ramdisk=D) as s:
        dcp.save(st, storage_writer=pmckpt.dcp.StorageWriter(s), planner=SavePlanner())
        after_save = gc.isenabled()
        got = {"w": torch.zeros(4), "note": None}
        dcp.load(got, storage_reader=Reader(s), planner=LoadPlanner())
    calls = {c for c, _ in seen}
    if calls != {"write_data", "read_data", "read_metadata", "set_up_storage_reader"} or \
            any(on for _, on in seen):
        return f"collector on in the writer's or reader's calls: {seen}"
    if not after_save or not gc.isenabled():
        return "the collector was left off"
    if not torch.equal(got["w"], st["w"]) or got["note"] != "n":
        return f"loaded {got}"


def test_copyout_file():
    f = os.path.join(SHARED, sorted(os.listdir(SHARED))[-1], "rank-00000.safetensors")
    got = safetensors.torch.load_file(f)
    for k, v in want1["model"].items():
        if f"model.{k}" not in got or not torch.equal(v, got[f"model.{k}"]):
            return f"model.{k} missing or different in {f}"
    T.diag(f"{os.path.basename(os.path.dirname(f))}: {len(got)} tensors")


def test_kinds_apart():
    with pmckpt.Store(name="dcp", ramdisk=D) as s:
        T.raises("Store.load of a DCP checkpoint: Error pointing to dcp.load", pmckpt.Error,
                 s.load, match="dcp")
    with pmckpt.Store(name="plain", ramdisk=D) as s:
        s.save({"w": torch.ones(3)}, 1)
        T.raises("the StorageReader on a Store.save checkpoint: Error pointing to Store.load",
                 pmckpt.Error, pmckpt.dcp.StorageReader(s).read_metadata, match="Store.load")
        T.raises("... so dcp.load fails", BaseException,  # DCP's words vary by version
                 lambda: dcp.load({"w": torch.zeros(3)},
                                  storage_reader=pmckpt.dcp.StorageReader(s)))


def test_previous_survives():
    """A DCP save that fails before its commit leaves the previous checkpoint
    loadable, and the same Store goes on saving."""
    class Boom(pmckpt.dcp.StorageWriter):
        def finish(self, metadata, results):
            raise RuntimeError("simulated failure before commit")
    m3, o3 = job(3)
    with pmckpt.Store(name="dcp", ramdisk=D) as s:
        try:
            dcp.save(app_state(m3, o3, 33), storage_writer=Boom(s))
            return "no failure"
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            T.diag(f"failed as planned: {type(e).__name__}")
        m, opt, st = fresh()
        # Through the same Store: a second one on the name would be refused (BusyError)
        # while this one holds the pool.  Loading recovers from the media all the same.
        dcp.load(st, storage_reader=pmckpt.dcp.StorageReader(s))
        if s.last_recovery["step"] != 22:
            return f"after the failure: loaded {s.last_recovery}"
        m4, o4 = job(4)
        want4 = clone(app_state(m4, o4, 44))
        dcp.save(app_state(m4, o4, 44), storage_writer=pmckpt.dcp.StorageWriter(s),
                 checkpoint_id=44)
    m, opt, st = fresh()
    with pmckpt.Store(name="dcp", ramdisk=D) as s:
        dcp.load(st, storage_reader=pmckpt.dcp.StorageReader(s))
        if s.last_recovery["step"] != 44:
            return f"then: loaded {s.last_recovery}"
    return same(want4, st)


class SlowPlan(pmckpt.dcp.ZeroCopyStorageWriter):
    """Zero-copy writer whose planning, in DCP's thread, takes a while: the training step
    after async_save then surely runs before the checkpoint has begun."""
    def prepare_local_plan(self, plan):
        time.sleep(0.15)
        return super().prepare_local_plan(plan)


def test_zero_copy_training():
    """staging='none' + hook_optimizer/hook_module: async_save every step, training goes
    on at once; each checkpoint loads bit-exact to the state at its save step."""
    m, opt = job(5)
    out = []
    with pmckpt.Store(name="dcpzc", ramdisk=D, verify_sources=True) as s:
        pmckpt.hook_optimizer(opt, s)
        pmckpt.hook_module(m, s)
        waited = []
        for step in range(1, 7):
            st = app_state(m, opt, step)
            want = clone(st)
            slow = step % 2 == 0
            w = SlowPlan(s) if slow else pmckpt.dcp.StorageWriter(s, staging="none")
            if not isinstance(w, torch.distributed.checkpoint.staging.AsyncStager):
                return "StorageWriter(staging='none') is no AsyncStager"
            t0 = time.perf_counter()
            fut = dcp.async_save(st, storage_writer=w, checkpoint_id=step)
            ret = time.perf_counter() - t0
            pending = bool(s.pending)
            one_step(m, opt, 100 + step)  # the hooks wait for what the step updates
            waited.append((ret, pending))
            fut.result()
            if s.step != step:
                return f"step {step}: committed {s.step}"
            _, _, got = fresh()
            dcp.load(got, storage_reader=pmckpt.dcp.StorageReader(s, step=step))
            r = same(want, got)
            if r:
                return f"step {step} ({'slow planning' if slow else 'plain'}): {r}"
            out.append(step)
        if not all(p for _, p in waited[1::2]):
            return f"the slow-planning saves were not pending when async_save returned: {waited}"
    T.diag(f"steps {out} bit-exact; async_save returned in "
           f"{max(r for r, _ in waited) * 1e3:.1f} ms at most")


def test_zero_copy_unhooked():
    """No hook, Store(verify_sources=True), a tensor changed all along the save (the contract
    broken on purpose).  verify_sources checks each 1 MiB chunk's source, after the layer's
    copy, against what was copied: a chunk changed in between fails the save
    (SourceChangedError through DCP's future) and the previous checkpoint stays.  It is a
    safety net, not a guarantee: a chunk changed before (or while) it is copied and not
    after can pass, so a save may commit values from different moments of the save
    (reported here, not failed; docs/python.md, "Zero-copy async_save")."""
    big = torch.zeros(4 << 20)  # 16 MB, one value everywhere: a torn copy mixes several
    small = torch.ones(8)
    failed, mixed, whole = 0, 0, 0
    with pmckpt.Store(name="dcpzc-torn", ramdisk=D, verify_sources=True, threads=1) as s:
        dcp.save({"big": big, "small": small}, storage_writer=pmckpt.dcp.StorageWriter(s),
                 checkpoint_id=1)
        for step in range(2, 8):
            before = s.step
            fut = dcp.async_save({"big": big, "small": small},
                                 storage_writer=pmckpt.dcp.StorageWriter(s, staging="none"),
                                 checkpoint_id=step)
            while not fut.done():
                big.add_(1)  # no hook, no wait_for
            ok = True
            try:
                fut.result()
            except BaseException as e:  # DCP wraps it in CheckpointException
                if "SourceChangedError" not in repr(e):
                    return f"step {step} failed otherwise: {e!r}"[:400]
                failed += 1
                ok = False
            got = {"big": torch.empty_like(big), "small": torch.empty_like(small)}
            r = pmckpt.dcp.StorageReader(s)
            dcp.load(got, storage_reader=r)
            if r.step != (step if ok else before):
                return f"after step {step} ({'committed' if ok else 'failed'}): " \
                       f"loaded step {r.step}, the store had {before} before"
            if ok:
                v = got["big"]
                if torch.equal(v, v[:1].expand_as(v)):
                    whole += 1
                else:
                    mixed += 1
        # How many saves fail depends on where the changes fall against the copies (timing on
        # a busy machine): what must hold is above, every save either failed cleanly with the
        # previous step kept, or committed a checkpoint that loads.  The C and Store tests
        # (tests/pipeline.c, test_store.py's torn source) check that a change after the copy
        # is caught.
        T.diag(f"{failed} saves failed with SourceChangedError (the previous step kept); "
               f"committed: {whole} with one value, {mixed} mixing values of the save's span")


def test_zero_copy_process_refused():
    import pickle
    with pmckpt.Store(name="dcpzc-proc", ramdisk=D) as s:
        w = pmckpt.dcp.StorageWriter(s, staging="none")
        w.stage({"x": torch.ones(2)})
        T.raises("staging='none' cannot be pickled for DCP's checkpoint process",
                 pmckpt.Error, pickle.dumps, w, match="PROCESS")
        if s.pending:
            return "the refused save is still pending: the hooks would wait for it"
        s.wait_for([torch.ones(1)])  # returns at once


T.run("dcp.save then dcp.load into a fresh model and optimizer: equal", test_save_load)
T.run("dcp.async_save (checkpoint_id = step) then dcp.load: equal", test_async_save)
T.run("dcp.load of the model alone (DCP's planner)", test_partial_load)
T.run("default planner: tensors taken from its state_dict, other items resolved; a planner's "
      "transform_object honoured", test_resolve_shortcut)
T.run("one rank: the global metadata built only to size its room, once per shape; 1200 "
      "tensors save and load; values beyond the room fail early, the previous step kept",
      test_metadata_room)
PLAN_CACHING = ("DCP's plan caching: five saves, plans sent empty from the second on but after "
                "a value added; each step loads bit-exact, and a second store's first save")
if "enable_plan_caching" in inspect.signature(
        torch.distributed.checkpoint.default_planner.DefaultSavePlanner).parameters:
    T.run(PLAN_CACHING, test_plan_caching)
else:
    T.skip(PLAN_CACHING, f"torch {torch.__version__}'s DefaultSavePlanner has no plan caching")
T.run("the collector paused in the writer's and reader's calls, on again after",
      test_collector_paused)
T.run("the DCP checkpoint was copied out as safetensors", test_copyout_file)
T.run("Store and DCP checkpoints are told apart", test_kinds_apart)
T.run("a DCP save failing before its commit is dropped; the next one commits",
      test_previous_survives)
T.run("zero-copy async_save (staging='none') every step with hook_optimizer/hook_module: "
      "each checkpoint bit-exact to its step, also when planning outlasts the next step",
      test_zero_copy_training)
T.run("zero-copy async_save without the hook, verify_sources=True, a tensor changed all along: "
      "each save fails cleanly (SourceChangedError, previous step kept) or commits one that "
      "loads", test_zero_copy_unhooked)
T.run("zero-copy staging refused for DCP's checkpoint process, pending mark released",
      test_zero_copy_process_refused)
T.done()
