# SPDX-License-Identifier: BSD-3-Clause
"""Saving through the store's pipeline: a state_dict turned into tensors and
metadata (_prepare), a checkpoint begun and queued layer by layer (_start,
_put_meta), its end (_finish, _settle, _abandon), the SaveHandle the caller
waits on, saves registered before they begin (_PendingSave: DCP's zero-copy
async_save), the commit-driven copy-out (_copy_out) and the writer threads'
scheduling policy.  Internals of pmckpt.Store (store.py), mixed into it."""
import contextlib
import ctypes
import gc
import operator
import os
import threading
import time
import warnings
from ctypes import byref, c_void_p

import torch

from . import _lib
from ._lib import lib, check
from ._state import (FORMAT, Flattener, Layout, entry_layers, blob_capacity, make_blob,
                     module_prefix)
from .errors import Error, MetadataTooLargeError, error_for

_data_ptr = torch.Tensor.data_ptr  # (map(_data_ptr, tensors): each address read in C)


class GpuMemoryWarning(UserWarning):
    """A store took device memory for snapshots that torch's caching allocator had
    held unused: training may now run out of device memory at its next peak."""


class GpuPathWarning(UserWarning):
    """CUDA tensors are saved through host memory: the GPU path is unavailable."""


_PUT_STREAM = _lib.optional("pmck_pipeline_put_layer_stream")
_WAIT_STREAM = _lib.optional("pmck_pipeline_wait_layer_stream")
_WAIT_LAYERS = _lib.optional("pmck_pipeline_wait_layers_stream")


def _put_stream(dev):
    """The stream that GPU sources are ready on: the current stream of `dev`.  A
    library without stream-ordered copies gets the device synchronised instead."""
    if _PUT_STREAM is None:
        torch.cuda.synchronize(dev)
        return None
    return torch.cuda.current_stream(dev).cuda_stream


class _CallClock:
    """Where a save_async call's time on the caller's thread goes, by phase:
    encoding the state, making the metadata blob, waiting for the checkpoint
    in flight (its commit), moving host tensors for the GPU path, the begin
    (store, pipeline, slot), putting the layers, putting the metadata.  One
    per call (a queued save begins on another thread), added to the store's
    totals at its end (Store.stats()["call"]); a few clock reads a call."""

    PHASES = ("encode", "blob", "previous", "capture", "begin", "put", "meta")

    def __init__(self):
        self.ns = dict.fromkeys(self.PHASES, 0)
        self._t = time.perf_counter_ns()

    def lap(self, phase):
        """The time since the last lap (or the start) goes to `phase`."""
        t = time.perf_counter_ns()
        self.ns[phase] += t - self._t
        self._t = t


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for a save_async call, on again
    after (unless someone else had it off).  The call makes ~7000 objects for a
    GPT-2 medium state, most of them temporaries: with the collector on they
    set off ~10 collections per call, which promote them to the oldest
    generation, and every few calls a full collection of the whole heap (torch
    and the model) ran inside the call.  Measured on the 2-core dev VM, 40
    calls each: 403-422 collections, 1-2 of them full (110-290 ms each,
    inside the call), against 40 collections and no full one with it paused;
    the temporaries die by reference count before any collection sees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_SNAPSHOT_SLACK = 64 << 20  # what a GPU pipeline takes beyond its snapshot (alignment, lists)


def cuda_memory_free(device):
    """(bytes free in the driver, bytes torch's caching allocator holds unused) on CUDA
    device `device`: the second is what torch.cuda.empty_cache() gives back, or a
    large allocation of torch's can take (not the free parts of partly used
    segments, counted out)."""
    unused = (torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device) -
              torch.cuda.memory_stats(device).get("inactive_split_bytes.all.current", 0))
    return torch.cuda.mem_get_info(device)[0], unused


def _cache_could_cover(need, device):
    """Whether CUDA device `device` may lack the `need` bytes of a snapshot (and the
    pipeline's slack beside it) that torch's caching allocator holds unused."""
    if not need or not torch.cuda.is_available():
        return False
    free, unused = cuda_memory_free(device)
    return free < need + _SNAPSHOT_SLACK <= free + unused


_PACK_ALIGN = 256  # each packed tensor starts where a CUDA allocation would


