# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed.checkpoint against a pmckpt store, unchanged DCP calls:
dcp.save, dcp.async_save and dcp.load round trips (one process, no process
group), with DCP's own state_dict helpers and planner."""
import logging
import os
import warnings

import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
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


T.run("dcp.save then dcp.load into a fresh model and optimizer: equal", test_save_load)
T.run("dcp.async_save (checkpoint_id = step) then dcp.load: equal", test_async_save)
T.run("dcp.load of the model alone (DCP's planner)", test_partial_load)
T.run("the DCP checkpoint was copied out as safetensors", test_copyout_file)
T.run("Store and DCP checkpoints are told apart", test_kinds_apart)
T.run("a DCP save failing before its commit is dropped; the next one commits",
      test_previous_survives)
T.done()
