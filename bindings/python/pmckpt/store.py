# SPDX-License-Identifier: BSD-3-Clause
"""pmckpt.Store: state_dicts in a two-slot checkpoint store on PM or a ramdisk.

The public class and its documentation are here; its internals are mixed in
by concern, one module each:
  _backend.py   where the store lives and how it is opened (PM, namespace
                name, ramdisk; pmck_local_open), its layout, its copy-out;
  _pipeline.py  saving: the pipeline, save_async's SaveHandle, pending saves
                (DCP zero-copy), the writers' scheduling policy;
  _recovery.py  loading: which checkpoint and from which tier, rejections
                (RecoveryWarning), reading tensors out of the region;
  _multirank.py Store(group=...): the group, global steps, collective recovery.
"""
import functools
import os
import threading
import warnings
from ctypes import byref, c_void_p

import torch

from . import _lib
from ._backend import _Backend
from ._copy import Copier, parallel_fresh, usable_cpus
from ._lib import lib, check
from ._multirank import _MultiRank
from ._pipeline import (_GPU_SOURCES, _CallClock, _Pipeline, GpuMemoryWarning, GpuPathWarning,
                        SaveHandle, gc_paused)
from ._recovery import _Recovery, RecoveryWarning, copy_into
from ._state import META_NAME, Decoder, Flattener, tree_names
from .errors import Error, LayoutError, NoCheckpointError

__all__ = ["Store", "SaveHandle", "RecoveryWarning", "GpuPathWarning", "GpuMemoryWarning",
           "copy_into"]