def _pack_host(srcs, dev):
    """srcs with their host tensors (a CUDA state's step counters, say: one per
    parameter of an AdamW; the metadata blob) replaced by views of one buffer on
    `dev`, filled by a single copy: the host packs them into one (pinned, for a
    CUDA `dev`) buffer, and one non-blocking copy on the current stream moves it
    (from pinned memory: a copy from pageable memory would first wait for all
    the work queued on the stream, the state's own kernels, say).  One copy for
    all rather than one per tensor (each with its own pinned allocation), on the
    training thread of every save_async.  Tensors on another CUDA device are each
    copied to `dev`: the library's kernels (G's snapshot, device hashing) read
    sources on `dev` only, and its ready event orders them after `dev`'s stream
    (torch orders a copy between devices after both current streams).  Returns
    (srcs, buffers to keep until the checkpoint ends)."""
    where, other = [], []  # host tensors; those on another GPU
    for i, s in enumerate(srcs):
        d = s.device
        if d != dev:
            (where if d.type != dev.type else other).append(i)
    if not where and not other:
        return srcs, ()
    out = list(srcs)
    keep = []
    if where:
        host, placed = _pack(srcs, where, pin=dev.type == "cuda")
        moved = host.to(dev, non_blocking=True)
        for i, off, n in placed:
            out[i] = moved[off:off + n]
        keep += [host, moved]
    for i in other:
        out[i] = srcs[i].to(dev, non_blocking=True)
        keep.append(out[i])
    return out, tuple(keep)


def _pack(srcs, where, pin):
    """The bytes of srcs[i] for i in `where` (host tensors, dense), copied now into
    one uint8 host buffer, each at a multiple of _PACK_ALIGN.  Returns the buffer
    and [(i, offset, nbytes)]."""
    placed, total = [], 0
    for i in where:
        n = srcs[i].numel() * srcs[i].element_size()
        placed.append((i, total, n))
        total += -(-n // _PACK_ALIGN) * _PACK_ALIGN
    host = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=pin)
    base = host.data_ptr()
    for i, off, n in placed:
        if n:
            ctypes.memmove(base + off, srcs[i].data_ptr(), n)
    return host, placed


def _put_layer(pipe, layer, arr, stream):
    if stream is None or _PUT_STREAM is None:
        return lib.pmck_pipeline_put_layer(pipe, layer, arr)
    return _PUT_STREAM(pipe, layer, arr, stream)


_PUT_LAYERS = _lib.optional("pmck_pipeline_put_layers_stream")


def _put_layers(pipe, layers, arr, stream):
    """Puts every layer of `layers` in order: one call into the library where it
    has pmck_pipeline_put_layers_stream (GPT-2 medium: 443 layers per save)."""
    if _PUT_LAYERS is None:
        for layer in layers:
            rc = _put_layer(pipe, layer, arr, stream)
            if rc < 0:
                return rc
        return 0
    return _PUT_LAYERS(pipe, (ctypes.c_uint32 * len(layers))(*layers), len(layers), arr, stream)


_GPU_SOURCES = {"direct": _lib.SOURCE_GPU_DIRECT, "kernel": _lib.SOURCE_GPU_KERNEL,
                "staged": _lib.SOURCE_GPU_STAGED, "snapshot": _lib.SOURCE_GPU_SNAPSHOT}


