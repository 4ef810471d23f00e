# SPDX-License-Identifier: BSD-3-Clause
"""pmckpt.Store: state_dicts in a two-slot checkpoint store on PM or a ramdisk."""
import ctypes
import os
import threading
import time
import warnings
from ctypes import byref, c_int, c_void_p

import torch

from . import _lib
from ._copy import Copier, parallel_fresh
from ._lib import lib, check
from ._state import (META_NAME, FORMAT, Decoder, Flattener, Layout, blob_capacity,
                     dense_permutation, make_blob, module_prefix, parse_blob, tree_names,
                     torch_dtype, _PMCK_TO_TORCH)
from .errors import (Error, CopyoutError, LayoutError, MetadataTooLargeError,
                     NoCheckpointError, CorruptError, WorldSizeError, PMCK_E_NO_CHECKPOINT,
                     PMCK_E_NONE_USABLE, PMCK_E_WORLD_SIZE, PMA_E_NOT_POOL, error_for)

_GPU_SOURCES = {"direct": _lib.SOURCE_GPU_DIRECT, "kernel": _lib.SOURCE_GPU_KERNEL,
                "staged": _lib.SOURCE_GPU_STAGED, "snapshot": _lib.SOURCE_GPU_SNAPSHOT}


class RecoveryWarning(UserWarning):
    """A checkpoint candidate was rejected by recovery (a local slot or a shared
    step failed verification, a file was missing or truncated); an older one,
    or another tier's copy, was loaded instead.  One warning per rejected
    candidate, carrying its facts: rank, tier ("local" or "shared"), step,
    reason, quarantined (the shared step was moved to DIR/quarantine)."""

    def __init__(self, message, rank=None, tier=None, step=None, reason=None,
                 quarantined=False):
        super().__init__(message)
        self.rank, self.tier, self.step = rank, tier, step
        self.reason, self.quarantined = reason, quarantined


def _rejections(store):
    """The candidates the last recovery on store rejected (pmck_store_rejections),
    as dicts with rank, tier, step, reason, quarantined."""
    fn = _lib.optional("pmck_store_rejections")
    if fn is None or not store:
        return []
    n = ctypes.c_size_t(0)
    arr = fn(store, byref(n))
    return [{"rank": arr[i].rank, "tier": "shared" if arr[i].tier else "local",
             "step": arr[i].step, "reason": arr[i].reason.decode(errors="replace"),
             "quarantined": bool(arr[i].quarantined)} for i in range(n.value)]


def _describe(rej):
    return (f"rank {rej['rank']}, {rej['tier']} step {rej['step']}: {rej['reason']}")


def _u8_view(addr, nbytes):
    """A uint8 tensor over nbytes at addr (the region's memory: no copy)."""
    buf = (ctypes.c_uint8 * nbytes).from_address(addr)
    return torch.frombuffer(buf, dtype=torch.uint8)


def copy_into(dst, src, copier, fresh=False):
    """dst[...] = src, where src views the region.  When dst's memory, in
    order, is exactly src's bytes (dense CPU tensor, same strides) the copy is
    a memcpy queued on copier; otherwise torch copies now (CUDA, other strides).
    fresh: dst was just allocated."""
    n = src.numel() * src.element_size()
    if n == 0:
        return
    if dst.device.type == "cpu" and dst.stride() == src.stride() and \
            dense_permutation(dst) is not None:
        copier.add(dst.data_ptr(), src.data_ptr(), n, fresh)
    else:
        dst.copy_(src)


class _Handles:
    """A region, its pool and the store, opened together (pmck_local_open or by hand)."""

    def __init__(self, region, pool, store, local=None, description="", prefaulted=False):
        self.region, self.pool, self.store = region, pool, store
        self.local = local
        self.description = description
        self.prefaulted = prefaulted

    def close(self):
        if self.local is not None:
            lib.pmck_local_close(byref(self.local))
            self.local = None
        else:
            lib.pmck_store_close(byref(self.store))
            lib.pma_pool_close(byref(self.pool))
            lib.pma_region_close(byref(self.region))
        self.store = self.pool = self.region = None


class SaveHandle:
    """An asynchronous checkpoint in flight (Store.save_async).

    Its sources, the state_dict's tensors, must stay unchanged until the layer
    that holds them is persisted: wait_layer(name) / wait_for(tensors) block
    only for what is asked, wait() for the whole checkpoint (committed and
    durable in the store's slot), raising the failure if there was one."""

    def __init__(self, store, step, entries, keep, skipped=False):
        self.step = step
        self.skipped = skipped
        self._store = store
        self._keep = keep
        self._done = skipped
        self._all_put = False
        self._error = None
        self._layer_of = {}   # tensor name or module prefix -> its layers
        self._ptr_layer = {}  # data_ptr of a tensor written in place -> its layer
        for e in entries:
            self._layer_of.setdefault(e.name, set()).add(e.layer)
            self._layer_of.setdefault(module_prefix(e.name), set()).add(e.layer)
            if e.zero_copy and e.nbytes:
                self._ptr_layer.setdefault(e.tensor.data_ptr(), e.layer)
        self._layers = {e.layer for e in entries}

    @property
    def done(self):
        """True once wait() has returned (or the checkpoint was skipped)."""
        return self._done

    def wait(self):
        """Blocks until the checkpoint is committed (durable); raises its failure."""
        if not self._done:
            self._store._finish(self)
        if self._error is not None:
            raise self._error

    def _wait_layers(self, layers):
        if self._done:
            return
        pipe = self._store._pipe
        for layer in sorted(layers):
            rc = lib.pmck_pipeline_wait_layer(pipe, layer)
            if rc < 0:
                self._store._finish(self)
                raise self._error or error_for(rc, f"checkpoint of step {self.step} failed")

    def wait_layer(self, name):
        """Blocks until the layer holding `name` is persisted: a tensor name
        ("model/fc1.weight"), a module prefix ("model/fc1") or a layer number."""
        if isinstance(name, int) and name in self._layers:
            layers = [name]
        elif isinstance(name, str) and name in self._layer_of:
            layers = self._layer_of[name]
        else:
            raise KeyError(f"no tensor or module '{name}' in the checkpoint of step {self.step}")
        self._wait_layers(layers)

    def wait_for(self, tensors):
        """Blocks until every given tensor that is a source of this checkpoint
        is persisted (others are ignored): call before modifying them in place."""
        if self._done:
            return
        layers = {self._ptr_layer.get(t.data_ptr()) for t in tensors}
        layers.discard(None)
        self._wait_layers(layers)


