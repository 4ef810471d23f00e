# SPDX-License-Identifier: BSD-3-Clause
"""safetensors interop and two-tier recovery: the copy-out files load with
safetensors.torch.load_file into tensors equal to the saved ones; a file
written by safetensors.torch.save_file can be imported; when the local store
is lost or corrupted, load() falls back to the newest complete step of the
shared directory."""
import os
import shutil

import safetensors.torch
import torch

import pmckpt
from pmckpt._state import META_NAME

from common import mlp, one_step, same, train_state
from tap import Tap

torch.set_num_threads(1)
T = Tap()
D = T.tmpdir("pmck-py-interop-")
SHARED = os.path.join(T.tmpdir("pmck-py-shared-"), "ckpt")


def state(seed):
    m = mlp(seed=seed, bn=True)
    opt = torch.optim.Adam(m.parameters())
    one_step(m, opt, seed)
    sd = train_state(m, opt, step=seed)
    g = torch.Generator().manual_seed(seed)
    sd["extra"] = {"bf16": torch.randn(5, 3, generator=g).bfloat16(),
                   "f16": torch.randn(7, generator=g).half(),
                   "i32": torch.randint(-9, 9, (4, 4), generator=g, dtype=torch.int32),
                   "mask": torch.rand(6, generator=g) > 0.5, "lr": 0.01 * seed, "tag": "run-a"}
    return sd


states = {s: state(s) for s in (1, 2, 3)}


def flat_tensors(sd, prefix=""):
    out = {}
    for k, v in sd.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat_tensors(v, key + "/"))
        elif isinstance(v, torch.Tensor):
            out[key] = v
    return out


def test_copyout_every():
    shared = os.path.join(T.tmpdir("pmck-py-shared-every-"), "ckpt")
    m = mlp(width=16, depth=2)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    with pmckpt.Store(name="co-every", ramdisk=D, shared_dir=shared, keep=4,
                      copyout_every=3) as s:
        hook = pmckpt.hook_optimizer(opt, s)
        for step in range(1, 8):
            one_step(m, opt, step)
            if step % 2:
                s.save(train_state(m, opt, step), step)
            else:
                s.save_async(train_state(m, opt, step), step)
        s.wait()
        s.wait_copyout()
        copied = s.stats()["copyout"]["copied"]
        hook.remove()
    dirs = sorted(os.listdir(shared))
    if dirs != ["step-000000000003", "step-000000000006"] or copied != 2:
        return f"shared dir holds {dirs}, {copied} copied"
    shutil.rmtree(shared)


def test_copyout():
    with pmckpt.Store(name="co", ramdisk=D, shared_dir=SHARED, keep=2) as s:
        for step, sd in states.items():
            s.save(sd, step)
        s.wait_copyout()
        st = s.stats()["copyout"]
        T.diag(f"copy-out: {st['copied']} steps, {st['bytes']} bytes, {st['deleted']} deleted")
    dirs = sorted(os.listdir(SHARED))
    if dirs != ["step-000000000002", "step-000000000003"]:
        return f"shared dir holds {dirs}"
    for d in dirs:
        if sorted(os.listdir(os.path.join(SHARED, d))) != ["COMPLETE", "rank-00000.safetensors"]:
            return f"{d}: {os.listdir(os.path.join(SHARED, d))}"


def rank_file(step):
    return os.path.join(SHARED, f"step-{step:012d}", "rank-00000.safetensors")


def test_safetensors_load_file():
    got = safetensors.torch.load_file(rank_file(3))
    want = flat_tensors(states[3])
    missing = sorted(set(want) - set(got))
    if missing:
        return f"missing {missing[:5]}"
    for k, v in want.items():
        r = same(v.contiguous(), got[k])
        if r:
            return f"{k}: {r}"
    if META_NAME not in got or got[META_NAME].dtype != torch.uint8:
        return "no metadata tensor"
    T.diag(f"{len(got)} tensors, e.g. model/0.weight {got['model/0.weight'].dtype} "
           f"{list(got['model/0.weight'].shape)}, extra/bf16 {got['extra/bf16'].dtype}")


def test_pmckpt_load_file():
    return same(states[3], pmckpt.load_safetensors(rank_file(3)))