class SaveHandle:
    """An asynchronous checkpoint in flight (Store.save_async).

    Its sources, the state_dict's tensors, must stay unchanged until the layer
    that holds them is persisted: wait_layer(name) / wait_for(tensors) block
    only for what is asked, wait() for the whole checkpoint (committed and
    durable in the store's slot), raising the failure if there was one."""

    def __init__(self, store, step, prep, keep, skipped=False):
        self.step = step
        self.skipped = skipped
        self._store = store
        self._keep = keep
        self._done = skipped
        self._all_put = False
        self._error = None
        self._gpu = (False, 0)  # (written by the GPU path, its device)
        # Built on every save_async, on the training thread: only what the hooks use
        # (wait_for) is built here; the names for wait_layer when it is first called.
        self._entries, self._entry_layers = prep.entries, prep.layers
        self._layer_of = None  # tensor name or module prefix -> its layers
        # data_ptr of a tensor written in place -> its layer (the first one's, if two)
        self._ptr_layer = {}
        if not skipped:
            self._map_sources(prep, prep.ptrs)
        self._queued = None  # on_busy='queue': its _PendingSave until it has begun

    def _map_sources(self, prep, ptrs):
        """The map the hooks look tensors up in (wait_for): each address in ptrs (one
        per tensor of prep) of a tensor the checkpoint reads in place -> its layer."""
        if prep.dense and not prep.staged:  # every tensor (in C: ~1170 a save)
            self._ptr_layer = dict(zip(reversed(ptrs), reversed(prep.layers)))
        else:
            pairs = [(p, layer) for e, p, t, layer in zip(prep.entries, ptrs, prep.tensors,
                                                          prep.layers)
                     if e.zero_copy and e.nbytes and not (prep.staged and t.is_cuda)]
            self._ptr_layer = dict(reversed(pairs))

    @property
    def done(self):
        """True once the checkpoint has ended, committed or failed (wait() then
        returns, or raises the failure, at once), or was skipped.  Asks the store
        without blocking; an ended checkpoint's sources are released then."""
        if not self._done:
            self._store._poll(self)
        return self._done

    def _begun(self):
        """A queued checkpoint (on_busy='queue'): waits until it has begun (or failed)."""
        if self._queued is not None:
            self._queued.wait_begun()

    def wait(self):
        """Blocks until the checkpoint is committed (durable); raises its failure."""
        self._begun()
        if not self._done:
            self._store._finish(self)
        if self._error is not None:
            raise self._error

    def _wait_layers(self, layers, stream_ordered=False):
        """Host waits until the layers are persisted; stream_ordered (GPU path only):
        the current CUDA stream waits on the GPU for their copies instead."""
        self._begun()
        if self._done:
            return
        pipe = self._store._pipe
        ordered = stream_ordered and self._gpu[0] and _WAIT_STREAM is not None
        if ordered:
            stream = torch.cuda.current_stream(torch.device("cuda", self._gpu[1])).cuda_stream
        layers = sorted(layers)
        if ordered and _WAIT_LAYERS is not None:
            # One call for all (the optimizer's hook: every layer of the state), in
            # which the pipeline snapshots what its writers have not reached yet
            # (Store(gpu_snapshot_on_wait=)).
            rcs = [_WAIT_LAYERS(pipe, (ctypes.c_uint32 * len(layers))(*layers), len(layers),
                                stream)]
        else:
            rcs = (_WAIT_STREAM(pipe, layer, stream) if ordered else
                   lib.pmck_pipeline_wait_layer(pipe, layer) for layer in layers)
        for rc in rcs:
            if rc < 0:
                self._store._finish(self)
                raise self._error or error_for(rc, f"checkpoint of step {self.step} failed")

    def wait_layer(self, name):
        """Blocks until the layer holding `name` is persisted: a tensor name
        ("model/fc1.weight"), a module prefix ("model/fc1") or a layer number."""
        if self._layer_of is None:
            self._layer_of = {}
            for e, layer in zip(self._entries, self._entry_layers):
                self._layer_of.setdefault(e.name, set()).add(layer)
                self._layer_of.setdefault(module_prefix(e.name), set()).add(layer)
        if isinstance(name, int) and name in self._entry_layers:
            layers = [name]
        elif isinstance(name, str) and name in self._layer_of:
            layers = self._layer_of[name]
        else:
            raise KeyError(f"no tensor or module '{name}' in the checkpoint of step {self.step}")
        self._wait_layers(layers)

    def wait_for(self, tensors):
        """Waits until every given tensor that is a source of this checkpoint
        may be modified in place (others are ignored): call before modifying
        them.  Host tensors: blocks until they are persisted.  CUDA tensors
        written by the GPU path: stream-ordered, as a CUDA library does it --
        blocks only until their copies are queued, then work queued on the
        current CUDA stream from now on runs after the copies have read them
        (the optimizer's update, say); the host goes on while the GPU copies.
        Work on another stream must be ordered after the current one."""
        self._begun()
        if self._done:
            return
        # (each tensor's address and its layer read in C: ~1170 tensors at every step)
        layers = set(map(self._ptr_layer.get, map(_data_ptr, tensors)))
        layers.discard(None)
        self._wait_layers(layers, stream_ordered=True)


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

    def __init__(self, fl, layers, doc, binary=b"", extra_capacity=0, dense=False):
        self.entries = fl.entries  # the store tensors' Entries, in order
        self.tensors = fl.tensors  # each one's tensor, the caller's
        self.ptrs = fl.ptrs  # each one's data_ptr() (Flattener.ptrs)
        self.sources = fl.srcs  # each one's source (Flattener.srcs)
        self.staged = fl.staged  # CUDA tensors' sources are host copies (stage_cuda)
        self.layers = layers  # each one's layer (entry_layers)
        # every entry is written from its tensor's own memory and has bytes (the plan's)
        self.dense = dense
        self.doc = doc
        self.binary = binary
        self.extra_capacity = extra_capacity  # room for a binary part known only later (DCP)
        self.blob = None  # make_blob(doc, binary), once _start has made it
        self.gpu = None  # the CUDA device the GPU path writes from, if it does
        self.srcs = None  # the tensors the pipeline reads, once captured (_capture)
        self.packed = ()  # buffers the captured sources live in (host tensors moved)