class _PendingSave:
    """A save that reads the live tensors and has not begun yet: DCP's async_save
    with StorageWriter(staging="none") returns before its thread plans and
    begins the checkpoint.  Store.wait_for (the hooks) waits until it has begun
    (then for its layers), or until it is released: failed before its begin, or
    its thread ended without one.

    thread: the thread that will begin it, once known (bind()); waiters poll
    whether it is still alive, so that a save dying anywhere before its begin
    (in DCP's planning, a collective, another rank) never leaves them blocked."""

    POLL = 0.05

    def __init__(self, store, what):
        self.store = store
        self.what = what
        self.handle = None
        self.error = None
        self.thread = None
        self._event = threading.Event()

    @property
    def settled(self):
        return self._event.is_set()

    def bind(self, thread=None):
        """The thread that will begin this save (DCP's checkpoint thread)."""
        if self.thread is None:
            self.thread = thread or threading.current_thread()

    def _settle(self, handle, error):
        s = self.store
        with s._pending_lock:
            if self._event.is_set():
                return
            self.handle, self.error = handle, error
            if self in s._pending:
                s._pending.remove(self)
            self._event.set()

    def begun(self, handle):
        self._settle(handle, None)

    def release(self, error=None):
        """Never begins (failed, abandoned): waiters go on."""
        self._settle(None, error or Error(f"{self.what} ended before it began"))

    def wait_begun(self):
        """Blocks until the save has begun (returns its SaveHandle) or was released
        (returns None)."""
        while not self._event.wait(self.POLL):
            t = self.thread
            if t is not None and not t.is_alive():
                self.release(Error(f"{self.what}: its thread ({t.name}) ended before the "
                                   "checkpoint began"))
        return self.handle


class _Prepared:
    """A state_dict turned into store tensors and a metadata document, checked."""

    def __init__(self, entries, doc, binary=b"", extra_capacity=0):
        self.entries = entries
        self.doc = doc
        self.binary = binary
        self.extra_capacity = extra_capacity  # room for a binary part known only later (DCP)