def test_import_foreign():
    g = torch.Generator().manual_seed(7)
    foreign = {"embed.weight": torch.randn(10, 4, generator=g),
               "layer.0.weight": torch.randn(4, 4, generator=g).half(),
               "layer.0.bias": torch.zeros(4, dtype=torch.bfloat16),
               "counts": torch.arange(5, dtype=torch.int64)}
    path = os.path.join(D, "foreign.safetensors")
    safetensors.torch.save_file(foreign, path, metadata={"source": "another tool"})
    def ordered(d):  # a foreign file keeps no order of its own: compare by name
        return dict(sorted(d.items()))
    r = same(ordered(foreign), ordered(pmckpt.load_safetensors(path)))
    if r:
        return "load_safetensors: " + r
    with pmckpt.Store(name="imp", ramdisk=D) as s:
        step = s.import_safetensors(path)
        if step != 1:
            return f"imported as step {step}"
    with pmckpt.Store(name="imp", ramdisk=D) as s:
        out = s.load()
        r = same(ordered(foreign), ordered(out))
        if r:
            return "after import: " + r


def test_import_pmckpt_file():
    """A copy-out file goes into a new store through the library's import
    (checksums verified), layout rebuilt from the file."""
    with pmckpt.Store(name="imp2", ramdisk=D) as s:
        step = s.import_safetensors(rank_file(2))
        if step != 2:
            return f"imported as step {step}"
        return same(states[2], s.load())


def test_export():
    path = os.path.join(D, "export.safetensors")
    with pmckpt.Store(name="co", ramdisk=D) as s:
        s.export_safetensors(path)
    got = safetensors.torch.load_file(path)
    for k, v in flat_tensors(states[3]).items():
        r = same(v.contiguous(), got[k])
        if r:
            return r
    return same(states[3], pmckpt.load_safetensors(path))


def test_local_lost():
    """The ramdisk is gone (node replaced): the store is rebuilt from the newest shared step."""
    os.unlink(os.path.join(D, "pmckpt-co.pool"))
    with pmckpt.Store(name="co", ramdisk=D, shared_dir=SHARED, keep=2) as s:
        out = s.load()
        rec = s.last_recovery
        T.diag(f"last_recovery: {rec}")
        if rec["tier"] != "shared" or rec["step"] != 3:
            return f"recovered {rec}"
        r = same(states[3], out)
        if r:
            return r
        s.save(state(4), 4)  # and training goes on in the rebuilt store
        s.wait_copyout()
    with pmckpt.Store(name="co", ramdisk=D) as s:
        return same(state(4), s.load())


def test_bad_shared_file():
    """A corrupted shared file is refused (checksums), and recovery takes the step before."""
    path = rank_file(4)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 10)
        f.write(b"\xff\xfe\xfd")
    try:
        pmckpt.load_safetensors(path)
        return "corrupted file loaded"
    except pmckpt.CorruptError as e:
        T.diag(f"CorruptError: {e}")
    os.unlink(os.path.join(D, "pmckpt-co.pool"))
    with pmckpt.Store(name="co", ramdisk=D, shared_dir=SHARED) as s:
        out = s.load()
        T.diag(f"last_recovery: {s.last_recovery}")
        if s.last_recovery["step"] != 3:
            return f"recovered {s.last_recovery}"
        return same(states[3], out)


T.run("copy-out: steps 2 and 3 kept (keep=2), each a rank file and COMPLETE", test_copyout)
T.run("copyout_every=3: only steps that are multiples of 3 are copied (save and save_async)",
      test_copyout_every)
T.run("safetensors.torch.load_file reads a copy-out file: tensors equal the saved ones",
      test_safetensors_load_file)
T.run("pmckpt.load_safetensors rebuilds the whole state_dict from it", test_pmckpt_load_file)
T.run("a file written by safetensors.torch.save_file is imported and loads", test_import_foreign)
T.run("a copy-out file imports into a new store (library import, checksums)",
      test_import_pmckpt_file)
T.run("export_safetensors writes the newest checkpoint", test_export)
T.run("local store lost: load() takes the newest shared step, saving goes on", test_local_lost)
T.run("a corrupted shared file is refused; recovery falls back to the step before",
      test_bad_shared_file)
T.done()