class _QueuedSave:
    """A save_async that waits for the checkpoint in flight to end before it
    begins (on_busy='queue'): begun by a thread of its own, or by whichever
    call of the store needs it begun first."""

    def __init__(self, prep, handle, pending, ready):
        self.prep, self.handle, self.pending = prep, handle, pending
        self.ready = ready  # CUDA event on the caller's stream when it was queued, or None


class _Pipeline:
    """The save path of a Store."""

    def _prepare(self, state_dict, step, kind="state_dict", extra_capacity=0):
        if not isinstance(state_dict, dict):
            raise TypeError("a state_dict is a dict")
        fl = Flattener(self._memo)
        tree = fl.encode(state_dict)
        self._memo = fl.memo  # the next save's fast path (Flattener's memo)
        # Layers now, not at the begin: a queued save's handle (on_busy='queue') maps
        # each source to its layer for the hooks before the checkpoint begins.
        layers, dense = self._layers_of(fl.entries)
        gpu_path = fl.cuda_device is not None and self._gpu_path(fl.cuda_device)
        if fl.cuda_device is not None and not gpu_path:
            fl.stage_cuda()
        doc = {"format": FORMAT, "kind": kind, "step": step, "torch": torch.__version__,
               "tree": tree, "tensors": fl.tensors_json()}
        prep = _Prepared(fl, layers, doc, extra_capacity=extra_capacity, dense=dense)
        prep.gpu = fl.cuda_device if gpu_path else None  # the device the GPU path writes from
        return prep

    # The plan of the last save (self._plan): what follows from its Entries alone, made
    # again only when they are not the same Entries in the same order (a Flattener memo
    # hands the same Entry objects to every save of an unchanged state):
    # (entries, their layers, their Layout or None until made, the sorted layer numbers,
    # whether every entry is written from its tensor's own memory and has bytes).

    def _layers_of(self, entries):
        """(entry_layers(entries), whether every entry is zero copy with bytes), the
        last save's if the entries are the same."""
        plan = self._plan
        if plan is None or plan[0] != entries:  # Entry objects: compared by identity
            layers = entry_layers(entries)
            plan = self._plan = (entries, layers, None, sorted(set(layers)),
                                 all(e.zero_copy and e.nbytes for e in entries))
        return plan[1], plan[4]

    def _layout_of(self, prep, capacity):
        """Layout.of(prep's entries, layers, capacity), the last save's if the same."""
        plan = self._plan
        ours = plan is not None and plan[1] is prep.layers
        if ours and plan[2] is not None and plan[2].capacity() == capacity:
            return plan[2]
        layout = Layout.of(prep.entries, prep.layers, capacity)
        if ours:
            self._plan = plan[:2] + (layout,) + plan[3:]
        return layout

    def _layer_numbers(self, prep):
        """The sorted layer numbers of prep's entries."""
        plan = self._plan
        return plan[3] if plan is not None and plan[1] is prep.layers else \
            sorted(set(prep.layers))

    def _gpu_path(self, dev):
        """Whether the direct GPU path serves CUDA device `dev`.  If not, CUDA
        tensors are staged through host memory, and the first time a store
        meets that it says why (GpuPathWarning): a build without CUDA (a wheel
        built where there was no nvcc), no driver, no such device."""
        if lib.pmck_gpu_available(dev.index or 0) == 0:
            return True
        if not self._gpu_warned:
            self._gpu_warned = True
            warnings.warn(GpuPathWarning(
                f"store '{self.name}': CUDA tensors on {dev} are copied through host memory, "
                f"not written by the GPU path: {_lib.errormsg()}"), stacklevel=5)
        return False

    def _capture(self, prep):
        """Fixes what the checkpoint reads (prep.srcs): the entries' tensors, and for
        the GPU path their host tensors moved to the device now (_pack_host: their
        values as of this call)."""
        srcs = prep.sources
        if prep.gpu is not None:
            srcs, prep.packed = _pack_host(srcs, prep.gpu)
        prep.srcs = srcs

    def _start(self, prep, step, pending=None, handle=None, clock=None):
        """Begins checkpoint `step` and queues every tensor layer (not the metadata).
        Returns the handle; _put_meta completes it.  pending: the _PendingSave this
        checkpoint is (the hooks waiting on it go on to wait for its layers).
        handle: the SaveHandle a queued save returned already.  clock: the call's
        _CallClock, if it is timed."""
        lap = clock.lap if clock is not None else lambda phase: None
        blob = prep.blob = make_blob(prep.doc, prep.binary)
        lap("blob")
        with self._lock:
            self._begin_queued()  # a queued save (on_busy='queue') goes first
            prev = self._inflight
            if prev is not None and (self.on_busy != "skip" or not prev._all_put):
                self._finish(prev)
                prev = None
            lap("previous")
            if self._layout is None and self._h is None:
                self._h = self._open_existing()
                if self._h is not None:
                    self._layout = self._store_layout()
            # The store's capacity once it has one (a layout never changes), else the
            # capacity a first save fixes.
            layout = self._layout_of(prep, self._layout.capacity() if self._layout else
                                     blob_capacity(len(blob) + prep.extra_capacity,
                                                   self.meta_capacity))
            if len(blob) + prep.extra_capacity > layout.capacity():
                # DCP's commit writes its Metadata there too: its room counts (dcp.py)
                dcp_room = (f", and DCP's metadata {prep.extra_capacity} more"
                            if prep.extra_capacity else "")
                raise MetadataTooLargeError(
                    f"the state_dict's non-tensor values take {len(blob)} bytes of "
                    f"metadata{dcp_room}; store '{self.name}' has room for "
                    f"{layout.capacity()} (fixed at its first save: pass a larger "
                    "meta_capacity= to a new store, or keep large values in tensors)")
            self._open_write(layout)
            self._ensure_global()
            lap("begin")
            if prep.srcs is None:
                self._capture(prep)
                lap("capture")
            srcs = prep.srcs
            keep = [prep]
            device = 0
            if prep.gpu is not None:
                device = prep.gpu.index or 0
                # The copies wait on the GPU for the work queued so far on the current
                # stream (an event, pmck_pipeline_put_layer_stream): no host synchronisation.
                stream = _put_stream(torch.device("cuda", device))
                source = _GPU_SOURCES[self.gpu_source]
            else:
                source, stream = _lib.SOURCE_HOST, None
            if prev is not None and self._pipe_source != (source, device):
                self._finish(prev)  # a new pipeline: the old one's checkpoint ends first
                prev = None
            self._ensure_pipeline(source, device)
            rc = lib.pmck_pipeline_begin(self._pipe, step)
            if rc == _lib.PMCK_SKIPPED:
                if handle is None:
                    return SaveHandle(self, step, prep, None, skipped=True)
                handle.skipped = handle._done = True
                return handle
            self._check_global(rc, f"checkpoint of step {step}")
            if prev is not None:
                self._settle(prev)  # on_busy='skip': it ended before this begin
            n = len(layout.rows)  # the sources, then the metadata (_put_meta sets it)
            # Each tensor's address as the encode read it, for the sources (most are the
            # tensors themselves) and for the handle's map of the tensors the hooks wait
            # for: no pass over the tensors here.  Not for a queued save, begun after its
            # call: a tensor's memory may have been replaced since (t.data = ...), and
            # what is begun now reads what the tensor holds now.
            ptrs = prep.ptrs if handle is None else list(map(_data_ptr, prep.tensors))
            if prep.dense and all(map(operator.is_, srcs, prep.tensors)):
                arr = (c_void_p * n)(*ptrs)  # (in C: ~1170 tensors a save)
            else:
                arr = (c_void_p * n)(*[(p if s is t else s.data_ptr()) if e.nbytes else None
                                       for e, t, s, p in zip(prep.entries, prep.tensors, srcs,
                                                             ptrs)])
            keep.append(arr)
            h = handle or SaveHandle(self, step, prep, None)
            if handle is not None and ptrs != prep.ptrs:
                # a tensor's memory replaced while queued: the hooks wait for what is
                # read now (before pending.begun below lets them look)
                h._map_sources(prep, ptrs)
            h._keep = keep
            h._meta_index = n - 1
            h._arr = arr
            h._gpu = (prep.gpu is not None, device)
            h._capacity = layout.capacity()
            self._inflight = h
            lap("begin")
            rc = _put_layers(self._pipe, self._layer_numbers(prep), arr, stream)
            lap("put")
            if rc < 0:
                self._abandon(h)
                check(rc, f"checkpoint of step {step}")
            if pending is not None:
                pending.begun(h)  # the hooks now wait for h's layers
            return h

    def _save_queued(self, state_dict, step):
        """save_async with on_busy='queue'.  What the checkpoint will read is fixed
        now (the state's structure and non-tensor values, its host tensors moved to
        the device for the GPU path, and an event on the current stream after
        which its CUDA tensors are ready); if a checkpoint is in flight, this one
        begins in a thread of its own as soon as that one has committed, and the
        caller goes on at once instead of waiting for it on the training thread.
        Until it has begun the hooks wait for it as for a pending save, and a
        further save_async waits for it to begin (one queued at most)."""
        clock = _CallClock()
        with gc_paused():
            prep = self._prepare(state_dict, step)
            clock.lap("encode")
            self._capture(prep)
            clock.lap("capture")
            with self._lock:
                self._begin_queued()  # one queued at most: the one before begins now
                clock.lap("previous")
                prev = self._inflight
                if prev is None or prev._done:
                    h = self._begin(prep, clock=clock)
                    self._timed_call(clock)
                    return h
                ready = None
                if prep.gpu is not None:
                    ready = torch.cuda.Event()
                    ready.record(torch.cuda.current_stream(prep.gpu))
                h = SaveHandle(self, step, prep, None)
                pending = self._mark_pending(f"queued save_async of step {step}")
                h._queued = pending
                q = self._queued = _QueuedSave(prep, h, pending, ready)
                t = threading.Thread(target=self._run_queued, args=(q,), daemon=True,
                                     name=f"pmckpt-queue-{self.name}")
                pending.bind(t)
                t.start()
                clock.lap("begin")
                self._timed_call(clock)
                return h

    def _settle_inflight(self):
        """With the lock held: begins the queued save, if any, then waits for the
        checkpoint in flight to end, so that the slots hold still."""
        self._begin_queued()
        if self._inflight is not None:
            self._finish(self._inflight)

    def _run_queued(self, q):
        with self._lock:
            if self._queued is q:
                self._begin_queued()

    def _begin_queued(self):
        """Begins the queued save, if any (called with the lock held: by its thread,
        or first by any call that needs the store settled).  Its GPU copies run on
        a stream of the store's that waits for the event recorded when it was
        queued: ordered after the work that made its tensors, and not after what
        the caller queued since.  A failure is the save's own: its handle raises
        it (wait()), and the hooks waiting for its begin go on."""
        q = self._queued
        if q is None:
            return
        self._queued = None
        h = q.handle
        try:
            on_stream = contextlib.nullcontext()
            if q.ready is not None:
                stream = self._queue_streams.get(q.prep.gpu)
                if stream is None:
                    stream = self._queue_streams[q.prep.gpu] = torch.cuda.Stream(q.prep.gpu)
                stream.wait_event(q.ready)
                on_stream = torch.cuda.stream(stream)
            with on_stream:
                self._begin(q.prep, pending=q.pending, handle=h)
        except Exception as err:  # noqa: BLE001 -- the save's failure, raised by its wait()
            if not h._done:
                h._done, h._keep = True, None
                h._error = err if isinstance(err, Error) else Error(
                    f"checkpoint of step {h.step} could not begin: {err}")
            q.pending.release(h._error)

    def _begin(self, prep, pending=None, handle=None, clock=None):
        """Begins the checkpoint of prep (_start) and queues its metadata (_put_meta):
        save_async's, and a queued save's.  Returns its handle.  clock: the
        call's _CallClock, if it is timed."""
        h = self._start(prep, prep.doc["step"], pending=pending, handle=handle, clock=clock)
        if h.skipped:
            if pending is not None:
                pending.release()
        else:
            self._put_meta(h, prep.doc, blob=prep.blob)
            if clock is not None:
                clock.lap("meta")
        return h

    def _timed_call(self, clock):
        """Adds a finished call's phases to the store's totals (Store.stats()["call"])."""
        with self._lock:
            for phase, ns in clock.ns.items():
                self._call_ns[phase] += ns
            self._call_ns["calls"] += 1

    def _put_meta(self, h, doc, binary=b"", blob=None):
        """Queues the metadata blob, the checkpoint's last layer: it commits after it.
        blob: make_blob(doc, binary) if the caller has it already."""
        if blob is None:
            blob = make_blob(doc, binary)
        with self._lock:
            if len(blob) > h._capacity:
                self._abandon(h)
                raise MetadataTooLargeError(
                    f"checkpoint metadata of {len(blob)} bytes exceeds the store's capacity of "
                    f"{h._capacity} bytes (fixed at its first save); nothing was committed")
            buf = ctypes.create_string_buffer(blob, h._capacity)
            stream = None
            if h._gpu[0]:
                dev = torch.device("cuda", h._gpu[1])
                src = _pack_host([torch.frombuffer(buf, dtype=torch.uint8)], dev)
                stream = _put_stream(dev)  # the copy above is on it: ordered by its event
                ptr = src[0][0].data_ptr()
            else:
                src, ptr = buf, ctypes.addressof(buf)
            h._keep.append((buf, src))
            h._arr[h._meta_index] = ptr
            last = self._layout.rows[-1][3]
            rc = _put_layer(self._pipe, last, h._arr, stream)
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

    def _poll(self, h):
        """Ends h, without waiting, if its checkpoint has committed or failed: its
        handle done, its result recorded, its sources released.  Does nothing if
        it is still in flight, or if the store is busy on another thread (a save
        beginning): a later poll, or the next save, ends it."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if h._done or self._inflight is not h or not h._all_put or \
                    lib.pmck_pipeline_busy(self._pipe):
                return
            self._finish(h)  # returns at once: the pipeline has nothing in flight
        finally:
            self._lock.release()

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

    def _pipeline_flags(self, source):
        """pmck_pipeline_opts.flags for a pipeline of this source: verify_sources (the
        library checks host sources only), and where GPU sources are hashed (gpu_hash;
        $PMCK_GPU_HASH, when set, overrides it in the library)."""
        flags = _lib.PIPELINE_VERIFY_SOURCES if self.verify_sources else 0
        if source != _lib.SOURCE_HOST:
            flags |= _lib.PIPELINE_GPU_HASH[self.gpu_hash]
        return flags

    def _hash_on_host(self):
        """Whether the writers of a CUDA state hash on the host: gpu_hash "host" (or
        $PMCK_GPU_HASH=host, which the library obeys over gpu_hash, read as it does when
        the pipeline is made), or the staged source, which hashes in its copy."""
        where = os.environ.get("PMCK_GPU_HASH") or self.gpu_hash
        return where == "host" or self.gpu_source == "staged"

    @property
    def _gpu_threads(self):
        """The writers of a pipeline of CUDA tensors made now: threads=, else 12 when they
        hash on the host (fewer fell behind PCIe, H200 2026-11-27) and 4 when the GPU
        hashes (as fast, and they leave the CPU to the training: H200 2026-11-28;
        docs/gpu.md), at most the CPUs the store was made on."""
        return self._threads_given or min(12 if self._hash_on_host() else 4, self._cpus)

    def _ensure_pipeline(self, source, device):
        want = (source, device)
        if self._pipe and self._pipe_source == want:
            return
        if self._pipe:
            lib.pmck_pipeline_delete(byref(self._pipe))
        threads = self.threads if source == _lib.SOURCE_HOST else self._gpu_threads
        opts = _lib.PipelineOpts(threads, -1,
                                 _lib.BUSY_SKIP if self.on_busy == "skip" else _lib.BUSY_WAIT,
                                 source, device,
                                 # every commit: the writer submits it; else _copy_out does
                                 self._copyout.value if self.copyout_every == 1 else None,
                                 self._global.value,
                                 None, None,
                                 self._pipeline_flags(source),
                                 None, self._snapshot_on_wait_bytes(source))
        before = _tasks()
        rc = lib.pmck_pipeline_new(self._h.store, byref(opts), byref(self._pipe))
        hash_flags = _lib.PIPELINE_GPU_HASH["host"] | _lib.PIPELINE_GPU_HASH["device"]
        why = (_lib.errormsg() or "") if rc else ""
        if opts.flags & hash_flags and (rc == _lib.ENOTSUP or (
                rc == _lib.EINVAL and "unknown pipeline flags" in why)):
            # The GPU's hashing refused: a GPU this build has no kernel code for (before
            # sm_90, its DMA copies working), or a libpmckpt older than the hashing flags.
            # Without the flags both hash on the host: with the writers' count for it.
            opts.flags &= ~hash_flags
            threads = opts.threads = self._threads_given or min(12, self._cpus)
            rc = lib.pmck_pipeline_new(self._h.store, byref(opts), byref(self._pipe))
            if rc == 0:
                warnings.warn(GpuPathWarning(
                    f"store '{self.name}': {_lib.path} does not hash on this GPU ({why}): "
                    f"gpu_hash={self.gpu_hash!r} not applied, the {threads} writers hash "
                    "on the host"), stacklevel=5)
        need = self._snapshot_bytes(source)
        if rc == _lib.ENOMEM and _cache_could_cover(need, device):
            # Device memory for snapshots that torch's caching allocator holds unused:
            # given back, then once more, and the trade said.
            torch.cuda.empty_cache()
            rc = lib.pmck_pipeline_new(self._h.store, byref(opts), byref(self._pipe))
            if rc == 0:
                warnings.warn(GpuMemoryWarning(
                    f"store '{self.name}': {need} bytes of device memory for snapshots were "
                    "taken from what torch's caching allocator held unused "
                    "(torch.cuda.empty_cache()); training's next peak may run out of device "
                    "memory: a smaller gpu_snapshot_on_wait, or gpu_source='direct', leaves "
                    "it"), stacklevel=5)
        check(rc, "pipeline")
        self._apply_policy(before, threads)
        self._pipe_source = want

    def _snapshot_bytes(self, source):
        """The device memory the pipeline of `source` takes for snapshots."""
        if source == _lib.SOURCE_GPU_SNAPSHOT:
            return lib.pmck_store_data_size(self._h.store)
        return self._snapshot_on_wait_bytes(source)

    def _snapshot_on_wait_bytes(self, source):
        """Device memory for the pipeline's snapshots on wait: gpu_snapshot_on_wait's
        bytes (True: the store's data, the whole state), for the GPU sources that
        read the tensors in place; 0 otherwise."""
        want = self.gpu_snapshot_on_wait
        if not want or source in (_lib.SOURCE_HOST, _lib.SOURCE_GPU_SNAPSHOT):
            return 0
        return lib.pmck_store_data_size(self._h.store) if want is True else int(want)

    def _delete_pipeline(self):
        """Deletes the pipeline, if any (one in flight is aborted: finish it first)."""
        if self._pipe:
            lib.pmck_pipeline_delete(byref(self._pipe))
            self._pipe_source = None

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

    def _mark_pending(self, what="a save"):
        """Registers a save whose sources are the live tensors and which will begin
        later, in another thread (DCP's async_save staged without a copy): until it
        begins (or is released), wait_for and the hooks wait for it."""
        p = _PendingSave(self, what)
        with self._pending_lock:
            self._pending.append(p)
        return p



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
