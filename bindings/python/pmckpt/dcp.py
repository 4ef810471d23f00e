# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed.checkpoint (DCP) storage on pmckpt stores, one per rank.

    import torch.distributed.checkpoint as dcp
    store = pmckpt.Store(name="job", group=True, shared_dir="/shared/ckpt")  # each rank
    dcp.save(state, storage_writer=pmckpt.dcp.StorageWriter(store), checkpoint_id=step)
    fut = dcp.async_save(state, storage_writer=pmckpt.dcp.StorageWriter(store))
    dcp.load(state, storage_reader=pmckpt.dcp.StorageReader(store))

DCP keeps its planners (deduplication, resharding, stateful objects); each
rank's items become one pmckpt checkpoint in that rank's store, with the
two-slot commit, layer-wise writes and the copy-out to
SHARED/step-S/rank-R.safetensors.  A checkpoint_id that is an integer (or a
string of digits) is the step; otherwise steps count up from the newest.

Where things are (docs/python.md, "DCP on several ranks"):
  - every rank's checkpoint carries DCP's global Metadata: the coordinator
    builds it in prepare_global_plan and DCP's scatter hands it to every rank
    with its plan, so each store (and each copy-out file) can answer
    read_metadata alone.  Item locations are (saved rank, key).
  - every rank stores all the items of its local plan, the replicated ones
    that DCP's deduplication gave to another rank too: a load on the same
    ranks never needs another node's store.
  - the reader takes an item from this rank's store when it holds the step
    and the item's saved rank is its own; otherwise from the saved rank's
    copy-out file of that step (checksums verified); otherwise, for a tensor
    replicated here with the same chunk, from this store's copy; otherwise it
    raises NoCheckpointError naming the rank, step and item.
  - which step: checkpoint_id if given.  With Store(group=...): when every
    rank has its store (or its copy-out file) the group's recovery agrees on
    one step (the global step; docs/multirank.md); otherwise (another number
    of ranks) the newest step complete in shared_dir on every rank.  Without
    a group: this store's newest verified step, else the newest complete step
    in shared_dir.
  - AsyncCheckpointerType.PROCESS pickles the writer as a recipe to reopen
    the same store (path or ramdisk, name, shared_dir, keep, rank,
    world_size, group); the checkpoint process reopens it for each save and
    closes it after (its lock: one writer at a time), except a group store,
    which it keeps open (then only that process may write or load it).
"""
import dataclasses
import functools
import io
import pickle
import threading
import time
import uuid
from collections import ChainMap

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint import storage as _storage
from torch.distributed.checkpoint.default_planner import (DefaultSavePlanner,
                                                          create_default_global_save_plan)
from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.futures import Future

from ._copy import Copier
from ._dcp_sources import (FileSource, LocalSource, complete_steps, missing, payload_of,
                           shared_file)
from ._pipeline import gc_paused
from .errors import CorruptError, Error, NoCheckpointError
from .store import Store, copy_into

__all__ = ["StorageWriter", "ZeroCopyStorageWriter", "StorageReader"]


def _key(index):
    off = index.offset
    if off is None or not any(off):
        return index.fqn
    return f"{index.fqn}@{','.join(str(o) for o in off)}"


def _step_of(checkpoint_id):
    if isinstance(checkpoint_id, int) and not isinstance(checkpoint_id, bool):
        return checkpoint_id
    if isinstance(checkpoint_id, str) and checkpoint_id.isdigit():
        return int(checkpoint_id)
    return None


@dataclasses.dataclass
class _GlobalPlan:
    """What prepare_global_plan attaches to each rank's plan (SavePlan.storage_data)."""
    rank: int
    world_size: int
    # pickled global Metadata, storage_data = {index: (rank, key)}: what a rank that is not
    # the coordinator stores; None where the coordinator is the only rank (it stores
    # DCP's own, from finish)
    metadata: "bytes | None"
    metadata_size: int  # len of that pickle, or what it would be: the room the commit needs


# ------------------------------------------------------------ items from the planner

_PLAIN = (torch.Tensor, torch.nn.Parameter)


