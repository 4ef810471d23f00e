# SPDX-License-Identifier: BSD-3-Clause
"""safetensors files: the copy-out's format.  Reading them needs no
`safetensors` package: the header is JSON, the data plain bytes."""
import json
import mmap
import os
import re
import struct
from ctypes import byref

import torch

from . import _lib
from ._lib import lib, check
from ._state import (META_NAME, Decoder, Layout, assign_layers, parse_blob, tree_names,
                     torch_dtype, _ST_TO_PMCK)
from .errors import CorruptError

_ST_TO_TORCH = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
                "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32,
                "F32": torch.float32, "I64": torch.int64, "F64": torch.float64}
for _n, _t in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
               ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
    if hasattr(torch, _t):
        _ST_TO_TORCH[_n] = getattr(torch, _t)


def read_header(path):
    """The JSON header of a safetensors file (a dict; "__metadata__" included)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise CorruptError(f"{path}: truncated safetensors file")
        n, = struct.unpack("<Q", head)
        if n > 100 << 20 or n > os.fstat(f.fileno()).st_size - 8:
            raise CorruptError(f"{path}: bad safetensors header length {n}")
        try:
            return json.loads(f.read(n))
        except ValueError as e:
            raise CorruptError(f"{path}: bad safetensors header: {e}") from None


def verify(path):
    """Checks a file's structure and, when written by pmckpt, every tensor's checksum."""
    info = _lib.FileInfo()
    check(lib.pmck_safetensors_verify(os.fspath(path).encode(), byref(info)))
    return {"step": info.step, "rank": info.rank, "world_size": info.world_size,
            "ntensors": info.ntensors, "data_bytes": info.data_bytes,
            "has_checksums": bool(info.has_checksums)}


def _tensors(path, header):
    """name -> tensor copied out of the file (the file is closed afterwards)."""
    data_start = 8 + len(_header_bytes(path))
    out = {}
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
        try:
            for name, e in header.items():
                if name == "__metadata__":
                    continue
                dt = _ST_TO_TORCH.get(e["dtype"])
                if dt is None:
                    raise CorruptError(f"{path}: tensor '{name}': unsupported dtype {e['dtype']}")
                a, b = e["data_offsets"]
                t = torch.empty(e["shape"], dtype=dt)
                if b > a:
                    src = torch.frombuffer(mm, dtype=torch.uint8, count=b - a,
                                           offset=data_start + a)
                    t.reshape(-1).view(torch.uint8).copy_(src)
                out[name] = t
        finally:
            if mm is not None:
                mm.close()
    return out


def _header_bytes(path):
    with open(path, "rb") as f:
        n, = struct.unpack("<Q", f.read(8))
        return f.read(n)


def load_file(path, verify_checksums=True):
    """Loads a safetensors file as a state_dict.  A file written by pmckpt
    (copy-out, Store.export_safetensors) is verified against its checksums
    and comes back with its structure and non-tensor values; any other file
    comes back as a flat dict {name: tensor}."""
    path = os.fspath(path)
    if verify_checksums:
        verify(path)
    header = read_header(path)
    tensors = _tensors(path, header)
    if META_NAME not in tensors:
        return tensors
    doc, _ = parse_blob(tensors.pop(META_NAME).numpy().tobytes())
    infos = doc.get("tensors", {})

    def tensor_of(name):
        t, info = tensors[name], infos.get(name, {})
        if "dtype" in info:
            t = t.view(torch_dtype(info["dtype"]))
            shape = info["shape"]
        else:
            shape = list(t.shape)
        if "stride" in info:
            t = torch.empty_strided(shape, info["stride"], dtype=t.dtype).copy_(
                t.reshape(-1).as_strided(shape, info["stride"]))
        return t.reshape(shape)
    cache = {}
    return Decoder(lambda n: cache[n] if n in cache else cache.setdefault(n, tensor_of(n))).decode(doc["tree"])


def layout_of_file(path, header=None):
    """The store layout that wrote a pmckpt safetensors file: names in the order
    of the saved state_dict, store dtypes, shapes and layers, metadata capacity."""
    header = header or read_header(path)
    if META_NAME not in header:
        raise CorruptError(f"{path} was not written by pmckpt (no {META_NAME})")
    e = header[META_NAME]
    a, b = e["data_offsets"]
    data_start = 8 + len(_header_bytes(path))
    with open(path, "rb") as f:
        f.seek(data_start + a)
        doc, _ = parse_blob(f.read(b - a))
    infos = doc.get("tensors", {})
    names = tree_names(doc["tree"])
    rows = []
    for name, layer in zip(names, assign_layers(names)):
        h = header.get(name)
        if h is None:
            raise CorruptError(f"{path}: its metadata names tensor '{name}', which it lacks")
        code = _lib.DT_BYTES if "dtype" in infos.get(name, {}) else _ST_TO_PMCK.get(h["dtype"])
        if code is None:
            raise CorruptError(f"{path}: tensor '{name}': unsupported dtype {h['dtype']}")
        rows.append((name, code, tuple(h["shape"]), layer))
    rows.append((META_NAME, _lib.DT_BYTES, tuple(e["shape"]), rows[-1][3] + 1 if rows else 0))
    return Layout(rows)


_STEP = re.compile(r"^step-(\d+)$")


def read_marker(step_dir):
    """What a step's COMPLETE marker says ({"step", "world_size", "layout_hash",
    "generation"}; markers of older versions lack the last two), or None if
    the step is incomplete or its marker unreadable."""
    try:
        with open(os.path.join(step_dir, "COMPLETE")) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def shared_steps(shared_dir):
    """The complete steps of a copy-out directory as (generation, step, world_size,
    step_dir), newest first by (generation, step) as the library orders one
    layout's runs (markers without a generation count as 0)."""
    try:
        names = os.listdir(shared_dir)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        m = _STEP.match(n)
        if not m:
            continue
        d = os.path.join(shared_dir, n)
        mk = read_marker(d)
        if mk is None:
            continue
        gen = mk.get("generation", 0)
        world = mk.get("world_size", 1)
        out.append((gen if isinstance(gen, int) else 0, int(m.group(1)),
                    world if isinstance(world, int) else 1, d))
    out.sort(key=lambda t: (t[0], t[1]), reverse=True)
    return out


def newest_shared_file(shared_dir, rank, world_size=None):
    """The newest complete step's file for `rank` in a copy-out directory (by
    generation, then step), or None; with world_size, only steps of that
    world size."""
    for _, _, world, d in shared_steps(shared_dir):
        if world_size is not None and world != world_size:
            continue
        f = os.path.join(d, f"rank-{rank:05d}.safetensors")
        if os.path.exists(f):
            try:
                read_header(f)
                return f
            except CorruptError:
                continue
    return None
