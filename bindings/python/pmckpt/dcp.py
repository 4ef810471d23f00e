# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed.checkpoint (DCP) storage on a pmckpt store.

    import torch.distributed.checkpoint as dcp
    store = pmckpt.Store(name="dcp")
    dcp.save(state, storage_writer=pmckpt.dcp.StorageWriter(store))
    fut = dcp.async_save(state, storage_writer=pmckpt.dcp.StorageWriter(store))
    dcp.load(state, storage_reader=pmckpt.dcp.StorageReader(store))

DCP keeps its planners (deduplication, resharding, stateful objects);
pmckpt gives each checkpoint the two-slot commit: write_data begins a
checkpoint and queues every tensor item on the layer-wise pipeline, finish
adds DCP's Metadata (pickled, with the items DCP serialises to bytes) as the
checkpoint's metadata tensor, which commits it, atomically, and copies it out
when the store has a shared_dir.  A checkpoint_id that is an integer (or a
string of digits) is the step; otherwise steps count up from the newest.

One store per rank (a node-local store).  The coordinator's store also holds
the global Metadata; other ranks commit their items at the end of
write_data.  Tested in a single process (no process group).
"""
import io
import pickle
import uuid

from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint import storage as _storage
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                   Metadata, StorageMeta,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.futures import Future

from ._copy import Copier
from ._state import Decoder
from .store import copy_into
from .errors import Error

__all__ = ["StorageWriter", "StorageReader"]


def _key(index):
    off = index.offset
    if off is None or not any(off):
        return index.fqn
    return f"{index.fqn}@{','.join(str(o) for o in off)}"


def _step_of(checkpoint_id):
    if isinstance(checkpoint_id, int):
        return checkpoint_id
    if isinstance(checkpoint_id, str) and checkpoint_id.isdigit():
        return int(checkpoint_id)
    return None


class StorageWriter(_storage.StorageWriter):
    """Writes DCP checkpoints into a pmckpt.Store."""

    def __init__(self, store, step=None):
        super().__init__()
        self.store = store
        self._step = step
        self._handle = None
        self._prep = None
        self._bytes = {}
        self.is_coordinator = True
        self.save_id = uuid.uuid4().hex

    def reset(self, checkpoint_id=None):
        step = _step_of(checkpoint_id)
        if step is not None:
            self._step = step
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank", 0)

    def storage_meta(self):
        return StorageMeta(checkpoint_id=f"pmckpt:{self.store.name}", save_id=self.save_id)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        tensors, self._bytes, results = {}, {}, []
        for item in plan.items:
            key = _key(item.index)
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                b = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                self._bytes[key] = b
                results.append(_storage.WriteResult(index=item.index, size_in_bytes=len(b),
                                                    storage_data=key))
            else:
                t = data.detach()
                tensors[key] = t
                results.append(_storage.WriteResult(
                    index=item.index, size_in_bytes=t.numel() * t.element_size(),
                    storage_data=key))
        # Room for the Metadata that finish() will bring: pickle a stand-in of the same shape.
        md = Metadata(state_dict_metadata={
            r.index.fqn: (BytesStorageMetadata() if r.storage_data in self._bytes else
                          TensorStorageMetadata(
                              properties=it.tensor_data.properties, size=it.tensor_data.size,
                              chunks=[ChunkStorageMetadata(offsets=it.tensor_data.chunk.offsets,
                                                           sizes=it.tensor_data.chunk.sizes)]))
            for r, it in zip(results, plan.items)},
            storage_data={r.index: r.storage_data for r in results},
            storage_meta=self.storage_meta())
        extra = len(pickle.dumps({"metadata": md, "bytes": self._bytes}))
        extra = extra * max(1, self.store.world_size) + (4 << 10)
        step = self._step if self._step is not None else self.store._next_step()
        self._step = None
        prep = self.store._prepare(tensors, step, kind="dcp", extra_capacity=extra)
        self._prep = prep
        self._handle = self.store._start(prep, step)
        if self._handle.skipped:
            raise Error(f"DCP checkpoint of step {step} skipped: the previous one is still "
                        "being written (Store(on_busy='skip'))")
        if not self.is_coordinator:
            self._commit(None)
        fut = Future()
        fut.set_result(results)
        return fut

    def _commit(self, metadata):
        binary = pickle.dumps({"metadata": metadata, "bytes": self._bytes})
        self.store._put_meta(self._handle, self._prep.doc, binary)
        h, self._handle, self._prep = self._handle, None, None
        h.wait()  # committed and durable when finish returns

    def finish(self, metadata, results):
        metadata.storage_data = {wr.index: wr.storage_data for rl in results for wr in rl}
        metadata.storage_meta = self.storage_meta()
        self._commit(metadata)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False  # never chosen by DCP on its own: pass storage_writer=


class StorageReader(_storage.StorageReader):
    """Reads the newest verified DCP checkpoint of a pmckpt.Store."""

    def __init__(self, store):
        super().__init__()
        self.store = store
        self.storage_data = {}
        self._names = {}
        self._bytes = {}
        self._infos = {}

    def reset(self, checkpoint_id=None):
        self.storage_data = {}

    def read_metadata(self, *args, **kwargs):
        with self.store._lock:
            self.store._recover()
            doc, binary = self.store._read_blob()
        if doc.get("kind") != "dcp":
            raise Error(f"store '{self.store.name}' holds a state_dict saved with Store.save, "
                        "not a DCP checkpoint: load it with Store.load")
        payload = pickle.loads(binary)
        md = payload["metadata"]
        if md is None:
            raise Error(f"store '{self.store.name}' holds this rank's items but not the global "
                        "DCP metadata (it is in the coordinator's store)")
        self._names = Decoder(lambda n: n).decode(doc["tree"])
        self._bytes = payload["bytes"]
        self._infos = doc.get("tensors", {})
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = uuid.uuid4().hex
        return md

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        if metadata.storage_data is None:
            raise Error("DCP metadata without storage_data")
        self.storage_data = metadata.storage_data
        if not self._names:  # metadata came from another rank (broadcast): read ours
            with self.store._lock:
                self.store._recover()
                doc, binary = self.store._read_blob()
            self._names = Decoder(lambda n: n).decode(doc["tree"])
            self._bytes = pickle.loads(binary)["bytes"]
            self._infos = doc.get("tensors", {})

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        copier = Copier()
        done = []
        with self.store._lock:
            for req in plan.items:
                key = self.storage_data[req.storage_index]
                if req.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(req, io.BytesIO(self._bytes[key]))
                    continue
                name = self._names[key]
                _, _, src = self.store._tensor_view(name, self._infos.get(name, {}))
                src = narrow_tensor_by_index(src, req.storage_offsets, req.lengths)
                target = planner.resolve_tensor(req).detach()
                if target.size() != src.size():
                    raise Error(f"DCP item {req.storage_index}: size {list(src.size())} in the "
                                f"store, {list(target.size())} requested")
                copy_into(target, src, copier)
                done.append((req, target))
            copier.run()
        for req, target in done:
            planner.commit_tensor(req, target)
        fut = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False


# the names DCP users look for
PmckptStorageWriter = StorageWriter
PmckptStorageReader = StorageReader