@functools.cache  # the same answer for every thread that asks first
def _plain_tensors_resolve_to_themselves():
    """Whether DCP's default planner resolves a plain tensor item (no shard offset, or
    the origin) to the tensor itself: find_tensor_shard's checks for DTensor, the
    _Checkpointable protocol and ShardedTensor all fail on one.  Asked of torch once."""
    try:
        from torch.distributed.checkpoint.utils import _is_checkpointable_tensor
        t = torch.empty(1)
        return not (hasattr(t, "__get_tensor_shard__") or _is_checkpointable_tensor(t))
    except (ImportError, AttributeError):
        return False


def _resolver(planner):
    """planner.resolve_data, or, for DCP's default planner (its resolve_data,
    lookup_object and transform_object not overridden), the same answer for a
    plain tensor item taken straight from the planner's state_dict: the tensor
    itself.  find_tensor_shard's runtime protocol checks cost ~9 us a tensor on the
    development VM: dcp.save of a GPT-2-medium-shaped state with AdamW (1172
    tensors) took 58.1 ms with them, 47.3 without (medians of 24, in turn)."""
    cls = type(planner)
    if not (isinstance(planner, DefaultSavePlanner) and
            cls.resolve_data is DefaultSavePlanner.resolve_data and
            cls.lookup_object is DefaultSavePlanner.lookup_object and
            cls.transform_object is DefaultSavePlanner.transform_object and
            isinstance(getattr(planner, "state_dict", None), dict) and
            _plain_tensors_resolve_to_themselves()):
        return planner.resolve_data
    sd = planner.state_dict

    def resolve(item):
        if item.type == WriteItemType.TENSOR:
            t = sd.get(item.index.fqn)
            off = item.index.offset
            if type(t) in _PLAIN and (off is None or off == torch.Size([0] * t.dim())):
                return t
        return planner.resolve_data(item)
    return resolve


# ------------------------------------------------------------ reopening in another process

def _recipe(store):
    """What reopens `store` in another process (never its handles)."""
    name = store.name
    group = store._coll is not None
    if group:  # Store(group=...) appended "-rankR"; it will again
        suffix = f"-rank{store.rank}"
        name = name[:-len(suffix)] if name.endswith(suffix) else name
    return {"path": store.path, "name": name,
            "ramdisk": store._ramdisk_given, "sharing": store.sharing,
            "shared_dir": store.shared_dir, "keep": store.keep, "rank": store.rank,
            "world_size": store.world_size, "threads": store._threads_given,
            "meta_capacity": store.meta_capacity, "gpu_source": store.gpu_source,
            "gpu_snapshot_on_wait": store.gpu_snapshot_on_wait, "gpu_hash": store.gpu_hash,
            "size": store.size or None, "group": group}


_REOPENED = {}  # recipe -> Store, per process: the checkpoint process keeps its stores open


def _reopen(recipe):
    k = tuple(sorted(recipe.items()))
    s = _REOPENED.get(k)
    if s is None:
        r = dict(recipe)
        group = r.pop("group")
        rank, world = r.pop("rank"), r.pop("world_size")
        if group:  # a group of the process's own default group (DCP's checkpoint process makes one)
            s = Store(r.pop("path"), group=True, **r)
        else:
            s = Store(r.pop("path"), rank=rank, world_size=world, **r)
        _REOPENED[k] = s
    return s


# ------------------------------------------------------------ writing

