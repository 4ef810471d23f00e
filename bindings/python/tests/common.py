# SPDX-License-Identifier: BSD-3-Clause
"""Helpers shared by the binding's tests."""
import os
from ctypes import byref, c_size_t, c_void_p

import numpy as np
import torch

from pmckpt import _lib
from pmckpt._lib import lib


def same(a, b, path="", check_strides=True):
    """None if a and b are equal (types, dtypes, shapes, strides, bits), else where they differ."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return f"{path}: tensor vs {type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if check_strides and a.numel() > 1 and a.stride() != b.stride():
            return f"{path}: strides {a.stride()} vs {b.stride()}"
        if a.device != b.device:
            return f"{path}: device {a.device} vs {b.device}"
        x, y = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
        if x.numel() and not torch.equal(x.reshape(-1).view(torch.uint8) if x.dim() else
                                          x.reshape(1).view(torch.uint8),
                                          y.reshape(-1).view(torch.uint8) if y.dim() else
                                          y.reshape(1).view(torch.uint8)):
            return f"{path}: values differ"
        return None
    if isinstance(a, np.ndarray):
        if not isinstance(b, np.ndarray) or a.dtype != b.dtype or a.shape != b.shape or \
                a.tobytes() != b.tobytes():
            return f"{path}: numpy arrays differ"
        return None
    if type(a) is not type(b):
        return f"{path}: type {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} vs {list(b)}"
        if getattr(a, "_metadata", None) != getattr(b, "_metadata", None):
            return f"{path}: _metadata differs"
        for k in a:
            r = same(a[k], b[k], f"{path}/{k}", check_strides)
            if r:
                return r
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            r = same(x, y, f"{path}/{i}", check_strides)
            if r:
                return r
        return None
    if isinstance(a, float) and a != a:
        return None if b != b else f"{path}: nan vs {b}"
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def clone(v):
    """A deep copy with tensors cloned (strides kept)."""
    if isinstance(v, torch.Tensor):
        out = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
        return out.copy_(v)
    if isinstance(v, dict):
        d = type(v)((k, clone(x)) for k, x in v.items())
        if hasattr(v, "_metadata"):
            d._metadata = v._metadata
        return d
    if isinstance(v, list):
        return [clone(x) for x in v]
    if isinstance(v, tuple):
        return tuple(clone(x) for x in v)
    if isinstance(v, np.ndarray):
        return v.copy()
    return v


def mlp(width=64, depth=3, seed=0, bn=False):
    torch.manual_seed(seed)
    layers, d = [], 16
    for i in range(depth):
        layers.append(torch.nn.Linear(d, width))
        if bn:
            layers.append(torch.nn.BatchNorm1d(width))
        layers.append(torch.nn.ReLU())
        d = width
    layers.append(torch.nn.Linear(d, 4))
    return torch.nn.Sequential(*layers)


def train_state(model, opt, step=0):
    return {"model": model.state_dict(), "optim": opt.state_dict(), "step": step,
            "rng": torch.get_rng_state()}


def one_step(model, opt, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 16, generator=g)
    y = torch.randn(32, 4, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def slot_address(directory, name, slot, tensor):
    """(pool file, offset of `tensor` in `slot`, offset of the metadata) of the
    ramdisk store `name` in directory (through the C API)."""
    path = os.path.join(directory, f"pmckpt-{name}.pool").encode()
    region, pool, store = c_void_p(), c_void_p(), c_void_p()
    _lib.check(lib.pma_region_open(path, 0, _lib.PMA_REGION_NO_PREFAULT, byref(region)))
    _lib.check(lib.pma_pool_open(region, byref(pool)))
    _lib.check(lib.pmck_store_open(pool, name.encode(), byref(store)))
    addr, size = c_void_p(), c_size_t()
    _lib.check(lib.pma_lookup(pool, f"{name}.data{slot}".encode(), byref(addr), byref(size)))
    meta = c_void_p()
    _lib.check(lib.pma_lookup(pool, f"{name}.meta".encode(), byref(meta), byref(size)))
    info = _lib.TensorInfo()
    _lib.check(lib.pmck_store_tensor(store, lib.pmck_store_find(store, tensor.encode()),
                                     byref(info)))
    base = lib.pma_region_addr(region)
    off, meta_off = addr.value - base + info.offset, meta.value - base
    lib.pmck_store_close(byref(store))
    lib.pma_pool_close(byref(pool))
    lib.pma_region_close(byref(region))
    return path, off, meta_off


def load_past_rejections(directory, name, into=None):
    """(state, last_recovery) of a new Store `name` in ramdisk directory's
    load(into=into), its RecoveryWarnings (a rejected slot or step) silenced."""
    import warnings
    import pmckpt
    with pmckpt.Store(name=name, ramdisk=directory) as s:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pmckpt.RecoveryWarning)
            return s.load(into=into), s.last_recovery


def flip(path, off):
    """Flips bits of the byte at off in the file at path."""
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5a]))