class Store(_Backend, _Pipeline, _Recovery, _MultiRank):
    """A checkpoint store for PyTorch state_dicts.

    Store(path) puts it on persistent memory: a devdax device, a file on an
    fsdax file system, or a devdax namespace name ("ckpt0", resolved with
    libpmalloc_ns's pma_ns_dax_path).  A missing file is created at the first
    save, of `size` bytes (e.g. 8 << 30), or, without size, sized for two
    slots of the first state_dict as the ramdisk file is.  A blank device is
    formatted; one holding other data or a damaged pool is refused
    (pmckpt create --force, pmckpt check).  Store() or Store(ramdisk=DIR) puts it in
    a file DIR/pmckpt-NAME.pool with the same two-slot protocol; DIR defaults
    to the user's own /dev/shm/pmckpt-UID.  shared_dir: each committed checkpoint is also copied,
    in the background, to SHARED_DIR/step-N/rank-R.safetensors, keeping the
    newest `keep`; load() falls back to it when the local store has nothing.
    A copy that fails (a full file system, say) leaves the local checkpoint
    as it is and later steps are still copied; the failure is raised once, as
    CopyoutError, by the next save()/save_async() (before it starts anything),
    wait_copyout() or close().

    sharing: who else may use the directories.  "private" (the default): the
    ramdisk directory (made 0700 if missing) and shared_dir (made 0700, its
    steps 0700, files 0600) must be the user's own and not writable by its
    group or others, and neither may be a symbolic link; otherwise
    UnsafePathError, before anything is written or loaded: whoever can write
    there could change a checkpoint without its checksums telling.  "group":
    directories shared on purpose are accepted as they are, and what the
    copy-out makes is group-readable (0750, 0640).  Either way the pool file
    is 0600, never opened through a link, and another user's file under its
    name is refused (UnsafePathError).

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

    partner (with a group): partner copies (docs/multirank.md, "Partner
    copies").  Each committed step is also sent, in the background, to a rank
    on another node, which keeps it in its ramdisk (partner_dir, else this
    store's ramdisk directory) as pmckpt-NAME-rankR.partner-of-S.pool; a
    step counts as global only once every copy of it is sealed; load() tries
    the local store, then the partner's copy, then shared_dir, so a replaced
    node's ranks get the newest global step from their partners without any
    shared directory.  node: this rank's node (ranks with equal values share
    one); default from the launcher (pmckpt.distributed.launcher_node).
    partner_keep: copies kept per partner (1..8).  partner_every=N: only every
    N-th save is copied (the first, then every N-th; the same N on every
    rank), the others count as global once every rank committed them; a
    copied step is also kept in this rank's ramdisk outside its two slots
    (pmckpt-NAME.partner-self.pool: two states more), so a lost node comes
    back to the newest copied global step.  The copies travel over a
    group of their own (pmckpt.distributed.partner_group), made here:
    creating the Store is then collective over the default group.
    partner_transport: "gloo" (default) sends the host memory in place;
    "nccl" sends through NCCL, each 4 MiB piece staged through a buffer on
    this rank's current CUDA device (on a stream of its own), for jobs whose
    network NCCL drives (NVLink, InfiniBand with GPUDirect) faster than gloo.
    The same on every rank.

    gpu_snapshot_on_wait: device memory (bytes; True: as much as the whole
    state) for snapshots taken when the optimizer's hook (or wait_for) waits
    for a checkpoint of CUDA tensors saved with gpu_source "direct",
    "kernel" or "staged": the pieces the writers have not reached yet are
    copied on the GPU, the writers copy them out from there, and the
    optimizer waits for that copy only, not for the state to cross PCIe.
    The pieces last in line go first; what does not fit is waited for as
    without it.  Reserved when the GPU pipeline is made, outside torch's
    allocator.  Off by default (docs/gpu-sessions.md, "Snapshots on wait").

    gpu_hash: where the checksums of CUDA tensors' pieces are computed as
    they are saved.  "device" (the default): the GPU hashes the tensors, by
    kernels on streams of the library's own, and the writers only wait and
    flush.  "host": each writer hashes what landed in the store, CPU time
    per byte that the training thread feels.  The writers of a CUDA state number
    min(4, CPUs) with "device", min(12, CPUs) with "host" or
    gpu_source="staged" (which hashes in its copy on the host): about 12
    hashing writers keep up with PCIe.  On an H200 (docs/gpu.md) "device"
    with 4 writers saved as fast as "host" with 12 (0.936 and 0.928 of a
    pinned copy) and kept training at batch 8, every step (GradientLog), at
    0.92 of no checkpoints where "host" with 12 writers kept 0.62: the 12
    writers' hashing and spinning took the CPU from the training thread.
    $PMCK_GPU_HASH ("host" or "device"), when set, overrides it, the writer
    count included.  threads= sets the count for every source.  Host tensors
    are hashed by the writers' copies either way.  On a GPU the library has
    no kernel code for (before sm_90, where its DMA copies still work) the
    writers hash on the host, 12 of them, and a GpuPathWarning says so.

    verify_sources: after each layer is written, its tensors are hashed
    again and compared with what was written; a tensor changed meanwhile
    (updated without the hook or wait_for) fails that checkpoint with
    SourceChangedError instead of committing a torn one.  Off by default: it
    reads every byte twice (pmck-pipebench: ratio verify_sources_time_vs_plain)."""

    def __init__(self, path=None, *, name="default", ramdisk=None, shared_dir=None, keep=2,
                 rank=0, world_size=1, threads=0, meta_capacity=64 << 10, on_busy="wait",
                 gpu_source="direct", group=None, size=None, verify_sources=False,
                 copyout_every=1, writer_policy="batch", sharing="private", partner=False,
                 partner_keep=2, partner_dir=None, node=None, partner_every=1,
                 partner_transport="gloo", gpu_snapshot_on_wait=False, gpu_hash="device"):
        if on_busy not in ("wait", "skip", "queue"):
            raise ValueError("on_busy must be 'wait', 'skip' or 'queue'")
        if group is not None and group is not False and on_busy in ("skip", "queue"):
            raise ValueError(f"on_busy='{on_busy}' cannot be used with a group: "
                             + ("ranks would skip different steps and never agree on one"
                                if on_busy == "skip" else "a group's checkpoint begins with "
                                "the ranks' agreement, on the training thread"))
        if gpu_source not in _GPU_SOURCES:
            raise ValueError(f"gpu_source must be one of {sorted(_GPU_SOURCES)}")
        if not (isinstance(gpu_snapshot_on_wait, bool) or (
                isinstance(gpu_snapshot_on_wait, int) and gpu_snapshot_on_wait >= 0)):
            raise ValueError("gpu_snapshot_on_wait is True (room for the whole state), False, "
                             "or a number of bytes of device memory")
        if gpu_hash not in ("host", "device"):
            raise ValueError(f"gpu_hash must be 'device' (the GPU hashes the tensors, the "
                             f"default) or 'host' (the writers hash what lands), not "
                             f"{gpu_hash!r}")
        if gpu_snapshot_on_wait and gpu_source == "snapshot":
            raise ValueError("gpu_snapshot_on_wait is for the strategies that read the tensors "
                             "in place: gpu_source='snapshot' already snapshots every layer")
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
        if sharing not in ("private", "group"):
            raise ValueError("sharing must be 'private' or 'group'")
        self.sharing = sharing
        self.writer_policy = writer_policy
        self.size = int(size) if size is not None else 0
        self.verify_sources = bool(verify_sources)
        self.name = name
        self.path = os.fspath(path) if path is not None else None
        self._resolved = None
        # The ramdisk directory given, or None for the user's own default (checked by
        # the library as the default is); ramdisk_dir names it either way.
        self._ramdisk_given = os.fspath(ramdisk) if path is None and isinstance(
            ramdisk, (str, os.PathLike)) else None
        self.ramdisk_dir = (self._ramdisk_given or _lib.default_ramdisk_dir()) \
            if path is None else None
        self.shared_dir = os.fspath(shared_dir) if shared_dir is not None else None
        self.keep = keep
        self.rank = rank
        self.world_size = world_size
        self._coll = None
        self._global = c_void_p()
        self._partner = c_void_p()
        self.partner = bool(partner)
        if self.partner and (group is None or group is False):
            raise ValueError("partner=True needs a group: partner copies live on another "
                             "rank's node")
        if not 1 <= int(partner_keep) <= _lib.PARTNER_KEEP_MAX:
            raise ValueError(f"partner_keep is a number of copies, 1..{_lib.PARTNER_KEEP_MAX}")
        self.partner_keep = int(partner_keep)
        if int(partner_every) < 1:
            raise ValueError("partner_every is a number of saves, at least 1")
        self.partner_every = int(partner_every)
        self.partner_dir = os.fspath(partner_dir) if partner_dir is not None else None
        if partner_transport not in ("gloo", "nccl"):
            raise ValueError("partner_transport must be 'gloo' or 'nccl'")
        self.partner_transport = partner_transport
        self.node = node
        if group is not None and group is not False:
            self._join_group(group, rank, world_size, name)
        self._threads_given = threads  # 0: the defaults below, chosen again where reopened
        self._cpus = usable_cpus()
        self.threads = threads or min(8, self._cpus)
        self.gpu_hash = gpu_hash
        self.gpu_source = gpu_source
        self.meta_capacity = meta_capacity
        self.on_busy = on_busy
        self.gpu_snapshot_on_wait = gpu_snapshot_on_wait
        self._gpu_warned = False
        self._early_load = "auto"  # _start_early_copies: "auto", "always" (tests), "never"
        # the early copies verified where they land (_copies_checksums), not in the region
        self._verify_copies = True
        self._hashers = {}  # CUDA device index -> pmck_gpu_hasher (None: none to be had)
        self.last_recovery = None
        self._lock = threading.RLock()
        self._h = None
        self._layout = None
        self._memo = None  # the last save's Flattener.memo: the next one's fast path
        self._plan = None  # the last save's plan (_Pipeline._layers_of)
        self._pipe = c_void_p()
        self._pipe_source = None
        self._copyout = c_void_p()
        self._inflight = None
        self._queued = None  # on_busy='queue': the _QueuedSave waiting for _inflight to end
        self._queue_streams = {}  # device -> the stream a queued save's GPU copies start on
        self._newest = None
        self._pending_lock = threading.Lock()
        self._pending = []  # _PendingSave: saves staged without a copy, not begun yet
        # save_async's time on the caller's thread by phase, summed (_CallClock)
        self._call_ns = dict.fromkeys(_CallClock.PHASES + ("calls",), 0)

    # ------------------------------------------------------------ where it lives

    @property
    def region_path(self):
        """The device or file the store lives in."""
        return self._pm_path() or os.path.join(self.ramdisk_dir, f"pmckpt-{self.name}.pool")

    @property
    def description(self):
        """Which backend was chosen and why (after the first save or load)."""
        return self._h.description if self._h else None

    # ------------------------------------------------------------ saving

    def save_async(self, state_dict, step):
        """Starts checkpoint `step` of state_dict and returns a SaveHandle at once.

        Tensors are written from their own memory (zero copy for contiguous or
        dense CPU tensors, from device memory through the GPU path for CUDA
        tensors): they must not change until the handle says their layer is
        persisted (hook_optimizer does that for an optimizer).  Non-tensor
        values are captured now.  A previous checkpoint still in flight is
        waited for first (or, with on_busy='skip', this one is skipped:
        handle.skipped; with on_busy='queue', this call returns at once and the
        checkpoint begins, in a thread of the store's, when that one has
        committed: the hooks and handle.wait_for wait for it to begin; a
        tensor whose memory is replaced meanwhile (t.data = ...) is read
        from its new memory, which on a GPU must be ready by then: the copies
        are ordered after the work queued on the caller's stream before this
        call, not after what it queued since).

        With shared_dir, a copy-out that failed since the last report is
        raised first, as CopyoutError, and nothing of this call is done (the
        local store keeps what it had): call again to save this step."""
        self._raise_copyout_failure()
        if self.on_busy == "queue":
            return self._save_queued(state_dict, step)
        clock = _CallClock()
        with gc_paused():
            prep = self._prepare(state_dict, step)
            clock.lap("encode")
            h = self._begin(prep, clock=clock)
        self._timed_call(clock)
        return h

    def save(self, state_dict, step):
        """Writes checkpoint `step` of state_dict; returns once it is committed
        and durable.  Raises (and keeps the previous checkpoint) on failure."""
        self.save_async(state_dict, step).wait()

    def wait(self):
        """Waits for the asynchronous checkpoint in flight, if any; raises its failure."""
        q = self._queued
        if q is not None:
            q.handle.wait()  # it begins after the one in flight ends
        h = self._inflight
        if h is not None:
            h.wait()

    def wait_for(self, tensors):
        """Blocks until the given tensors are no longer read by the checkpoint in
        flight (layer-wise): call before modifying them in place.  A save staged
        without a copy (pmckpt.dcp.StorageWriter(staging="none")) and not begun yet
        is waited for until it has begun, then for its layers."""
        waited = None
        if self._pending:
            tensors = list(tensors)
            for p in list(self._pending):
                waited = p.wait_begun()
                if waited is not None and not waited.done:
                    waited.wait_for(tensors)
        h = self._inflight
        if h is not None and h is not waited and not h.done:
            h.wait_for(tensors)  # once a pending save has begun it is the one in flight

    def poll(self):
        """True if no checkpoint is in flight or queued.  Never waits: a checkpoint
        in flight that has committed or failed is ended (its handle done, its
        sources released: a save's tensors are no longer referenced by the store),
        as the next save would end it."""
        h = self._inflight
        if h is not None and not h.done:
            return False
        return self._queued is None

    @property
    def pending(self):
        """The saves registered as pending (staged without a copy, not begun yet)."""
        return list(self._pending)

    @property
    def inflight(self):
        """The SaveHandle of the asynchronous checkpoint in flight, or None."""
        return self._inflight

    # ------------------------------------------------------------ loading

    def load(self, into=None, *, map_location=None, step=None):
        """Returns the newest verified checkpoint as a state_dict.

        into: a state_dict of the same structure whose tensors are filled in
        place (and returned in the result); tensors it lacks are allocated.
        map_location: device for allocated tensors (default: where they were
        saved).  With shared_dir, falls back to the newest complete step there
        when the local store holds nothing verified.  last_recovery says what
        was loaded from where.

        step: that step instead of the newest, from a local slot (the store
        keeps the newest two): NoCheckpointError if no slot holds it,
        CheckpointsUnusableError if it fails verification.  Not with a group
        (the group's recovery picks the step)."""
        # The collector paused, as for a save (gc_paused): 40 loads of a GPT-2-medium-shaped
        # state set off 36 collections with it, 370 without (dev VM).
        with self._lock, gc_paused():
            targets = {}
            if into is not None:
                # The last save's memo (only read): into= is most often the state saved.
                fl = Flattener(self._memo)
                fl.encode(into)
                targets = {e.name: t for e, t in zip(fl.entries, fl.tensors)}
            early = None
            # the newest sealed slot's tensors, from its unverified metadata: read once, if needed
            newest = functools.cache(lambda: self._newest_tensors(map_location))
            if step is not None:
                if self._coll is not None:
                    raise ValueError("load(step=) is not for a store with a group: load() "
                                     "brings every rank to the newest global step")
                self._recover_step(int(step))
            elif into is not None:  # crossing while recovery verifies
                early = self._start_early_copies(targets, newest=newest)
            else:  # into new tensors: those for a GPU cross while recovery verifies
                early = self._start_early_copies(self._made_for_load(map_location, newest),
                                                 made=True, newest=newest)
            try:
                return self._load_recovered(early, step, targets, into, map_location, newest)
            finally:
                if early is not None:
                    early.release()  # its copies read the region: done before anything else

    def _load_recovered(self, early, step, targets, into, map_location, newest):
        """load()'s rest, with the lock held: recovery (unless load(step=) did it),
        then the copies out of the readable checkpoint; early: the copies started
        before verification (_EarlyCopies), used if recovery chose their slot;
        newest: a callable giving the newest sealed slot's tensors, from its
        unverified metadata (_newest_tensors), read once, for a load into new
        tensors."""
        fresh = None
        if step is None:
            # Into new host tensors (no into=): recovery copies each tensor out of the slot
            # as it verifies it, one read of the slot instead of two (_fresh_buffers).
            fresh = self._fresh_buffers(map_location, newest) if into is None else None
            if not self._recover(fresh, early.given if early is not None else None):
                fresh = None  # not the local recovery that fills them: copied as below
            if early is not None and not early.matches(self.last_recovery):
                early.release()  # recovery chose another checkpoint: its copies go unused
                early = None
            elif early is not None and early.given is not None and \
                    early.given.verified_bytes(fresh or ()):
                # bytes recovery verified by the copies' checksums, not in the region
                self.last_recovery["copies_verified_bytes"] = \
                    early.given.verified_bytes(fresh or ())
        try:
            return self._load_checkpoint(early, targets, into, map_location, fresh)
        finally:
            if fresh:
                fresh.clear()  # the buffers no tensor took, also when the load failed

    def _load_checkpoint(self, early, targets, into, map_location, fresh):
        """_load_recovered's copies out of the readable checkpoint."""
        offered = sum(b.numel() for b in fresh.values()) if fresh else 0
        doc, _ = self._read_blob()
        if doc.get("kind") != "state_dict":
            raise Error(f"store '{self.name}' holds a DCP checkpoint: load it with "
                        "torch.distributed.checkpoint.load and pmckpt.dcp.StorageReader")
        infos = doc.get("tensors", {})
        names = tree_names(doc["tree"])
        extra = sorted(set(targets) - set(names))
        if extra:
            raise LayoutError(f"into= has tensor '{extra[0]}', which the checkpoint of "
                              f"step {doc['step']} does not")
        tensors = {}
        copier = Copier(parallel=into is not None or parallel_fresh())
        self._map_for_loads(targets, infos, map_location)
        for name in names:
            info = infos.get(name, {})
            dst = targets.get(name)
            taken = early.take(name, info, dst) if early is not None else None
            if taken is not None:
                tensors[name] = taken
                continue
            tensors[name] = self._load_tensor(name, info, dst, map_location, copier, fresh)
        if offered:
            # the bytes the new tensors took from recovery's pass (_load_tensor took each)
            left = sum(b.numel() for b in fresh.values())
            self.last_recovery["one_pass_bytes"] = offered - left
            fresh.clear()  # the rest went unused: freed before the copies below
        if early is not None:
            early.finish()  # verified: what crossed through the scratch buffer, into its tensors
            self.last_recovery["early_bytes"] = early.nbytes
        copier.run()
        return Decoder(tensors.__getitem__).decode(doc["tree"])

    def _map_for_loads(self, targets, infos, map_location):
        """Loading into CUDA tensors of one device: the region is registered with
        CUDA for it (the GPU pipeline that saves need maps it: made now if there is
        none yet), so that each copy is a DMA from pinned memory rather than
        through a bounce buffer.  Without the GPU path the copies work as before.
        Returns whether the region is registered for that device."""
        devs = {t.device for t in targets.values() if t.is_cuda}
        if map_location is not None:
            d = torch.device(map_location)
            if d.type == "cuda" and d.index is None and torch.cuda.is_available():
                d = torch.device("cuda", torch.cuda.current_device())  # where torch puts "cuda"
            devs |= {d} if d.type == "cuda" else set()
        else:
            devs |= {torch.device(i["dev"]) for n, i in infos.items()
                     if n not in targets and str(i.get("dev", "")).startswith("cuda")}
        if len(devs) != 1 or self._h is None:
            return False
        index = next(iter(devs)).index or 0
        want = (_GPU_SOURCES[self.gpu_source], index)
        if self._pipe and self._pipe_source != want:
            return False  # another pipeline (host sources): not replaced for a load
        if lib.pmck_gpu_available(index) == 0:
            self._ensure_pipeline(*want)
            return True
        return False

    # ------------------------------------------------------------ steps, files, the rest

    def _settled_store(self):
        """The open store after the checkpoint in flight has ended (opened if it exists),
        or None: no store.  Called with the lock held."""
        self._settle_inflight()
        if self._h is None:
            self._h = self._open_existing()
        return self._h

    def newest_step(self):
        """The step of the newest committed checkpoint in the local store, or None.
        Reads the slots' seals (verification happens at load)."""
        with self._lock:
            if self._settled_store() is None:
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

    def slot_steps(self):
        """The steps sealed in the local store's two slots, oldest first ([] without a
        store).  Reads the seals after waiting for the checkpoint in flight; the
        steps that load(step=) can load, unless verification rejects one."""
        with self._lock:
            if self._settled_store() is None:
                return []
            return sorted(x for x in (lib.pmck_store_slot_step(self._h.store, k) for k in (0, 1))
                          if x >= 0)

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
                self._settle_inflight()
                self._open_write(layout_of_file(path, header))
                self._delete_pipeline()  # no other writer while a pipeline exists
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

    def wait_copyout(self):
        """Waits until every committed checkpoint submitted for copy-out is in
        shared_dir; raises CopyoutError for a failure not reported yet."""
        self._raise_copyout_failure(wait=True)

    def stats(self):
        """Counters of the pipeline, the copy-out and the partner copies (dicts), where
        they exist, and "call": save_async's time on the caller's thread by phase, in
        ns summed over "calls" calls (encode: the state walked and declared; blob:
        the metadata made; previous: waiting for the checkpoint in flight to commit,
        or a queued one to begin; capture: host tensors moved for the GPU path;
        begin: store, pipeline and slot; put: the layers queued; meta: the metadata
        queued)."""
        out = {"call": dict(self._call_ns)}
        if self._pipe:
            st = _lib.PipelineStats()
            lib.pmck_pipeline_stats(self._pipe, byref(st))
            out["pipeline"] = {f: getattr(st, f) for f, _ in st._fields_}
        if self._copyout:
            st = _lib.CopyoutStats()
            lib.pmck_copyout_stats(self._copyout, byref(st))
            out["copyout"] = {f: getattr(st, f) for f, _ in st._fields_}
        if self._partner:
            st = _lib.PartnerStats()
            lib.pmck_partner_stats(self._partner, byref(st))
            out["partner"] = {f: getattr(st, f) for f, _ in st._fields_}
        return out

    def close(self):
        """Waits for the checkpoint in flight, the copy-out and the partner copies'
        rounds (collective with partner copies: every rank closes), and releases
        everything; raises what failed in the background (copy-out first)."""
        with self._lock:
            err = None
            self._settle_inflight()
            self._delete_pipeline()
            if self._partner:
                err = self._delete_partner()
            if self._global:
                lib.pmck_global_delete(byref(self._global))
            if self._copyout:
                err = self._copyout_failure(wait=True) or err
                lib.pmck_copyout_delete(byref(self._copyout))
            self._close_hashers()
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
            left = h.destroy_store(self.name)
            if self.path is None and left == 0:
                os.unlink(self.region_path)  # ours by name, and empty now

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h is not None or self._pipe or self._hashers:
                self.close()
        except Exception:
            pass