class Store:
    """A checkpoint store for PyTorch state_dicts.

    Store(path) puts it on persistent memory: a devdax device, a file on an
    fsdax file system, or a devdax namespace name ("ckpt0", resolved with
    libpmalloc_ns's pma_ns_dax_path).  A missing file is created at the first
    save, of `size` bytes (e.g. 8 << 30), or, without size, sized for two
    slots of the first state_dict as the ramdisk file is.  A blank device is
    formatted; one holding other data or a damaged pool is refused
    (pmckpt create --force, pmckpt check).  Store() or Store(ramdisk=DIR) puts it in
    a file DIR/pmckpt-NAME.pool (DIR defaults to /dev/shm) with the same
    two-slot protocol.  shared_dir: each committed checkpoint is also copied,
    in the background, to SHARED_DIR/step-N/rank-R.safetensors, keeping the
    newest `keep`; load() falls back to it when the local store has nothing.
    A copy that fails (a full file system, say) leaves the local checkpoint
    as it is and later steps are still copied; the failure is raised once, as
    CopyoutError, by the next save()/save_async() (before it starts anything),
    wait_copyout() or close().

    writer_policy: "batch" (the library's default) or "idle": the pipeline's
    writer threads and the copier run SCHED_IDLE, so they take only CPU time
    that nothing else wants (on a small host whose cores the training uses;
    Linux only, docs/evaluation.md, "Training throughput").

    copyout_every=N copies only the commits of steps that are multiples of N
    (the same steps on every rank): a copy holds its slot until it ends, so
    the begin after next waits for it, and copying each commit makes every
    step wait for the copier (bench_train.py: train_tput_copyout_*).

    The layout (tensor names, dtypes, shapes, layers) is derived from the
    first state_dict saved and fixed from then on: a state_dict of another
    structure raises LayoutError and leaves the store untouched.

    group: multi-rank checkpoints over torch.distributed.  True makes a
    gloo group over all ranks (pmckpt.distributed.new_group); or pass a
    ProcessGroup that this store uses alone.  Each rank keeps its own store
    (named NAME-rankR, and so is its ramdisk file), rank and world_size come
    from the group, a checkpoint counts only once every rank committed it
    (global_step), and load()
    brings every rank back to one step (docs/multirank.md).  Every rank must
    save the same steps and call load at the same points: those calls are
    collective.

    verify_sources: after each layer is written, its tensors are hashed
    again and compared with what was written; a tensor changed meanwhile
    (updated without the hook or wait_for) fails that checkpoint with
    SourceChangedError instead of committing a torn one.  Off by default: it
    reads every byte twice (pmck-pipebench: ratio verify_sources_time_vs_plain)."""

    def __init__(self, path=None, *, name="default", ramdisk=None, shared_dir=None, keep=2,
                 rank=0, world_size=1, threads=0, meta_capacity=64 << 10, on_busy="wait",
                 gpu_source="direct", group=None, size=None, verify_sources=False,
                 copyout_every=1, writer_policy="batch"):
        if on_busy not in ("wait", "skip"):
            raise ValueError("on_busy must be 'wait' or 'skip'")
        if group is not None and group is not False and on_busy == "skip":
            raise ValueError("on_busy='skip' cannot be used with a group: ranks would skip "
                             "different steps and never agree on one")
        if gpu_source not in _GPU_SOURCES:
            raise ValueError(f"gpu_source must be one of {sorted(_GPU_SOURCES)}")
        if path is not None and ramdisk not in (None, False):
            raise ValueError("give either path (PM) or ramdisk, not both")
        if size is not None and (path is None or int(size) <= 0):
            raise ValueError("size is the size of a new file at path: give a path and a "
                             "positive number of bytes")
        if int(copyout_every) < 1:
            raise ValueError("copyout_every is a number of steps, at least 1")
        self.copyout_every = int(copyout_every)
        if writer_policy not in ("batch", "idle"):
            raise ValueError("writer_policy must be 'batch' or 'idle'")
        self.writer_policy = writer_policy
        self.size = int(size) if size is not None else 0
        self.verify_sources = bool(verify_sources)
        self.name = name
        self.path = os.fspath(path) if path is not None else None
        self._resolved = None
        self.ramdisk_dir = (ramdisk if isinstance(ramdisk, (str, os.PathLike)) else "/dev/shm") \
            if path is None else None
        self.shared_dir = os.fspath(shared_dir) if shared_dir is not None else None
        self.keep = keep
        self.rank = rank
        self.world_size = world_size
        self._coll = None
        self._global = c_void_p()
        if group is not None and group is not False:
            from .distributed import TorchCollectives, new_group
            self._coll = TorchCollectives(new_group() if group is True else group)
            if (rank, world_size) not in ((0, 1), (self._coll.rank, self._coll.size)):
                raise ValueError(f"rank={rank}, world_size={world_size} contradict the group "
                                 f"(rank {self._coll.rank} of {self._coll.size})")
            self.rank, self.world_size = self._coll.rank, self._coll.size
            self.name = f"{name}-rank{self.rank}"  # ranks sharing a node need their own stores
        self.threads = threads or min(8, os.cpu_count() or 2)
        self.meta_capacity = meta_capacity
        self.on_busy = on_busy
        self.gpu_source = gpu_source
        self.last_recovery = None
        self._lock = threading.RLock()
        self._h = None
        self._layout = None
        self._pipe = c_void_p()
        self._pipe_source = None
        self._copyout = c_void_p()
        self._inflight = None
        self._newest = None
        self._pending_lock = threading.Lock()
        self._pending = []  # _PendingSave: saves staged without a copy, not begun yet

    # ------------------------------------------------------------ opening

    def _pm_path(self):
        if self.path is None:
            return None
        if self._resolved is not None:
            return self._resolved
        if os.path.exists(self.path) or "/" in self.path:
            self._resolved = self.path
            return self.path
        resolve = _lib.optional("pma_ns_dax_path")
        if resolve is None:
            raise Error(f"'{self.path}' is no file, and namespace names cannot be resolved "
                        "(libpmalloc_ns.so.0 not found beside libpmckpt.so.0)")
        buf = ctypes.create_string_buffer(4096)
        check(resolve(self.path.encode(), -1, buf, len(buf)), f"namespace '{self.path}'")
        self._resolved = buf.value.decode()
        return self._resolved

    @property
    def region_path(self):
        """The device or file the store lives in."""
        return self._pm_path() or os.path.join(self.ramdisk_dir, f"pmckpt-{self.name}.pool")

    @property
    def description(self):
        """Which backend was chosen and why (after the first save or load)."""
        return self._h.description if self._h else None

    def _blank_ramdisk_file(self, path):
        """True if path is our ramdisk file and holds no pool: empty, or a zero
        pool magic.  That is what a process killed while creating it leaves
        (pmck_local_open sizes and formats the file in place, the pool's magic
        last), and pmck_local_open can neither map an empty file, nor grow a
        short one, nor format one whose header is half written."""
        if self.path is not None:
            return False
        try:
            with open(path, "rb") as f:
                magic = f.read(8)
        except FileNotFoundError:
            return False
        return not any(magic)

    def _open_existing(self):
        """Opens region, pool and store if they exist; None if there is no store yet."""
        path = self.region_path
        if self._blank_ramdisk_file(path):
            return None  # an interrupted creation: pmck_local_open makes it afresh, under its lock
        region, pool, store = c_void_p(), c_void_p(), c_void_p()
        rc = lib.pma_region_open(path.encode(), 0, _lib.PMA_REGION_NO_PREFAULT, byref(region))
        if rc == _lib.ENOENT:
            return None
        check(rc, path)
        rc = lib.pma_pool_open(region, byref(pool))
        if rc == PMA_E_NOT_POOL:
            lib.pma_region_close(byref(region))
            return None
        if rc < 0:
            msg = _lib.errormsg()
            lib.pma_region_close(byref(region))
            raise error_for(rc, f"{path}: {msg}")
        rc = lib.pmck_store_open(pool, self.name.encode(), byref(store))
        if rc < 0:
            msg = _lib.errormsg()
            lib.pma_pool_close(byref(pool))
            lib.pma_region_close(byref(region))
            if rc == _lib.ENOENT:
                return None
            raise error_for(rc, f"{path}: {msg}")
        return _Handles(region, pool, store, description=f"existing store '{self.name}' in {path}")

    def _store_layout(self):
        s = self._h.store
        rows = []
        info = _lib.TensorInfo()
        for i in range(lib.pmck_store_ntensors(s)):
            check(lib.pmck_store_tensor(s, i, byref(info)))
            rows.append((info.name.decode(), info.dtype, tuple(info.shape[:info.ndim]), info.layer))
        if not rows or rows[-1][0] != META_NAME or rows[-1][1] != _lib.DT_BYTES:
            raise LayoutError(
                f"store '{self.name}' in {self.region_path} was not written by the pmckpt Python "
                f"binding (no {META_NAME} tensor): open it with the C API, or use another name")
        return Layout(rows)

    def _open_write(self, layout):
        """Opens or creates the store for `layout`; LayoutError if it holds another one."""
        if self._h is None:
            self._h = self._open_existing()
        if self._h is not None:
            if self._layout is None:
                self._layout = self._store_layout()
            why = layout.difference(self._layout)
            if why:
                raise LayoutError(
                    f"store '{self.name}' in {self.region_path} holds another layout "
                    f"({len(self._layout.rows) - 1} tensors) than this state_dict "
                    f"({len(layout.rows) - 1} tensors): {why}.  Save it under another name, or "
                    "call destroy() first")
            if not self._h.prefaulted and self._h.local is None:
                lib.pma_region_prefault(self._h.region)  # no page faults in the first checkpoint
                self._h.prefaulted = True
        else:
            descs = layout.descs()
            pm = self._pm_path()
            opts = _lib.LocalOpts(pm.encode() if pm else None,
                                  self.ramdisk_dir.encode() if self.ramdisk_dir else None,
                                  self.name.encode(), descs, len(layout.rows), self.size)
            local = _lib.Local()
            check(lib.pmck_local_open(byref(opts), byref(local)), f"store '{self.name}'")
            self._h = _Handles(c_void_p(local.region), c_void_p(local.pool), c_void_p(local.store),
                               local=local, description=local.description.decode(), prefaulted=True)
            self._layout = layout
        if self.shared_dir and not self._copyout:
            opts = _lib.CopyoutOpts(self.shared_dir.encode(), self.keep, self.rank,
                                    self.world_size, 0, None, None)
            before = _tasks()
            check(lib.pmck_copyout_new(self._h.store, byref(opts), byref(self._copyout)),
                  f"copy-out to {self.shared_dir}")
            self._apply_policy(before, 1)

    def _ensure_pipeline(self, source, device):
        want = (source, device)
        if self._pipe and self._pipe_source == want:
            return
        if self._pipe:
            lib.pmck_pipeline_delete(byref(self._pipe))
        opts = _lib.PipelineOpts(self.threads, -1,
                                 _lib.BUSY_SKIP if self.on_busy == "skip" else _lib.BUSY_WAIT,
                                 source, device,
                                 # every commit: the writer submits it; else _copy_out does
                                 self._copyout.value if self.copyout_every == 1 else None,
                                 self._global.value,
                                 None, None,
                                 _lib.PIPELINE_VERIFY_SOURCES if self.verify_sources else 0)
        before = _tasks()
        check(lib.pmck_pipeline_new(self._h.store, byref(opts), byref(self._pipe)),
              "pipeline")
        self._apply_policy(before, self.threads)
        self._pipe_source = want

    def _apply_policy(self, before, n):
        """writer_policy='idle': moves the n threads the library has just started
        (those not in `before` that run SCHED_BATCH) to SCHED_IDLE.  Each sets
        SCHED_BATCH itself once started, so wait (up to 1 s) until all n have,
        lest one overwrite SCHED_IDLE afterwards.  Best effort, like the library's."""
        if self.writer_policy != "idle" or not hasattr(os, "SCHED_IDLE"):
            return
        deadline = time.monotonic() + 1.0
        while True:
            new = [t for t in _tasks() - before if _policy(t) == os.SCHED_BATCH]
            if len(new) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        for t in new:
            try:
                os.sched_setscheduler(t, os.SCHED_IDLE, os.sched_param(0))
            except OSError:
                pass

    def _check_global(self, rc, what):
        """check() with the collective's own failure added to the message."""
        if rc < 0:
            from .distributed import message
            raise error_for(rc, f"{what}: {message(self._coll, _lib.errormsg() or _lib.strerror(rc))}")
        return rc

    def _ensure_global(self):
        """Ties the open store to the group (collective: same layout and world size everywhere)."""
        if self._coll is None or self._global:
            return
        self._check_global(lib.pmck_global_new(self._h.store, byref(self._coll.struct),
                                               byref(self._global)),
                           f"store '{self.name}' joining {self.world_size} ranks")

    # ------------------------------------------------------------ saving

    def _prepare(self, state_dict, step, kind="state_dict", extra_capacity=0):
        if not isinstance(state_dict, dict):
            raise TypeError("a state_dict is a dict")
        cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in _leaves(state_dict))
        gpu_path = cuda and self._gpu_ok(state_dict)
        fl = Flattener(stage_cuda=cuda and not gpu_path)
        tree = fl.encode(state_dict)
        doc = {"format": FORMAT, "kind": kind, "step": step, "torch": torch.__version__,
               "tree": tree, "tensors": {e.name: e.info for e in fl.entries if e.info}}
        prep = _Prepared(fl.entries, doc, extra_capacity=extra_capacity)
        prep.gpu = gpu_path
        return prep

    def _gpu_ok(self, state_dict):
        dev = next(t.device for t in _leaves(state_dict) if isinstance(t, torch.Tensor) and t.is_cuda)
        return lib.pmck_gpu_available(dev.index or 0) == 0

    def _start(self, prep, step, pending=None):
        """Begins checkpoint `step` and queues every tensor layer (not the metadata).
        Returns the handle; _put_meta completes it.  pending: the _PendingSave this
        checkpoint is (the hooks waiting on it go on to wait for its layers)."""
        blob = make_blob(prep.doc, prep.binary)
        cap = blob_capacity(len(blob) + prep.extra_capacity, self.meta_capacity)
        layout = Layout.of(prep.entries, cap)
        with self._lock:
            prev = self._inflight
            if prev is not None and (self.on_busy == "wait" or not prev._all_put):
                self._finish(prev)
                prev = None
            if self._layout is not None:  # keep the store's capacity (a layout never changes)
                layout = Layout.of(prep.entries, self._layout.capacity())
            elif self._h is None:
                self._h = self._open_existing()
                if self._h is not None:
                    self._layout = self._store_layout()
                    layout = Layout.of(prep.entries, self._layout.capacity())
            if len(blob) + prep.extra_capacity > layout.capacity():
                raise MetadataTooLargeError(
                    f"the state_dict's non-tensor values take {len(blob)} bytes of metadata; "
                    f"store '{self.name}' has room for {layout.capacity()} (fixed at its first "
                    "save: pass a larger meta_capacity= to a new store, or keep large values "
                    "in tensors)")
            self._open_write(layout)
            self._ensure_global()
            entries = prep.entries
            keep = [prep]
            srcs = [e.src for e in entries]
            device = 0
            if prep.gpu:
                device = next(s.device.index or 0 for s in srcs if s.is_cuda)
                dev = torch.device("cuda", device)
                srcs = [s if s.is_cuda else s.to(dev) for s in srcs]
                keep.append(srcs)
                torch.cuda.synchronize(dev)  # the C path copies on its own streams
                source = _GPU_SOURCES[self.gpu_source]
            else:
                source = _lib.SOURCE_HOST
            if prev is not None and self._pipe_source != (source, device):
                self._finish(prev)  # a new pipeline: the old one's checkpoint ends first
                prev = None
            self._ensure_pipeline(source, device)
            rc = lib.pmck_pipeline_begin(self._pipe, step)
            if rc == _lib.PMCK_SKIPPED:
                return SaveHandle(self, step, entries, None, skipped=True)
            self._check_global(rc, f"checkpoint of step {step}")
            if prev is not None:
                self._settle(prev)  # on_busy='skip': it ended before this begin
            n = len(layout.rows)
            arr = (c_void_p * n)()
            for i, s in enumerate(srcs):
                arr[i] = s.data_ptr() if s.numel() else None
            keep.append(arr)
            h = SaveHandle(self, step, entries, keep)
            h._meta_index = n - 1
            h._arr = arr
            h._gpu = (prep.gpu, device)
            h._capacity = layout.capacity()
            self._inflight = h
            for layer in sorted({e.layer for e in entries}):
                rc = lib.pmck_pipeline_put_layer(self._pipe, layer, arr)
                if rc < 0:
                    self._abandon(h)
                    check(rc, f"checkpoint of step {step}")
            if pending is not None:
                pending.begun(h)  # the hooks now wait for h's layers
            return h

    def _put_meta(self, h, doc, binary=b""):
        """Queues the metadata blob, the checkpoint's last layer: it commits after it."""
        blob = make_blob(doc, binary)
        with self._lock:
            if len(blob) > h._capacity:
                self._abandon(h)
                raise MetadataTooLargeError(
                    f"checkpoint metadata of {len(blob)} bytes exceeds the store's capacity of "
                    f"{h._capacity} bytes (fixed at its first save); nothing was committed")
            buf = ctypes.create_string_buffer(blob, h._capacity)
            if h._gpu[0]:
                src = torch.frombuffer(buf, dtype=torch.uint8).to(torch.device("cuda", h._gpu[1]))
                torch.cuda.synchronize(src.device)
                ptr = src.data_ptr()
            else:
                src, ptr = buf, ctypes.addressof(buf)
            h._keep.append((buf, src))
            h._arr[h._meta_index] = ptr
            last = self._layout.rows[-1][3]
            rc = lib.pmck_pipeline_put_layer(self._pipe, last, h._arr)
            if rc < 0:
                self._abandon(h)
                check(rc, f"checkpoint of step {h.step}")
            h._all_put = True

    def _abandon(self, h):
        """Drops the checkpoint in flight (its missing layers can never come): the
        pipeline is deleted, which aborts it; the previous checkpoint stays."""
        err = Error(f"checkpoint of step {h.step} abandoned: nothing was committed")
        lib.pmck_pipeline_delete(byref(self._pipe))
        self._pipe_source = None
        h._done, h._error, h._keep = True, err, None
        if self._inflight is h:
            self._inflight = None

    def _finish(self, h):
        with self._lock:
            if h._done:
                return
            if not h._all_put:
                # begun, but its metadata never came (a DCP save failed between write_data
                # and finish): it can never commit, so drop it; the previous one stays
                self._abandon(h)
                return
            rc = lib.pmck_pipeline_wait(self._pipe)
            h._done = True
            h._keep = None
            if self._inflight is h:
                self._inflight = None
            if rc < 0:
                # pmck_pipeline_wait copied the writer thread's message to this thread's
                h._error = error_for(rc, f"checkpoint of step {h.step} failed: "
                                         f"{_lib.errormsg() or _lib.strerror(rc)}")
            else:
                self._newest = h.step
                self._copy_out(h.step)

    def _copy_out(self, step):
        """With copyout_every > 1: submits the commit of `step`, which has just
        ended, if its turn.  Called before the next begin (or just after it,
        which targets the other slot), so the newest sealed slot is that step's."""
        if self._copyout and self.copyout_every > 1 and step % self.copyout_every == 0:
            check(lib.pmck_copyout_submit(self._copyout), f"copy-out to {self.shared_dir}")

    def _settle(self, h):
        """Records the outcome of h, which has ended (a later begin went through)."""
        st = _lib.PipelineStats()
        lib.pmck_pipeline_stats(self._pipe, byref(st))
        h._done, h._keep = True, None
        if st.committed and st.last_step == h.step:
            self._newest = h.step
            self._copy_out(h.step)
        else:
            h._error = Error(f"checkpoint of step {h.step} failed (the store keeps the one before)")

    def save_async(self, state_dict, step):
        """Starts checkpoint `step` of state_dict and returns a SaveHandle at once.

        Tensors are written from their own memory (zero copy for contiguous or
        dense CPU tensors, from device memory through the GPU path for CUDA
        tensors): they must not change until the handle says their layer is
        persisted (hook_optimizer does that for an optimizer).  Non-tensor
        values are captured now.  A previous checkpoint still in flight is
        waited for first (or, with on_busy='skip', this one is skipped:
        handle.skipped).

        With shared_dir, a copy-out that failed since the last report is
        raised first, as CopyoutError, and nothing of this call is done (the
        local store keeps what it had): call again to save this step."""
        self._raise_copyout_failure()
        prep = self._prepare(state_dict, step)
        h = self._start(prep, step)
        if not h.skipped:
            self._put_meta(h, prep.doc)
        return h

    def save(self, state_dict, step):
        """Writes checkpoint `step` of state_dict; returns once it is committed
        and durable.  Raises (and keeps the previous checkpoint) on failure."""
        self.save_async(state_dict, step).wait()

    def wait(self):
        """Waits for the asynchronous checkpoint in flight, if any; raises its failure."""
        h = self._inflight
        if h is not None:
            h.wait()

    def wait_for(self, tensors):
        """Blocks until the given tensors are no longer read by the checkpoint in
        flight (layer-wise): call before modifying them in place.  A save staged
        without a copy (pmckpt.dcp.StorageWriter(staging="none")) and not begun yet
        is waited for until it has begun, then for its layers."""
        if self._pending:
            tensors = list(tensors)
            for p in list(self._pending):
                h = p.wait_begun()
                if h is not None and not h.done:
                    h.wait_for(tensors)
        h = self._inflight
        if h is not None and not h.done:
            h.wait_for(tensors)

    def _mark_pending(self, what="a save"):
        """Registers a save whose sources are the live tensors and which will begin
        later, in another thread (DCP's async_save staged without a copy): until it
        begins (or is released), wait_for and the hooks wait for it."""
        p = _PendingSave(self, what)
        with self._pending_lock:
            self._pending.append(p)
        return p

    @property
    def pending(self):
        """The saves registered as pending (staged without a copy, not begun yet)."""
        return list(self._pending)

    @property
    def inflight(self):
        """The SaveHandle of the asynchronous checkpoint in flight, or None."""
        return self._inflight

    # ------------------------------------------------------------ loading

    def _recover(self):
        """Makes the newest verified checkpoint readable (local slots, then shared_dir)."""
        if self._inflight is not None:
            self._finish(self._inflight)
        if self._coll is not None:
            return self._recover_global()
        if self._h is None:
            self._h = self._open_existing()
        if self._h is None:
            if self.shared_dir:
                return self._recover_into_new_store()
            raise NoCheckpointError(f"no store '{self.name}' in {self.region_path}")
        if self._layout is None:
            self._layout = self._store_layout()
        rec = _lib.Recovery()
        rc = lib.pmck_store_recover(self._h.store, byref(rec))
        if rc == 0:
            self.last_recovery = {"step": rec.step, "tier": "local", "slot": rec.slot,
                                  "rejected_step": rec.rejected_step if rec.rejected else None,
                                  "rejected_tensor": rec.rejected_tensor.decode() if rec.rejected
                                  else None}
            self._report_rejections(rec.step)
            self._newest = max(self._newest or 0, rec.step)
            return
        msg = _lib.errormsg()
        if rc in (PMCK_E_NO_CHECKPOINT, PMCK_E_NONE_USABLE) and self.shared_dir:
            return self._recover_tiers()
        raise self._recovery_error(rc, msg)

    def _report_rejections(self, loaded_step):
        """Adds the last recovery's rejected candidates to last_recovery["rejected"]
        and warns RecoveryWarning once for each."""
        rejected = _rejections(self._h.store if self._h else None)
        if self.last_recovery is not None:
            self.last_recovery["rejected"] = rejected
        for r in rejected:
            warnings.warn(RecoveryWarning(
                f"store '{self.name}': {_describe(r)}; loaded step {loaded_step} instead",
                **r), stacklevel=4)

    def _recovery_error(self, rc, msg):
        """The error of a failed recovery; its rejected candidates are named in the
        message and in the error's `rejected` list (CheckpointsUnusableError)."""
        rejected = _rejections(self._h.store if self._h else None)
        self.last_recovery = {"step": None, "tier": None, "rejected": rejected}
        if rejected:
            msg = msg + "; rejected: " + "; ".join(_describe(r) for r in rejected)
        err = error_for(rc, msg)
        err.rejected = rejected
        return err

    def _recover_global(self):
        """Every rank of the group loads the newest step that all of them can
        produce (pmck_global_recover).  A rank without a local store (node
        replaced, ramdisk lost) creates it from its newest shared file first."""
        if self._h is None:
            self._h = self._open_existing()
        foreign = 0
        if self._h is None and self.shared_dir:
            from .safetensors import newest_shared_file, layout_of_file, shared_steps
            steps = shared_steps(self.shared_dir)
            if steps and steps[0][2] != self.world_size:
                # The newest step is another world size's: create nothing (no pool file).
                foreign = steps[0][2]
            else:
                path = newest_shared_file(self.shared_dir, self.rank, self.world_size)
                if path is not None:
                    self._open_write(layout_of_file(path))
        # Collective from here on: a rank with nothing must not leave the others waiting.
        foreign = self._coll.allreduce(foreign, _lib.REDUCE_MAX)
        if foreign:
            raise WorldSizeError(
                f"the newest checkpoint in {self.shared_dir} was written by {foreign} ranks, "
                f"this job has {self.world_size}: not recovered, nothing created (resharding "
                f"is left to torch.distributed.checkpoint)", PMCK_E_WORLD_SIZE)
        if not self._coll.allreduce(1 if self._h is not None else 0):
            raise NoCheckpointError(
                f"some rank of the {self.world_size} has neither a store nor a shared file "
                f"(this rank, {self.rank}: {'has' if self._h else 'lacks'} '{self.name}' in "
                f"{self.region_path})")
        if self._layout is None:
            self._layout = self._store_layout()
        self._ensure_global()
        if self._pipe:  # recovery may unseal or import slots: no pipeline meanwhile
            lib.pmck_pipeline_delete(byref(self._pipe))
            self._pipe_source = None
        rec = _lib.GlobalRecovery()
        shared = self.shared_dir.encode() if self.shared_dir else None
        rc = lib.pmck_global_recover(self._global, shared, byref(rec))
        if rc in (PMCK_E_NONE_USABLE, PMCK_E_NO_CHECKPOINT):
            from .distributed import message
            raise self._recovery_error(rc, f"recovery of {self.world_size} ranks: "
                                       f"{message(self._coll, _lib.errormsg() or _lib.strerror(rc))}")
        self._check_global(rc, f"recovery of {self.world_size} ranks")
        self.last_recovery = {"step": rec.step, "tier": "shared" if rec.tier else "local",
                              "reason": rec.reason.decode()}
        self._report_rejections(rec.step)
        self._newest = rec.step

    def _recover_tiers(self):
        tr = _lib.TierRecovery()
        rc = lib.pmck_recover_tiers(self._h.store, self.shared_dir.encode(), self.rank, byref(tr))
        if rc < 0:
            raise self._recovery_error(rc, _lib.errormsg() or _lib.strerror(rc))
        self.last_recovery = {"step": tr.step, "tier": "shared" if tr.tier else "local",
                              "path": tr.path.decode(), "reason": tr.reason.decode()}
        self._report_rejections(tr.step)
        self._newest = max(self._newest or 0, tr.step)

    def _recover_into_new_store(self):
        """The local store is gone (ramdisk lost, node replaced): create it with the
        layout of the newest shared file, then import that file (two-tier recovery)."""
        from .safetensors import newest_shared_file, layout_of_file
        path = newest_shared_file(self.shared_dir, self.rank)
        if path is None:
            raise NoCheckpointError(f"no store '{self.name}' in {self.region_path}, and no "
                                    f"complete step for rank {self.rank} in {self.shared_dir}")
        self._open_write(layout_of_file(path))
        self._recover_tiers()

    def _read_blob(self):
        s = self._h.store
        idx = lib.pmck_store_find(s, META_NAME.encode())
        if idx < 0:
            raise LayoutError(f"store '{self.name}' holds no {META_NAME} tensor")
        ptr = lib.pmck_store_tensor_data(s, idx)
        head = ctypes.string_at(ptr, 24)
        import struct
        _, jlen, blen = struct.unpack("<8sQQ", head)
        return parse_blob(ctypes.string_at(ptr, min(24 + jlen + blen, self._layout.capacity())))

    def _tensor_view(self, name, info):
        """A tensor viewing the recovered checkpoint's bytes of `name` in the
        region (no copy; valid until the next save), with its dtype, shape and strides."""
        s = self._h.store
        idx = lib.pmck_store_find(s, name.encode())
        if idx < 0:
            raise CorruptError(f"checkpoint metadata names tensor '{name}', which the store lacks")
        ti = _lib.TensorInfo()
        check(lib.pmck_store_tensor(s, idx, byref(ti)))
        shape, dtype = _shape_dtype(ti, info)
        stride = info.get("stride")
        if ti.nbytes == 0:
            return idx, ti, torch.empty_strided(shape, stride, dtype=dtype) if stride \
                else torch.empty(shape, dtype=dtype)
        u8 = _u8_view(lib.pmck_store_tensor_data(s, idx), ti.nbytes)
        flat = u8.view(dtype)
        view = flat.as_strided(shape, stride) if stride else flat.reshape(shape)
        return idx, ti, view

    def load(self, into=None, *, map_location=None):
        """Returns the newest verified checkpoint as a state_dict.

        into: a state_dict of the same structure whose tensors are filled in
        place (and returned in the result); tensors it lacks are allocated.
        map_location: device for allocated tensors (default: where they were
        saved).  With shared_dir, falls back to the newest complete step there
        when the local store holds nothing verified.  last_recovery says what
        was loaded from where."""
        with self._lock:
            self._recover()
            doc, _ = self._read_blob()
            if doc.get("kind") != "state_dict":
                raise Error(f"store '{self.name}' holds a DCP checkpoint: load it with "
                            "torch.distributed.checkpoint.load and pmckpt.dcp.StorageReader")
            infos = doc.get("tensors", {})
            targets = {}
            if into is not None:
                fl = Flattener()
                fl.encode(into)
                targets = {e.name: e.tensor for e in fl.entries}
                extra = sorted(set(targets) - set(tree_names(doc["tree"])))
                if extra:
                    raise LayoutError(f"into= has tensor '{extra[0]}', which the checkpoint of "
                                      f"step {doc['step']} does not")
            tensors = {}
            copier = Copier(parallel=into is not None or parallel_fresh())
            for name in tree_names(doc["tree"]):
                info = infos.get(name, {})
                tensors[name] = self._load_tensor(name, info, targets.get(name), map_location,
                                                  copier)
            copier.run()
        return Decoder(tensors.__getitem__).decode(doc["tree"])

    def _load_tensor(self, name, info, dst, map_location, copier):
        idx, ti, src = self._tensor_view(name, info)
        fresh = dst is None
        if fresh:
            dev = map_location if map_location is not None else info.get("dev", "cpu")
            dst = (torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device=dev)
                   if "stride" in info else torch.empty(src.shape, dtype=src.dtype, device=dev))
        elif dst.dtype != src.dtype or dst.shape != src.shape:
            raise LayoutError(f"tensor '{name}': {dst.dtype}{list(dst.shape)} in into=, "
                              f"{src.dtype}{list(src.shape)} in the checkpoint")
        copy_into(dst, src, copier, fresh)
        return dst

    # ------------------------------------------------------------ the rest

    def newest_step(self):
        """The step of the newest committed checkpoint in the local store, or None.
        Reads the slots' seals (verification happens at load)."""
        with self._lock:
            if self._inflight is not None:
                self._finish(self._inflight)
            if self._h is None:
                self._h = self._open_existing()
            if self._h is None:
                return None
            slot_step = _lib.optional("pmck_store_slot_step")
            if slot_step is not None:
                steps = [slot_step(self._h.store, k) for k in (0, 1)]
                return max(steps) if max(steps) >= 0 else None
            try:  # an older library: recover (verifies)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RecoveryWarning)
                    self._recover()
                return self._newest
            except NoCheckpointError:
                return None

    @property
    def step(self):
        """The newest step committed or loaded through this object (None before)."""
        return self._newest

    @property
    def global_step(self):
        """With a group: the newest step known to be committed by every rank (None
        before the first).  A save_async of step s completes the agreement on the
        step before it, so after it returns that step is global."""
        if not self._global:
            return None
        v = lib.pmck_global_agreed(self._global)
        return v if v >= 0 else None

    @property
    def layout(self):
        """[(name, pmck dtype name, shape, layer)] of the open store, or None."""
        if self._layout is None:
            return None
        return [(n, lib.pmck_dtype_name(c).decode(), s, l) for n, c, s, l in self._layout.rows]

    def export_safetensors(self, path):
        """Writes the newest verified checkpoint to `path` as safetensors (atomically)."""
        with self._lock:
            self._recover()
            check(lib.pmck_safetensors_write(self._h.store, os.fspath(path).encode(),
                                             self.rank, self.world_size), os.fspath(path))

    def import_safetensors(self, path, step=None):
        """Imports a safetensors file as checkpoint `step` (default: the file's
        step, else the newest step + 1).  A file written by pmckpt (copy-out,
        export_safetensors) is verified against its checksums and imported by
        the library; any other file becomes a flat state_dict {name: tensor}."""
        from .safetensors import read_header, layout_of_file, load_file
        path = os.fspath(path)
        header = read_header(path)
        if META_NAME in header:
            with self._lock:
                if self._inflight is not None:
                    self._finish(self._inflight)
                self._open_write(layout_of_file(path, header))
                if self._pipe:  # no other writer while a pipeline exists
                    lib.pmck_pipeline_delete(byref(self._pipe))
                    self._pipe_source = None
                if step is None:
                    step = int(header.get("__metadata__", {}).get("step", 0)) or self._next_step()
                check(lib.pmck_safetensors_import(self._h.store, path.encode(), step), path)
                self._newest = step
                if self._copyout:
                    lib.pmck_copyout_submit(self._copyout)
            return step
        state = load_file(path)
        step = step if step is not None else self._next_step()
        self.save(state, step)
        return step

    def _next_step(self):
        if self._newest is None:
            self._newest = self.newest_step() or 0
        return self._newest + 1

    def _copyout_failure(self, wait=False):
        """The copy-out failure not reported yet (a CopyoutError), or None; taken: it
        is reported once.  wait: first wait for every submitted copy."""
        if not self._copyout:
            return None
        f = _lib.CopyoutFailure()
        rc = lib.pmck_copyout_check(self._copyout, _lib.COPYOUT_WAIT if wait else 0, byref(f))
        if rc == 0:
            return None
        if not f.error:  # the check itself failed
            return error_for(rc, f"copy-out to {self.shared_dir}: {_lib.errormsg()}")
        msg = f.message.decode("utf-8", "replace") or _lib.strerror(rc)
        return CopyoutError(f"copy-out of step {f.step} to {self.shared_dir} failed: {msg}", rc,
                            path=f.path.decode("utf-8", "replace") or None, step=f.step,
                            needed=f.needed, available=f.available)

    def _raise_copyout_failure(self, wait=False):
        err = self._copyout_failure(wait)
        if err is not None:
            raise err

    def wait_copyout(self):
        """Waits until every committed checkpoint submitted for copy-out is in
        shared_dir; raises CopyoutError for a failure not reported yet."""
        self._raise_copyout_failure(wait=True)

    def stats(self):
        """Counters of the pipeline and the copy-out (dicts), where they exist."""
        out = {}
        if self._pipe:
            st = _lib.PipelineStats()
            lib.pmck_pipeline_stats(self._pipe, byref(st))
            out["pipeline"] = {f: getattr(st, f) for f, _ in st._fields_}
        if self._copyout:
            st = _lib.CopyoutStats()
            lib.pmck_copyout_stats(self._copyout, byref(st))
            out["copyout"] = {f: getattr(st, f) for f, _ in st._fields_}
        return out

    def close(self):
        """Waits for the checkpoint in flight and the copy-out, and releases everything."""
        with self._lock:
            err = None
            if self._inflight is not None:
                self._finish(self._inflight)
            if self._pipe:
                lib.pmck_pipeline_delete(byref(self._pipe))
                self._pipe_source = None
            if self._global:
                lib.pmck_global_delete(byref(self._global))
            if self._copyout:
                err = self._copyout_failure(wait=True)
                lib.pmck_copyout_delete(byref(self._copyout))
            if self._h is not None:
                self._h.close()
                self._h = None
            self._layout = None
            if err:
                raise err

    def destroy(self):
        """Closes and deletes the store (both slots).  A ramdisk file left holding no
        store is removed too; a PM device or file (Store(path)) keeps its pool."""
        with self._lock:
            self.close()
            h = self._open_existing()
            if h is None:
                return
            pool = h.pool
            lib.pmck_store_close(byref(h.store))
            rc = lib.pmck_store_destroy(pool, self.name.encode())
            msg = _lib.errormsg()
            left = [0]
            count = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)(
                lambda info, arg: left.__setitem__(0, left[0] + 1) or 0)
            if rc == 0:
                lib.pma_pool_foreach(pool, count, None)
            lib.pma_pool_close(byref(h.pool))
            lib.pma_region_close(byref(h.region))
            if rc < 0:
                raise error_for(rc, msg)
            if self.path is None and left[0] == 0:
                os.unlink(self.region_path)  # ours by name, and empty now

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h is not None or self._pipe:
                self.close()
        except Exception:
            pass


def _tasks():
    """The thread ids of this process (Linux; empty elsewhere)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _policy(tid):
    try:
        return os.sched_getscheduler(tid)
    except OSError:
        return None


def _leaves(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _leaves(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _leaves(x)
    else:
        yield v


def _shape_dtype(ti, info):
    shape = tuple(info["shape"]) if "shape" in info else tuple(ti.shape[:ti.ndim])
    return shape, torch_dtype(info["dtype"]) if "dtype" in info else _PMCK_TO_TORCH[ti.dtype]