def _several_ranks(store):
    """Whether this process saves as one of several ranks: its store says so, or the
    default process group has more than one."""
    if store.world_size > 1:
        return True
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class StorageWriter(_storage.StorageWriter):
    """Writes each rank's part of a DCP checkpoint into that rank's pmckpt.Store.

    wait_copyout: finish only once the checkpoint is also in shared_dir (set
    when the writer runs in DCP's checkpoint process, which may be ended at
    any time after the save's future resolves)."""

    def __new__(cls, store=None, step=None, wait_copyout=False, staging="default"):
        if staging not in ("default", "none"):
            raise ValueError("staging must be 'default' (DCP's stager copies the state) or "
                             "'none' (zero copy: pmckpt.hook_optimizer required)")
        if cls is StorageWriter and staging == "none":
            cls = ZeroCopyStorageWriter
        return super().__new__(cls)

    def __init__(self, store, step=None, wait_copyout=False, staging="default"):
        super().__init__()
        self.store = store
        self.staging = staging
        self.wait_copyout = wait_copyout
        self._pending = None
        self._step = step
        self._handle = None
        self._payload = None
        self._local_items = None
        self.is_coordinator = True
        self.rank = store.rank
        self.save_id = uuid.uuid4().hex

    def __getstate__(self):
        return {"recipe": _recipe(self.store), "step": self._step}

    def __setstate__(self, state):
        self.__init__(_reopen(state["recipe"]), state["step"], wait_copyout=True)

    def reset(self, checkpoint_id=None):
        step = _step_of(checkpoint_id)
        if step is not None:
            self._step = step
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        if kwargs.get("use_collectives") is False and _several_ranks(self.store):
            # Each rank would plan alone, as rank 0 of 1, and the coordinator's metadata
            # would name its own items only: no rank could load the others'.
            self._refuse("pmckpt.dcp.StorageWriter: dcp.save(use_collectives=False) on "
                         "several ranks is not supported (each rank would write a checkpoint "
                         "of its own plan alone); save with use_collectives=True, the default")
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank", self.rank)

    def _refuse(self, message):
        """Raises Error(message) for a save refused before its plan: a zero-copy save's
        pending mark released first, so that its hooks go on."""
        err = Error(message)
        if self._pending is not None and not self._pending.settled:
            self._pending.release(err)
        raise err

    def storage_meta(self):
        return StorageMeta(checkpoint_id=f"pmckpt:{self.store.name}", save_id=self.save_id)

    def prepare_local_plan(self, plan):
        # With DCP's plan caching (DefaultSavePlanner(enable_plan_caching=True)) a plan
        # unchanged since the planner's last save comes empty (usable=False), and the rank
        # writes the final plan DCP cached.  One rank: that plan is whole, nothing to add.
        # Several: this rank's items DCP's deduplication gave another rank (replicas that
        # every rank's store holds) and the whole global plans for the metadata are known
        # only to DCP's private caches: refused by name, before anything is planned.
        if not getattr(plan, "usable", True) and _several_ranks(self.store):
            self._refuse("pmckpt.dcp.StorageWriter on several ranks does not support DCP's "
                         "plan caching (DefaultSavePlanner(enable_plan_caching=True)): save "
                         "with enable_plan_caching=False, the default; nothing was written")
        self._local_items = list(plan.items)  # before DCP's deduplication drops replicas
        return plan

    def prepare_global_plan(self, plans):
        """On the coordinator: the global Metadata, as DCP's default planner builds it, with
        item locations (rank, key); every rank gets it with its plan and stores it."""
        # The collector paused here, in write_data and for the metadata's commit, as for
        # Store.save (gc_paused): 40 dcp.save of 1172 tensors on the dev VM set off 9 full
        # collections, not 15 (mean 112 against 135 ms a save).
        with gc_paused():
            return self._prepare_global_plan(plans)

    def _prepare_global_plan(self, plans):
        single = len(plans) == 1
        if single and not getattr(plans[0], "usable", True):
            # DCP's plan caching, one rank (several refuse it: prepare_local_plan): the rank
            # writes the final plan DCP cached, with the global plan attached to it then
            return plans
        if single and self.is_coordinator:
            # One rank: it stores the Metadata DCP hands finish(), so none is built here;
            # only its size is needed now, for the room the commit takes.
            return [dataclasses.replace(plans[0], storage_data=_GlobalPlan(
                self.rank, 1, None, self._metadata_size(plans)))]
        blob = pickle.dumps(self._global_metadata(plans))
        return [dataclasses.replace(p, storage_data=_GlobalPlan(
            self.rank if single else i, len(plans), blob, len(blob)))
            for i, p in enumerate(plans)]

    def _global_metadata(self, plans):
        single = len(plans) == 1
        _, md = create_default_global_save_plan(plans, rewrite_index_hints=False)
        mappings = [p.planner_data for p in plans if isinstance(p.planner_data, dict)]
        if mappings:
            md = dataclasses.replace(md, planner_data=dict(ChainMap(*mappings)))
        md.storage_data = {}
        for i, p in enumerate(plans):
            r = self.rank if single else i
            for item in p.items:
                md.storage_data[item.index] = (r, _key(item.index))
        md.storage_meta = self.storage_meta()
        return md

    def _metadata_size(self, plans):
        """The pickled global Metadata's size, measured (built and pickled) once per
        shape of plan by this Store object: the same count of items, of their names'
        characters and of their dimensions.  A store's tensors are fixed at its first save
        (another name or shape is a LayoutError), so only its non-tensor items can differ
        between two plans of one shape, by a few bytes (integers of other widths); the
        commit's room is twice the size, the first save (always measured) fixes a capacity
        of twice that again, and a metadata that outgrows it fails at the commit
        (_put_meta: nothing committed, the previous checkpoint kept).  A single-rank
        dcp.save of 1172 tensors (GPT-2 medium with AdamW) spent ~11 ms of ~58 building
        and pickling it on every save (dev VM)."""
        items = plans[0].items
        shape = (len(items), sum(len(it.index.fqn) for it in items),
                 sum(len(it.tensor_data.size) for it in items if it.tensor_data is not None))
        sizes = self.store.__dict__.setdefault("_dcp_metadata_sizes", {})
        n = sizes.get(shape)
        if n is None:
            n = sizes[shape] = len(pickle.dumps(self._global_metadata(plans)))
        return n

    def _fit_rank(self, rank, world_size):
        """Copy-out names files by the store's rank: take DCP's when the store was left at
        rank 0 of 1 (Store(name=f"job-r{rank}") without rank=)."""
        s = self.store
        if (s.rank, s.world_size) == (rank, world_size):
            return
        if s._coll is None and (s.rank, s.world_size) == (0, 1) and not s._copyout:
            s.rank, s.world_size = rank, world_size
            return
        raise Error(f"store '{s.name}' is rank {s.rank} of {s.world_size}, DCP saves as rank "
                    f"{rank} of {world_size}: pass Store(rank=, world_size=) matching DCP's "
                    "process group, or group=")

    def write_data(self, plan, planner):
        try:
            with gc_paused():
                fut = self._write_data(plan, planner)
            if not self.is_coordinator:
                self._commit()  # its wait outside the pause: DCP's async thread may run it
            return fut
        finally:
            if self._pending is not None and not self._pending.settled:
                self._pending.release()  # failed before its begin: the hooks go on

    def _write_data(self, plan, planner):
        g = plan.storage_data
        if not isinstance(g, _GlobalPlan):
            raise Error("the plan lacks the global metadata pmckpt.dcp.StorageWriter attaches in "
                        "prepare_global_plan (was another writer's global plan used?)")
        self._fit_rank(g.rank, g.world_size)
        tensors, byts, results, names, seen = {}, {}, [], {}, {}
        planned = {item.index for item in plan.items}
        extra = [it for it in (self._local_items or []) if it.index not in planned]
        # in local-plan order, so that names do not depend on what deduplication kept here
        pos = {it.index: i for i, it in enumerate(self._local_items or ())}
        items = sorted(list(plan.items) + extra, key=lambda it: pos.get(it.index, len(pos)))
        resolve = _resolver(planner)
        for item in items:
            key = _key(item.index)
            data = resolve(item)
            if item.type == WriteItemType.BYTE_IO:
                b = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                byts[key] = b
                n = len(b)
            else:
                t = data.detach()
                # named by fqn, not offset: every rank's store then has the same layout
                # (Store(group=...) requires it) when shards are even
                i = seen.get(item.index.fqn, 0)
                seen[item.index.fqn] = i + 1
                name = item.index.fqn if i == 0 else f"{item.index.fqn}#{i}"
                names[key] = name
                tensors[name] = t
                n = t.numel() * t.element_size()
            if item.index in planned:
                results.append(_storage.WriteResult(index=item.index, size_in_bytes=n,
                                                    storage_data=(g.rank, key)))
        # The coordinator stores DCP's own Metadata, which finish() hands it: its copy of the
        # global plan's is not unpickled (a full Metadata: ~4 ms for 1172 tensors).
        md = None if self.is_coordinator else pickle.loads(g.metadata)
        self._payload = {"metadata": md, "bytes": byts, "rank": g.rank,
                         "world_size": g.world_size, "names": names}
        room = 2 * (g.metadata_size + len(pickle.dumps(byts))) + (8 << 10)
        s = self.store
        step = self._step if self._step is not None else s._next_step()
        self._step = None
        self._prep = s._prepare(tensors, step, kind="dcp", extra_capacity=room)
        self._handle = s._start(self._prep, step, pending=self._pending)
        if self._handle.skipped:
            self._handle = None
            raise Error(f"DCP checkpoint of step {step} skipped: the previous one is still "
                        "being written (Store(on_busy='skip'))")
        fut = Future()
        fut.set_result(results)
        return fut

    def _commit(self):
        s = self.store
        h, self._handle = self._handle, None
        with gc_paused():  # not across the wait below: DCP's async thread may run it
            s._put_meta(h, self._prep.doc, pickle.dumps(self._payload))
        self._prep = self._payload = None
        h.wait()  # committed and durable when finish returns
        if self.wait_copyout:
            s.wait_copyout()
            # DCP's checkpoint process: the store is locked (one writer) only while a save is
            # written, so the training process may load between saves.  A group store stays
            # open: reopening its collectives would need every rank at once.
            if s._coll is None:
                s.close()

    def finish(self, metadata, results):
        """On the coordinator, after every rank's write_data: its own commit, with DCP's
        Metadata (the one the other ranks store was built from the same plans)."""
        metadata.storage_data = {wr.index: wr.storage_data for rl in results for wr in rl}
        metadata.storage_meta = self.storage_meta()
        self._payload["metadata"] = metadata
        self._commit()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False  # never chosen by DCP on its own: pass storage_writer=


