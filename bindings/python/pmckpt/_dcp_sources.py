# SPDX-License-Identifier: BSD-3-Clause
"""Where the DCP reader finds the bytes of one saved rank's items for one step.

Each rank's DCP checkpoint is a pmckpt checkpoint whose metadata blob carries
a pickled payload: {"metadata": DCP's global Metadata, "bytes": that rank's
BYTE_IO items, "rank": saved rank, "world_size": saved world size}.  Its
tensors are that rank's items (every item of its local plan, so replicated
ones too), named by _key(index).  Two sources hold such a checkpoint:

  LocalSource  this process's own store (node-local: PM or ramdisk), once
               recovered to the step;
  FileSource   the copy-out SHARED/step-S/rank-R.safetensors of any rank R,
               verified against its checksums once, then read by mmap.

Both answer view(key) with a tensor over the saved chunk (no copy) and
bytes_of(key).  Nothing here chooses the step: dcp.py does."""
import mmap
import os
import pickle

import torch

from ._state import META_NAME, Decoder, parse_blob, torch_dtype
from .errors import CorruptError, Error, NoCheckpointError
from .safetensors import _ST_TO_TORCH, read_header, verify, _header_bytes


def _name(payload, key):
    """The state_dict key under which item `key` went into the store."""
    return payload.get("names", {}).get(key, key)


def shared_file(shared_dir, step, rank):
    return os.path.join(shared_dir, f"step-{step:012d}", f"rank-{rank:05d}.safetensors")


def complete_steps(shared_dir):
    """Steps of shared_dir whose COMPLETE marker exists (every saved rank's file is there), newest first."""
    try:
        names = os.listdir(shared_dir)
    except (FileNotFoundError, TypeError):
        return []
    steps = []
    for n in names:
        if n.startswith("step-") and n[5:].isdigit() and \
                os.path.exists(os.path.join(shared_dir, n, "COMPLETE")):
            steps.append(int(n[5:]))
    return sorted(steps, reverse=True)


def payload_of(doc, binary, where):
    if doc.get("kind") != "dcp":
        raise Error(f"{where} holds a state_dict saved with Store.save, not a DCP checkpoint: "
                    "load it with Store.load")
    payload = pickle.loads(binary)
    if payload.get("metadata") is None:
        raise Error(f"{where} holds this rank's items but not the global DCP metadata (saved by "
                    "a pmckpt older than multi-rank DCP support: load it on the ranks that saved "
                    "it, or save it again)")
    return payload


class LocalSource:
    """The store's recovered checkpoint (call with the store's lock held for views)."""

    def __init__(self, store, doc, payload):
        self.store = store
        self.step = doc["step"]
        self.rank = payload.get("rank", store.rank)
        self.payload = payload
        self.names = Decoder(lambda n: n).decode(doc["tree"])
        self.infos = doc.get("tensors", {})
        self.where = f"store '{store.name}' in {store.region_path}"

    def has(self, key):
        return _name(self.payload, key) in self.names or key in self.payload["bytes"]

    def view(self, key):
        name = self.names[_name(self.payload, key)]
        return self.store._tensor_view(name, self.infos.get(name, {}))[2]

    def bytes_of(self, key):
        return self.payload["bytes"][key]

    def close(self):
        pass


class FileSource:
    """One rank's copy-out file of one step."""

    def __init__(self, path, check=True):
        self.path = path
        if check:
            verify(path)  # structure and every tensor's checksum: never a wrong tensor
        self.header = read_header(path)
        self._start = 8 + len(_header_bytes(path))
        self._f = open(path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        # private mapping: torch wants writable memory; pages are only read
        self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
        meta = self._raw(META_NAME)
        if meta is None:
            raise CorruptError(f"{path} was not written by pmckpt (no {META_NAME})")
        doc, binary = parse_blob(meta.numpy().tobytes())
        self.payload = payload_of(doc, binary, path)
        self.step = doc["step"]
        self.rank = self.payload.get("rank")
        self.names = Decoder(lambda n: n).decode(doc["tree"])
        self.infos = doc.get("tensors", {})
        self.where = path

    def _raw(self, name):
        e = self.header.get(name)
        if e is None:
            return None
        dt = _ST_TO_TORCH.get(e["dtype"])
        if dt is None:
            raise CorruptError(f"{self.path}: tensor '{name}': unsupported dtype {e['dtype']}")
        a, b = e["data_offsets"]
        if b == a:
            return torch.empty(e["shape"], dtype=dt)
        flat = torch.frombuffer(self._mm, dtype=torch.uint8, count=b - a, offset=self._start + a)
        return flat.view(dt).reshape(e["shape"])

    def has(self, key):
        return _name(self.payload, key) in self.names or key in self.payload["bytes"]

    def view(self, key):
        name = self.names[_name(self.payload, key)]
        t = self._raw(name)
        if t is None:
            raise CorruptError(f"{self.path}: its metadata names tensor '{name}', which it lacks")
        info = self.infos.get(name, {})
        if "dtype" in info:
            t = t.reshape(-1).view(torch.uint8).view(torch_dtype(info["dtype"]))
            shape = info["shape"]
            if "stride" in info:
                return t.as_strided(shape, info["stride"])
            return t.reshape(shape)
        return t

    def bytes_of(self, key):
        return self.payload["bytes"][key]

    def close(self):
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view still alive: the mapping goes with it
                pass
            self._mm = None
        self._f.close()


def missing(rank, step, key, tried):
    return NoCheckpointError(
        f"DCP item '{key}' of step {step}, saved by rank {rank}, is nowhere this rank can read: "
        f"{'; '.join(tried)}")
