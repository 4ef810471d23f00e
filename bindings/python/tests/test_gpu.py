# SPDX-License-Identifier: BSD-3-Clause
"""CUDA tensors through libpmckpt's GPU path (device memory -> region, no
staging copy through host memory), with every GPU strategy; a training loop
on the GPU with save_async and the optimizer hook.  Skipped, with the reason,
where torch sees no GPU or this libpmckpt cannot use one."""
import torch

import pmckpt
from pmckpt import _lib

from common import clone, same
from tap import Tap

T = Tap()
if not torch.cuda.is_available():
    print("1..0 # SKIP torch sees no CUDA device")
    raise SystemExit(0)
if not pmckpt.gpu_available(0):
    print(f"1..0 # SKIP libpmckpt cannot use the GPU: {pmckpt.gpu_unavailable_reason(0)}")
    raise SystemExit(0)
D = T.tmpdir("pmck-py-gpu-")
dev = torch.device("cuda", 0)
T.diag(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {pmckpt.library_path}")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                               torch.nn.Linear(2048, 512)).to(dev)


def gpu_state():
    m = model()
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(64, 512, device=dev)).square().mean().backward()
    opt.step()
    g = torch.Generator(device=dev).manual_seed(1)
    return {"model": m.state_dict(), "optim": opt.state_dict(),
            "bf16": torch.randn(33, 7, device=dev, generator=g).bfloat16(),
            "rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state(), "step": 1}


SOURCES = {"direct": _lib.SOURCE_GPU_DIRECT, "kernel": _lib.SOURCE_GPU_KERNEL,
           "staged": _lib.SOURCE_GPU_STAGED, "snapshot": _lib.SOURCE_GPU_SNAPSHOT}


def test_strategy(src):
    st = gpu_state()
    want = clone(st)
    with pmckpt.Store(name=f"gpu-{src}", ramdisk=D, gpu_source=src) as s:
        s.save(st, 1)
        if s._pipe_source[0] != SOURCES[src]:
            return f"pipeline source {s._pipe_source}, not the GPU strategy {src}"
        out = s.load()  # back where it was saved: CUDA tensors on the GPU
        r = same(want, out)
        if r:
            return r
        cpu = s.load(map_location="cpu")
        if cpu["model"]["0.weight"].device.type != "cpu":
            return "map_location ignored"
        return same(want["model"]["0.weight"].cpu(), cpu["model"]["0.weight"])


def test_train_async():
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device=dev)
    m(x).square().mean().backward()
    opt.step()
    with pmckpt.Store(name="gpu-train", ramdisk=D) as s:
        pmckpt.hook_optimizer(opt, s)
        for step in range(1, 6):
            m(x).square().mean().backward()
            st = {"model": m.state_dict(), "optim": opt.state_dict(), "step": step}
            snap = clone(st)
            s.save_async(st, step)
            opt.step()  # in place on the GPU: waits (hook) for the layers it updates
            opt.zero_grad()
            r = same(snap, s.load())
            if r:
                return f"step {step}: {r}"
        T.diag(f"pipeline: {s.stats()['pipeline']}")


for src in SOURCES:
    T.run(f"CUDA state_dict through the GPU path ({src}): saved, loaded on the GPU and on the CPU",
          test_strategy, src)
T.run("training on the GPU with save_async + hook_optimizer: each checkpoint equals its state",
      test_train_async)
T.done()