class ZeroCopyStorageWriter(StorageWriter):
    """StorageWriter(store, staging="none"): dcp.async_save without a staging copy.

    DCP takes a storage_writer that is an AsyncStager as its stager: stage()
    returns the state_dict itself, so async_save returns at once, and the
    tensors are written from their own memory, layer by layer, by the store's
    pipeline once DCP's thread has planned the save (as Store.save_async).

    The contract: nothing may change a tensor of the state_dict before its
    layer is persisted.  pmckpt.hook_optimizer(opt, store) (and hook_module
    for buffers) does that: stage() registers the save as pending on the
    store before async_save returns, and the hooks wait until it has begun
    (DCP's planning done, its layers queued), then for the layers they are
    about to update.  A save that fails or ends before its begin releases the
    hooks (and its future raises).  Store(verify_sources=True) turns a
    tensor changed meanwhile (no hook) into a failed save (SourceChangedError
    from the future) rather than a torn checkpoint.

    Only for AsyncCheckpointerType.THREAD: DCP's checkpoint process cannot read
    this process's tensors, so pickling this writer raises."""

    _synchronize_after_execute = False

    @property
    def should_synchronize_after_execute(self):
        return False

    def stage(self, state_dict):
        """No copy: registers the save as pending on the store (the hooks wait for
        it) and returns state_dict itself.  A previous zero-copy save of this store
        still running is waited for first (its thread must end before another
        begins: DCP's collectives of two saves must not interleave)."""
        s = self.store
        prev = getattr(s, "_dcp_zero_copy", None)
        if prev is not None and prev.thread is not threading.current_thread():
            _wait_ended(prev)
        self._pending = s._mark_pending("DCP async_save (staging='none')")
        s._dcp_zero_copy = self._pending
        return state_dict

    def synchronize_staging(self):
        pass

    def close(self):
        pass

    def reset(self, checkpoint_id=None):
        super().reset(checkpoint_id)
        if self._pending is not None:
            self._pending.bind()  # DCP's checkpoint thread: the first call it makes

    def __getstate__(self):
        err = Error("pmckpt.dcp.StorageWriter(staging='none') cannot go to DCP's checkpoint "
                    "process (AsyncCheckpointerType.PROCESS): another process cannot read this "
                    "one's tensors.  Use AsyncCheckpointerType.THREAD, or staging='default'")
        if self._pending is not None:
            self._pending.release(err)
        raise err



def _wait_ended(pending):
    """Until the thread of a zero-copy save has ended (its future resolved): DCP's
    collectives of two saves must not run at once on one process group."""
    while True:
        t = pending.thread
        if t is not None:
            t.join()
            return
        if pending.settled:  # released before DCP's thread reached the writer
            return
        time.sleep(pending.POLL)


# ------------------------------------------------------------ reading

class StorageReader(_storage.StorageReader):
    """Reads a DCP checkpoint saved through StorageWriter, on any number of ranks.

    step: the step to load (or checkpoint_id=); default: see the module's doc.
    verify_files: check a copy-out file's checksums before reading from it.
    With Store(group=...), each file a load reads is checked by one of the
    ranks that read it, for all of them (_share_file_checks): give every rank
    the same verify_files then (a collective depends on it)."""

    _share_checks = True  # with a group (bench_dcp_ranks.py turns it off for its baseline)
    _SHARE_MIN = 64 << 20  # bytes of files others read too that the busiest such rank reads

    def __init__(self, store, step=None, verify_files=True):
        super().__init__()
        self.store = store
        self.verify_files = verify_files
        self.step = None  # the step read_metadata chose
        self.storage_data = {}
        self._want = step
        self._local = None
        self._files = {}
        self._chunks = {}
        self._checked = {}  # saved rank -> (group rank that checked its file, error or None)

    def reset(self, checkpoint_id=None):
        step = _step_of(checkpoint_id)
        if step is not None:
            self._want = step
        self.storage_data = {}
        self._close()

    def _close(self):
        for f in self._files.values():
            if f is not None:
                f.close()
        self._files = {}
        self._checked = {}
        self._local = None

    # -------------------------------------------------- choosing the step

    def _open_local(self):
        """This rank's store, recovered (without a group: locally, else from its shared file),
        as a LocalSource; None when there is no store here."""
        s = self.store
        with s._lock:
            if s._h is None:
                s._h = s._open_existing()
            if s._h is None and s._coll is None:
                return None
            s._recover()  # a group's: collective, and it makes a lost store from its shared file
            if s._h is None:
                return None
            doc, binary = s._read_blob()
        return LocalSource(s, doc, payload_of(doc, binary, f"store '{s.name}'"))

    def _choose_alone(self):
        try:
            local = self._open_local()
        except NoCheckpointError:
            local = None
        if self._want is not None:
            return self._want, local if local and local.step == self._want else None
        if local is not None:
            return local.step, local
        self.store._check_shared_dir()
        steps = complete_steps(self.store.shared_dir)
        if not steps:
            raise NoCheckpointError(
                f"no DCP checkpoint: store '{self.store.name}' in {self.store.region_path} holds "
                f"none, and {self.store.shared_dir or 'no shared_dir'} has no complete step")
        return steps[0], None

    def _choose_group(self):
        from .safetensors import newest_shared_file
        s = self.store
        s._check_shared_dir()  # collective, before any rank reads shared_dir
        with s._lock:
            if s._h is None:
                s._h = s._open_existing()
            # a file of this world size: another's is for resharding, below
            mine = s._h is not None or (s.shared_dir is not None and newest_shared_file(
                s.shared_dir, s.rank, s.world_size) is not None)
        if s._coll.allreduce(1 if mine else 0):
            local = self._open_local()  # collective: the group's recovery, one step everywhere
            if self._want is not None and self._want != local.step:
                return self._want, None
            return local.step, local
        # another number of ranks than saved: the newest step complete in shared_dir for all
        cand = self._want if self._want is not None else \
            next(iter(complete_steps(s.shared_dir)), 0)
        step = s._coll.allreduce(cand)
        if not step:
            raise NoCheckpointError(
                f"no DCP checkpoint every rank of {s.world_size} can read: some rank lacks its "
                f"store, and some rank finds no complete step in {s.shared_dir or 'no shared_dir'}"
                f" (this rank, {s.rank}: {cand or 'none'})")
        return step, None

    def _file(self, step, rank):
        """The copy-out file of `rank` at `step` (verified once: here, or for this load
        by another rank of the group), or None if it does not exist."""
        k = (step, rank)
        if k not in self._files:
            sd = self.store.shared_dir
            path = shared_file(sd, step, rank) if sd else None
            by = self._checked.get(rank) if step == self.step else None
            if by is not None and by[1] is not None:
                raise CorruptError(f"{by[1]} (checked for this load by rank {by[0]} of the "
                                   "group)")
            self._files[k] = FileSource(path, self.verify_files and by is None) if path and \
                _exists(path) else None
        return self._files[k]

    def _share_file_checks(self, plan):
        """With Store(group=...): each copy-out file that ranks of the group are about
        to read (checked, verify_files) is checked by one of them for all: the one
        that has checked the fewest so far, lowest rank first.  A load that reshards
        reads a piece of every saved rank's file on every rank: N ranks hashed N
        files each, now one each.  A file found damaged fails the load on every
        rank that reads it, naming the rank that checked it; one the checking rank
        cannot open for another reason is left to each reader to check.  The files
        are a complete step's, renamed into place whole and not written again.
        Collective: DCP calls read_data on every rank.  Without a group each rank
        checks what it reads (no group of the store's own to agree in: DCP's may be
        another).  Where no rank reads _SHARE_MIN bytes of files others read too, each
        checks its own, without the second gather: it would cost more than it saves."""
        import os
        coll = self.store._coll
        need, why = {}, None  # saved rank -> its file's size
        try:
            local, sd = self._local, self.store.shared_dir
            for req in plan.items:
                rank, key = self._where(req.storage_index)
                if (local is not None and local.rank == rank and local.has(key)) or \
                        (self.step, rank) in self._files or rank in need:
                    continue
                try:
                    need[rank] = os.stat(shared_file(sd, self.step, rank)).st_size
                except OSError:  # not there (or not for this rank): its reader will say so
                    pass
        except Exception as e:  # noqa: BLE001 -- raised after the collective: none left waiting
            why = e
        needs = coll.allgather_object(need)
        size = {f: n for nd in needs for f, n in nd.items()}
        shared = sorted(f for f in size if sum(f in nd for nd in needs) > 1)
        if max((sum(size[f] for f in shared if f in nd) for nd in needs), default=0) < \
                self._SHARE_MIN:
            shared = []
        if shared:  # a file only one rank reads is checked by that rank, as without a group
            counts, mine = [0] * len(needs), {}
            for f in shared:
                r = min((r for r, n in enumerate(needs) if f in n), key=lambda r: (counts[r], r))
                counts[r] += 1
                if r == coll.rank and why is None:
                    try:
                        if self._file(self.step, f) is not None:  # gone meanwhile: not checked
                            mine[f] = None
                    except CorruptError as e:  # the file's fault: every reader's error
                        mine[f] = str(e)
                    except Exception:  # noqa: BLE001 -- this rank's (it raises it when it reads)
                        pass
            for r, res in enumerate(coll.allgather_object(mine)):
                for f, err in res.items():
                    self._checked.setdefault(f, (r, err))
        if why is not None:
            raise why

    # The collector paused in the reader's calls, as in the writer's: unpickling the
    # metadata and reading 1172 small tensors make thousands of objects, and 40 dcp.load
    # of them on the dev VM, beside a heap of 300,000 objects, set off 12 full collections.
    def read_metadata(self, *args, **kwargs):
        with gc_paused():
            return self._read_metadata()

    def _read_metadata(self):
        self._close()
        if self.store._coll is not None:
            step, local = self._choose_group()
        else:
            step, local = self._choose_alone()
        self.step, self._local = step, local
        if local is not None:
            payload = local.payload
        else:
            src = self._metadata_file(step)
            if src is None:
                raise NoCheckpointError(
                    f"DCP checkpoint of step {step}: not in store '{self.store.name}' (holds "
                    f"{self._local_step()}), and no file of it in "
                    f"{self.store.shared_dir or 'no shared_dir'}")
            payload = src.payload
        md = payload["metadata"]
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = uuid.uuid4().hex
        return md

    def _metadata_file(self, step):
        """The copy-out file of `step` that the metadata is read from: rank 0's, else
        any rank's; None if there is none.  With a group (read_metadata is collective
        there) every rank reads it: group rank 0 checks it, once for all, and tells
        the others which file it was (a damaged one fails every rank, naming it)."""
        coll = self.store._coll
        if coll is None or not self.verify_files:
            return self._first_file(step)[1]
        told, mine = None, None  # told: (saved rank of the file checked, or None; error)
        if coll.rank == 0:
            try:
                told = (self._first_file(step)[0], None)
            except CorruptError as e:
                told = (None, str(e))
            except Exception as e:  # noqa: BLE001 -- rank 0's own: the others check for themselves
                mine = e
        told = coll.broadcast_object(told, 0)
        if mine is not None:
            raise mine
        if told is None:
            return self._first_file(step)[1]
        rank, err = told
        if err is not None:
            raise CorruptError(f"{err} (checked for this load by rank 0 of the group)")
        if rank is None:
            return None
        self._checked[rank] = (0, None)
        return self._file(step, rank)

    def _local_step(self):
        try:
            return f"step {self.store.newest_step()}"
        except Error:
            return "nothing readable"

    def _first_file(self, step):
        """(saved rank, its copy-out file) of `step`: rank 0's, else the lowest rank's
        there is; (None, None) if there is none."""
        import os
        if self._file(step, 0) is not None:
            return 0, self._files[(step, 0)]
        d = os.path.join(self.store.shared_dir or "", f"step-{step:012d}")
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith("rank-") and
                           n.endswith(".safetensors"))
        except (FileNotFoundError, NotADirectoryError):
            return None, None
        for n in names:
            rank = int(n[5:-12])
            src = self._file(step, rank)
            if src is not None:
                return rank, src
        return None, None

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        with gc_paused():
            self._set_up(metadata)

    def _set_up(self, metadata):
        if metadata.storage_data is None:
            raise Error("DCP metadata without storage_data")
        self.storage_data = metadata.storage_data
        self._chunks = {}
        for fqn, tmd in metadata.state_dict_metadata.items():
            if isinstance(tmd, TensorStorageMetadata):
                for c in tmd.chunks:
                    self._chunks[(fqn, tuple(c.offsets))] = tuple(c.sizes)
        if self.step is None:  # metadata handed over without read_metadata here
            self.read_metadata()

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    # -------------------------------------------------- reading

    def _where(self, index):
        loc = self.storage_data[index]
        if isinstance(loc, str):  # saved by a single-process pmckpt.dcp of before
            return (self._local.rank if self._local else 0), loc
        return loc

    def _source(self, index, rank, key, tensor):
        """The source of item (rank, key) for this load's step; raises naming what is missing."""
        local, step = self._local, self.step
        if local is not None and local.rank == rank and local.has(key):
            return local
        tried = [f"store '{self.store.name}' holds "
                 f"{f'step {local.step} of rank {local.rank}' if local else 'no such step'}"]
        f = self._file(step, rank)
        if f is not None and f.has(key):
            return f
        path = shared_file(self.store.shared_dir, step, rank) if self.store.shared_dir else None
        tried.append(f"{path} {'lacks it' if f else 'does not exist'}" if path else
                     "the Store has no shared_dir")
        if tensor and local is not None and local.has(key):
            # a replica this rank wrote too (DCP kept another rank's): same chunk, same bytes
            want = self._chunks.get((index.fqn, tuple(index.offset or ())))
            if want is not None and tuple(local.view(key).shape) == want:
                return local
        raise missing(rank, step, key, tried)

    def read_data(self, plan, planner):
        with gc_paused():
            return self._read_data(plan, planner)

    def _read_data(self, plan, planner):
        copier = Copier()
        done = []
        with self.store._lock:
            if self.verify_files and self.store._coll is not None and self.store.shared_dir \
                    and self._share_checks:
                self._share_file_checks(plan)
            for req in plan.items:
                rank, key = self._where(req.storage_index)
                is_bytes = req.type == LoadItemType.BYTE_IO
                src_obj = self._source(req.storage_index, rank, key, not is_bytes)
                if is_bytes:
                    planner.load_bytes(req, io.BytesIO(src_obj.bytes_of(key)))
                    continue
                src = narrow_tensor_by_index(src_obj.view(key), req.storage_offsets, req.lengths)
                target = planner.resolve_tensor(req).detach()
                if target.size() != src.size():
                    raise Error(f"DCP item '{key}' of rank {rank}, step {self.step}: size "
                                f"{list(src.size())} saved, {list(target.size())} requested")
                if target.dtype != src.dtype:
                    raise Error(f"DCP item '{key}' of rank {rank}, step {self.step}: "
                                f"{src.dtype} saved, {target.dtype} requested")
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


def _exists(path):
    import os
    return os.path.exists(path)


# the names DCP users look for
PmckptStorageWriter = StorageWriter
PmckptStorageReader = StorageReader
