# SPDX-License-Identifier: BSD-3-Clause
"""Recovery: which checkpoint a Store loads and from where (its local slots,
else the newest complete step in shared_dir, else a new store made from that
step's file), what was rejected on the way (RecoveryWarning,
last_recovery["rejected"], the error's `rejected`), and reading the recovered
checkpoint's metadata and tensors out of the region.  Internals of
pmckpt.Store (store.py), mixed into it; the multi-rank recovery is
_multirank.py's."""
import ctypes
import warnings
from ctypes import byref

import torch

from . import _lib
from ._lib import lib
from ._pipeline import cuda_memory_free
from ._state import (BLOB_HEAD, META_NAME, dense_permutation, parse_blob, torch_dtype,
                     tree_names, _PMCK_TO_TORCH, _TORCH_TO_PMCK)
from .errors import (CorruptError, LayoutError, NoCheckpointError, PMCK_E_NO_CHECKPOINT,
                     PMCK_E_NONE_USABLE, error_for)


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
    return [{"rank": arr[i].rank, "tier": ("local", "shared", "partner")[arr[i].tier],
             "step": arr[i].step, "reason": arr[i].reason.decode(errors="replace"),
             "quarantined": bool(arr[i].quarantined)} for i in range(n.value)]


def _describe(rej):
    return (f"rank {rej['rank']}, {rej['tier']} step {rej['step']}: {rej['reason']}")


def _u8_view(addr, nbytes):
    """A uint8 tensor over nbytes at addr (the region's memory: no copy)."""
    buf = (ctypes.c_uint8 * nbytes).from_address(addr)
    return torch.frombuffer(buf, dtype=torch.uint8)


def _same_cuda_device(a, b):
    """Whether torch devices a and b name the same CUDA device (no index: the current one)."""
    if a.type != "cuda" or b.type != "cuda":
        return False
    return (torch.cuda.current_device() if a.index is None else a.index) == \
        (torch.cuda.current_device() if b.index is None else b.index)


def copy_into(dst, src, copier, fresh=False):
    """dst[...] = src, where src views the region.  When dst's memory, in
    order, is exactly src's bytes (dense tensor, same strides) the copy is
    queued on copier: a memcpy for a CPU dst, an asynchronous copy_ for a
    CUDA one; otherwise torch copies now (other strides).  fresh: dst was just
    allocated.  The copies are done when copier.run() returns."""
    n = src.numel() * src.element_size()
    if n == 0:
        return
    dense = dst.stride() == src.stride() and dense_permutation(dst) is not None
    if dst.device.type == "cpu" and dense:
        copier.add(dst.data_ptr(), src.data_ptr(), n, fresh)
    elif dst.device.type == "cuda" and dense:
        copier.add_device(dst, src)
    else:
        dst.copy_(src)


_SLOT_DATA = _lib.optional("pmck_store_slot_tensor_data")
_RECOVER_INTO = _lib.optional("pmck_store_recover_into")
_RECOVER_GIVEN = _lib.optional("pmck_store_recover_given")
_HASHER_NEW = _lib.optional("pmck_gpu_hasher_new")
_FILL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                         ctypes.c_size_t)
_EARLY_MIN = 16 << 20  # a smaller load is not worth its second copy...
_EARLY_MANY = 64       # ...unless of this many tensors or more: a few copies, not one each
_EARLY_GAP = 1 << 20   # tensors of the slot closer than this cross in one copy
_EARLY_OWN = 1 << 20   # a new tensor this large takes its bytes in a copy of its own
_EARLY_ALIGN = 256     # each run in the scratch buffer starts where a CUDA allocation would
_HASH_PIECE = 64 << 20  # the early copies hashed on the GPU by pieces of this many bytes


def _early_pays(nbytes, saved, size):
    """Whether a load's early copies pay: nbytes of tensors, `saved` copies fewer
    than one per tensor (neighbours in the slot crossing together), a scratch
    buffer of `size` bytes.  _EARLY_MIN bytes or more: they overlap the
    verification.  A smaller load only where it saves _EARLY_MANY copies or more
    with a scratch buffer not mostly of the gaps between its tensors."""
    return nbytes >= _EARLY_MIN or (saved >= _EARLY_MANY and size <= 2 * nbytes + _EARLY_GAP)


class _EarlyCopies:
    """A load's copies started before recovery has verified the checkpoint
    (Store._start_early_copies): tensors' bytes cross from the newest sealed
    slot to their device while the CPU hashes that slot, and are used only if
    recovery then makes that same slot readable.  A load onto a GPU so takes
    about as long as its copy over PCIe, not the verification plus the copy.

    Two kinds of targets.  The tensors of into= (made=False) never hold bytes
    that failed verification: their bytes go to a scratch buffer on the
    device, and into the tensors only once verified (finish()).  New tensors
    the load makes (made=True, load() without into=) are nobody's until load()
    returns them: each of at least _EARLY_OWN bytes takes its bytes directly,
    and the small ones go through the scratch buffer, so that a state of many
    small tensors costs few copies.  Costs a device buffer as large as what
    crosses through it, for the load's duration."""

    def __init__(self, slot, step, device, scratch, placed, made, given=None):
        self.slot, self.step, self.device = slot, step, device
        # the copies' checksums (_CopiesChecksums), for recovery to take instead of
        # hashing the region: given, if it holds them (sealed), else None
        self._checksums = given
        self.given = given.sealed() if given is not None else None
        self.scratch = scratch  # None when every tensor took its bytes directly
        # name -> (tensor, offset in scratch or None: it took its bytes directly, bytes)
        self.placed = placed
        self.made = made
        self.nbytes = 0
        self._dst, self._src = [], []

    def matches(self, recovery):
        """Whether recovery made readable the slot these copies came from."""
        return bool(recovery) and recovery.get("tier") == "local" and \
            recovery.get("slot") == self.slot and recovery.get("step") == self.step

    def take(self, name, info, dst):
        """The tensor that serves `name` of the verified checkpoint, or None:
        only a plain dense tensor, as the store holds it, into the very tensor
        it was copied for (made: one the load made, where dst is None).  A
        tensor served from the scratch buffer is queued for finish()."""
        p = self.placed.get(name)
        if p is None or any(k != "dev" for k in info):
            return None
        t, off, n = p
        if (dst is not None) if self.made else (t is not dst):
            return None
        if off is not None:
            self._dst.append(t.view(-1).view(torch.uint8))
            self._src.append(self.scratch[off:off + n])
        self.nbytes += n
        return t

    def finish(self):
        """Copies the taken tensors out of the scratch buffer (on the device:
        queued on the current stream, after the copies that filled it)."""
        if not self._dst:
            return
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(self._dst, self._src)  # one launch for many on a GPU
        else:
            for d, s in zip(self._dst, self._src):
                d.copy_(s)

    def release(self):
        """Returns once the device has done the copies (the slot may change after),
        and drops what they filled: the scratch buffer, and the tensors not yet
        returned by take() (recovery chose another checkpoint: before its load
        makes tensors of its own).  Again, it does nothing."""
        if self.placed is None:
            return
        if self._checksums is not None:
            self._checksums.drop()  # the GPU's hashes read the copies: done before they go
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        # views of the scratch buffer too: a load that raised after take() keeps none alive
        self.scratch = self.placed = None
        self._dst, self._src = [], []


class _CopiesChecksums:
    """The checksums of a load's early copies (_EarlyCopies), computed from the
    bytes where they landed: on the GPU by the store's pmck_gpu_hasher, queued
    piece by piece after the copies on the caller's stream, so that a piece is
    hashed while the next one crosses; for host tensors (Store._early_load
    "always": the tests) by the host, at once.  Recovery compares them with the
    slot's own instead of hashing those tensors in the region
    (pmck_store_recover_given): a load onto a GPU then reads the slot once, over
    PCIe, where the CPU's pass beside the copies read it twice.  Recovery asks
    for the GPU's values (the host waits for them) only after hashing the slot's
    other tensors, and only if it verifies that slot."""

    def __init__(self, slot, step, dev, hasher=None):
        self.slot, self.step, self.dev = slot, step, dev
        self._idx, self._host = [], []  # store indexes; the host's values (no hasher)
        self._bytes = {}  # store index -> bytes
        self._hasher = hasher  # c_void_p, or None: the host hashes
        self.pending = False  # hashes queued, not yet waited for
        self.failed = False  # an add failed: the values are not to be had
        self.had = hasher is None  # whether the values reached recovery (fill returned 0)
        self.interrupted = None  # what interrupted fill (re-raised after recovery returns)
        self._fill = _FILL(self._filled) if hasher is not None else None
        self._keep = None
        self.struct = None

    def add(self, bufs):
        """bufs, [(store index, address, bytes)] of copies just queued on the device's
        current stream: hashed after them.  A buffer not 8-aligned is left to the
        CPU's pass over the region."""
        bufs = [b for b in bufs if b[1] % 8 == 0]
        if self.failed or not bufs:
            return
        if self._hasher is None:
            self._host += [lib.pmck_tensor_checksum(a, n) for _, a, n in bufs]
        else:
            n = len(bufs)
            srcs = (ctypes.c_void_p * n)(*(b[1] for b in bufs))
            lens = (ctypes.c_uint64 * n)(*(b[2] for b in bufs))
            stream = torch.cuda.current_stream(self.dev).cuda_stream
            if lib.pmck_gpu_hasher_add(self._hasher, stream or None, n, srcs, lens) != 0:
                self.failed = True  # this one queued nothing; those before it are dropped
                return
            self.pending = True
        self._idx += [b[0] for b in bufs]
        self._bytes.update((b[0], b[2]) for b in bufs)

    def reserve(self, sizes):
        """Room in the hasher for the chunks of buffers of these sizes (bytes), all
        the load will add: made before the first copy, so that no add waits to
        make room."""
        if self._hasher is not None and not self.failed:
            chunks = sum(-(-n // _lib.PMCK_HASH_CHUNK) for n in sizes)
            if lib.pmck_gpu_hasher_reserve(self._hasher, chunks) != 0:
                self.failed = True  # nothing queued yet: the region is hashed

    def verified_bytes(self, hashed_anyway=()):
        """The bytes recovery verified by these checksums, not those of the indexes
        in hashed_anyway (tensors with a destination of their own, which recovery
        hashes while it copies them), if the values reached it."""
        if not self.had:
            return 0
        return sum(n for i, n in self._bytes.items() if i not in hashed_anyway)

    def sealed(self):
        """This, ready for recovery (its struct made), after the last add; None where
        an add failed or none was made: then the hashes queued are dropped when
        the copies' buffers go (_EarlyCopies.release), not now, which would wait
        for the copies before recovery begins."""
        if self.failed or not self._idx:
            return None
        n = len(self._idx)
        idx = (ctypes.c_size_t * n)(*self._idx)
        csum = (ctypes.c_uint64 * n)(*self._host)
        self._keep = (idx, csum)  # alive as long as the struct that points at them
        self.struct = _lib.GivenChecksums(self.slot, self.step, n, idx, csum,
                                          ctypes.cast(self._fill, ctypes.c_void_p)
                                          if self._fill else None, None)
        return self

    def _filled(self, _arg, csum, n):
        """pmck_given_checksums.fill, on the thread that recovers: waits for the GPU.
        An exception here (an interrupt) cannot cross C: kept for the load to raise
        once recovery returns, and the values not used (recovery hashes the region)."""
        try:
            rc = lib.pmck_gpu_hasher_wait(self._hasher, csum, n)
        except BaseException as e:  # noqa: BLE001 -- re-raised by Store._recover
            self.interrupted = e
            return -1
        if rc != _lib.EINVAL:  # -EINVAL empties nothing: drop() still waits
            self.pending = False
        self.had = rc == 0
        return rc

    def drop(self):
        """Waits for the hashes that recovery did not take, and drops them: the
        copies' buffers may go only after (the GPU reads them on another stream).
        After a failed add too, which the hasher refuses others after until a
        wait empties it."""
        if self.pending or self.failed:
            self.pending = False
            if self._hasher is not None:
                lib.pmck_gpu_hasher_wait(self._hasher, None, 0)


class _Recovery:
    """The load path of a Store."""

    def _hasher(self, dev):
        """The store's pmck_gpu_hasher for CUDA device dev (made at first use, deleted
        by close()), or None where there is none to make: a library without it or
        without CUDA (the reason is kept in the store's _hashers, not retried)."""
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index not in self._hashers:
            h = ctypes.c_void_p()
            ok = _HASHER_NEW is not None and _HASHER_NEW(index, byref(h)) == 0
            self._hashers[index] = h if ok else None
        return self._hashers[index]

    def _close_hashers(self):
        """Deletes the store's hashers (close())."""
        for h in self._hashers.values():
            if h:
                lib.pmck_gpu_hasher_delete(byref(h))
        self._hashers.clear()

    def _copies_checksums(self, slot, step, dev):
        """For recovery to verify a load's early copies where they land: a
        _CopiesChecksums to add them to as they are queued, or None where that is
        not to be had (Store._verify_copies False, no library support, no hasher
        for dev); then recovery hashes the region."""
        if not self._verify_copies or _RECOVER_GIVEN is None:
            return None
        if dev.type != "cuda":  # host tensors (tests): hashed by the host
            return _CopiesChecksums(slot, step, dev)
        h = self._hasher(dev)
        return _CopiesChecksums(slot, step, dev, hasher=h) if h is not None else None

    def _start_early_copies(self, targets, made=False, newest=None):
        """For a load onto a GPU: starts copying tensors' bytes out of the newest
        sealed slot, unverified, so that they cross PCIe while recovery verifies
        the slot (_EarlyCopies).  targets: into='s tensors, {name: tensor}; or
        (made) the new tensors to make, {name: (shape, dtype, device)}
        (_made_for_load), made here once the copies are sure to start.  None
        where it does not pay or cannot be done: no CUDA tensor (each byte would
        be copied twice on the host), tensors on several devices, a region not
        registered with CUDA (a copy from it would not be asynchronous), a
        group's recovery (it may choose another step), less than _EARLY_MIN
        bytes in fewer than _EARLY_MANY tensors (many small ones cross in a few
        copies this way, where the load after verification copies each: a
        GPT-2-shaped state of 879 CUDA tensors, 15 MiB, under _EARLY_MIN, took
        48-80 ms to load(into=) on the H200), too little free device memory for
        into='s scratch buffer beside what the load still makes on that device
        while it lives (for new tensors: the small ones are then left to the
        load, the others still cross early).  newest: a callable giving
        _newest_tensors() of the load, for those bytes.  Store._early_load
        "always" takes host tensors too (tests), "never" none.  The copies'
        checksums are computed where they land (_CopiesChecksums), for recovery
        to compare."""
        mode = self._early_load
        if mode == "never" or not targets or _SLOT_DATA is None or self._coll is not None:
            return None
        # name -> (device, dtype, shape, the tensor of into= or None: one to make)
        want = {n: (torch.device(x[2]), x[1], tuple(x[0]), None) if made else
                (x.device, x.dtype, tuple(x.shape), x) for n, x in targets.items()}
        want = {n: w for n, w in want.items() if w[0].type == "cuda" or mode == "always"}
        devs = {w[0] for w in want.values()}
        if len(devs) != 1:
            return None
        dev = devs.pop()
        sealed = self._newest_sealed_slot()  # not `newest`: that is the callable above
        if sealed is None:
            return None
        if dev.type == "cuda" and not self._map_for_loads({}, {}, dev) and mode == "auto":
            return None
        k, step = sealed
        table = self._h.tensors()
        # (address in the slot, bytes, name, tensor, dtype, shape, store index)
        rows = []
        for name, (_, dtype, shape, t) in want.items():
            code = _TORCH_TO_PMCK.get(dtype)
            if code is None or (t is not None and not t.is_contiguous()):
                continue
            st = table.get(name)
            if st is None or not st.nbytes:
                continue
            if st.dtype != code or st.shape != shape or \
                    (t is not None and t.numel() * t.element_size() != st.nbytes):
                continue  # the load's own checks will say what is wrong
            rows.append((self._h.slot_address(k, st.offset), st.nbytes, name, t, dtype, shape,
                         st.index))
        if not rows:
            return None
        # New tensors (made) of _EARLY_OWN bytes or more take theirs in copies of their own;
        # the rest go through the scratch buffer, where the slot's neighbours (it holds the
        # tensors in store order) cross as one copy: for new tensors, only across a gap too
        # small to hold one of those copied on their own.
        own = [r for r in rows if made and r[1] >= _EARLY_OWN]
        rows = sorted((r for r in rows if not made or r[1] < _EARLY_OWN), key=lambda r: r[0])
        gap = min(_EARLY_GAP, _EARLY_OWN - 1) if made else _EARLY_GAP
        runs, at = [], {}  # runs: [first address, end address, offset in scratch, its rows]
        for row in rows:
            addr, n, name = row[:3]
            if runs and addr - runs[-1][1] <= gap:
                runs[-1][1] = max(runs[-1][1], addr + n)
            else:
                end = runs[-1][2] + runs[-1][1] - runs[-1][0] if runs else 0
                runs.append([addr, addr + n, -(-end // _EARLY_ALIGN) * _EARLY_ALIGN, []])
            runs[-1][3].append(row)
            at[name] = runs[-1][2] + addr - runs[-1][0]
        size = runs[-1][2] + runs[-1][1] - runs[-1][0] if runs else 0
        if mode == "auto" and not _early_pays(sum(r[1] for r in own + rows),
                                              len(rows) - len(runs), size):
            return None
        scratch, placed = None, {}
        try:
            # The large new tensors first: the load makes them anyway.  Then the scratch
            # buffer and the small ones, if they fit beside them.
            for _, n, name, _, dtype, shape, _ in own:
                placed[name] = (torch.empty(shape, dtype=dtype, device=dev), None, n)
            # In "auto" only CUDA tensors get here; host tensors only forced ("always",
            # tests), which count what the load makes but never drop the scratch buffer.
            if size and (dev.type == "cuda" or mode == "always"):
                made_small = sum(r[1] for r in rows if r[3] is None)
                # what the load then makes on dev while the scratch buffer lives: tensors
                # into= lacks, or (made) those not copied early; none if into= has every
                # tensor of the store (its metadata then need not be read for this)
                kept = set(targets) if not made else {r[2] for r in own + rows}
                every = not made and all(n in kept for n in table if n != META_NAME)
                later = 0 if every else sum(
                    n for name, _, d, _, n, _, _ in (newest() if newest else None) or ()
                    if name not in kept and _same_cuda_device(d, dev))
                free = sum(cuda_memory_free(dev)) if mode == "auto" else 0
                if mode == "auto" and size + made_small + later > free - free // 8:
                    # the training's memory first
                    rows, runs, size = [], [], 0  # the small new tensors: after verification
                    if sum(r[1] for r in own) < _EARLY_MIN:
                        return None
            if size:
                scratch = torch.empty(size, dtype=torch.uint8, device=dev)
            for _, n, name, t, dtype, shape, _ in rows:
                if t is None:
                    t = torch.empty(shape, dtype=dtype, device=dev)
                placed[name] = (t, at[name], n)
        except RuntimeError:  # torch.cuda.OutOfMemoryError among them
            return None
        # The copies in pieces of about _HASH_PIECE bytes (cut between tensors), each
        # hashed where it lands while the next one crosses (given), for recovery to compare.
        given = self._copies_checksums(k, step, dev)
        if given is not None:
            given.reserve(n for _, _, n in placed.values())
        pieces, bufs, nbytes = [], [], 0  # pieces: [(copies, [(index, address, bytes)])]
        copies = []
        base = scratch.data_ptr() if scratch is not None else 0
        for first, end, off, members in runs:
            at_ = first  # the run's bytes up to here are in a piece
            for addr, n, name, *_, idx in members:
                bufs.append((idx, base + at[name], n))
                nbytes += n
                if nbytes >= _HASH_PIECE or addr + n == end:
                    copies.append((scratch[off + at_ - first:off + addr + n - first],
                                   at_, addr + n - at_))
                    at_ = addr + n
                if nbytes >= _HASH_PIECE:
                    pieces.append((copies, bufs))
                    copies, bufs, nbytes = [], [], 0
        for addr, n, name, *_, idx in own:
            t = placed[name][0]
            copies.append((t.view(-1).view(torch.uint8), addr, n))
            bufs.append((idx, t.data_ptr(), n))
            nbytes += n
            if nbytes >= _HASH_PIECE:
                pieces.append((copies, bufs))
                copies, bufs, nbytes = [], [], 0
        if copies:
            pieces.append((copies, bufs))
        try:
            for copies, bufs in pieces:
                for dst, addr, n in copies:
                    dst.copy_(_u8_view(addr, n), non_blocking=True)
                if given is not None:
                    given.add(bufs)
        except BaseException:  # a copy refused, an interrupt: none left reading the region
            if given is not None:
                given.drop()
            if dev.type == "cuda":
                torch.cuda.current_stream(dev).synchronize()
            raise
        return _EarlyCopies(k, step, dev, scratch, placed, made, given)

    def _newest_sealed_slot(self):
        """(slot, step) of the local store's newest sealed slot, not verified, the store
        opened and its checkpoint in flight ended; None without a store or a sealed slot."""
        self._settle_inflight()
        if self._h is None:
            self._h = self._open_existing()
        if self._h is None:
            return None
        steps = [lib.pmck_store_slot_step(self._h.store, k) for k in (0, 1)]
        k = 0 if steps[0] >= steps[1] else 1
        return (k, steps[k]) if steps[k] >= 0 else None

    def _newest_doc(self):
        """(slot, names, infos) of the newest sealed slot's state_dict, read before
        it is verified: it may only say what to prepare for a load, which then
        checks what it uses against the verified metadata.  None without a local
        store or a sealed slot, for a group, for a slot whose metadata does not
        read, and for a DCP checkpoint (load() refuses it, with nothing copied)."""
        if _SLOT_DATA is None or self._coll is not None:
            return None
        newest = self._newest_sealed_slot()
        if newest is None:
            return None
        meta = self._h.tensors().get(META_NAME)
        if meta is None:
            return None
        try:
            doc, _ = _blob_at(self._h.slot_address(newest[0], meta.offset), meta.nbytes)
            if doc.get("kind") != "state_dict":
                return None
            return newest[0], tree_names(doc["tree"]), doc.get("tensors", {})
        except Exception:  # noqa: BLE001 -- a damaged slot: recovery will say so
            return None

    def _newest_tensors(self, map_location):
        """The tensors of the newest sealed slot's metadata (_newest_doc, read before
        it is verified) that the store holds with bytes, as [(name, info, the device
        the load puts it on, store index, bytes, pmck dtype, shape)], for a load into
        new tensors to prepare for; it checks what it uses against the verified
        metadata.  None where that metadata does not read or misleads."""
        newest = self._newest_doc()
        if newest is None:
            return None
        _, names, infos = newest
        table, rows = self._h.tensors(), []
        try:
            for name in names:
                info = infos.get(name, {})
                dev = torch.device(map_location if map_location is not None
                                   else info.get("dev", "cpu"))
                st = table.get(name)
                if st is not None and st.nbytes:
                    rows.append((name, info, dev, st.index, st.nbytes, st.dtype, st.shape))
        except Exception:  # noqa: BLE001 -- unverified metadata that misleads: prepare nothing
            return None
        return rows

    def _fresh_buffers(self, map_location, newest):
        """For a load into new tensors: a new uint8 host buffer for each tensor that
        the newest sealed slot puts on the host, for recovery to fill as it verifies
        (pmck_store_recover_into), so that the slot is read once, not hashed and then
        copied.  The slot's metadata, read before it is verified, only says which
        buffers to make: the load takes a buffer only for a tensor whose verified
        metadata puts it on the host, and copies the others as before.  {index:
        buffer}, or None where this does not apply (no library support, a device
        map_location, no slot metadata to read).  newest: a callable giving
        _newest_tensors(map_location), called only if needed."""
        if _RECOVER_INTO is None:
            return None
        if map_location is not None and torch.device(map_location).type != "cpu":
            return None
        rows = newest()
        # Not faulted in first (madvise): recovery's threads fault the pages in as they
        # copy, on up to 8 threads (500 MB in 192 tensors on the 2-core dev VM: 0.18 s for the
        # load, against 0.23 s faulting them in first on one thread).
        buffers = {idx: torch.empty(n, dtype=torch.uint8)
                   for _, _, dev, idx, n, _, _ in rows or () if dev.type == "cpu"}
        return buffers or None

    def _made_for_load(self, map_location, newest):
        """For a load into new tensors on a GPU: what new tensors to make, {name:
        (shape, dtype, device)}, for the newest sealed slot's plain tensors
        (dense, as the store holds them) bound for a CUDA device (map_location's,
        else where they were saved), for _start_early_copies(made=True) to fill
        while recovery verifies.  Empty where none is (in Store._early_load
        "always", the tests', any device counts), or where the slot's metadata
        does not read.  newest: a callable giving _newest_tensors(map_location),
        called only if needed.  That metadata is not verified: the load uses a
        tensor made from it only where the verified metadata names the same
        tensor."""
        mode = self._early_load
        if mode == "never":
            return {}
        if map_location is not None and torch.device(map_location).type != "cuda" and \
                mode != "always":
            return {}
        # plain tensors only: a view or another dtype ("stride", "dtype" in info) is
        # copied after verification
        return {name: (shape, _PMCK_TO_TORCH[code], dev)
                for name, info, dev, _, _, code, shape in newest() or ()
                if all(k == "dev" for k in info) and code in _PMCK_TO_TORCH and
                (dev.type == "cuda" or mode == "always")}

    def _recover(self, fresh=None, given=None):
        """Makes the newest verified checkpoint readable (local slots, then shared_dir).
        fresh: {index: buffer} (_fresh_buffers) that the local recovery fills with
        the checkpoint it verifies; returns whether it did.  given: the checksums of
        a load's early copies (_CopiesChecksums), which the local recovery takes for
        those tensors of their slot instead of hashing them in the region."""
        self._settle_inflight()
        if self._coll is not None:
            return self._recover_global()
        self._check_shared_dir()
        if self._h is None:
            self._h = self._open_existing()
        if self._h is None:
            if self.shared_dir:
                return self._recover_into_new_store()
            raise NoCheckpointError(f"no store '{self.name}' in {self.region_path}")
        if self._layout is None:
            self._layout = self._store_layout()
        rec = _lib.Recovery()
        dst = None
        if fresh:
            n = lib.pmck_store_ntensors(self._h.store)
            dst = (ctypes.c_void_p * n)()
            for idx, b in fresh.items():
                dst[idx] = b.data_ptr()
        if given is not None:
            rc = _RECOVER_GIVEN(self._h.store, dst, byref(given.struct), byref(rec))
            if given.interrupted is not None:
                raise given.interrupted
        elif fresh:
            rc = _RECOVER_INTO(self._h.store, dst, byref(rec))
        else:
            rc = lib.pmck_store_recover(self._h.store, byref(rec))
        if rc == 0:
            self.last_recovery = {"step": rec.step, "tier": "local", "slot": rec.slot,
                                  "rejected_step": rec.rejected_step if rec.rejected else None,
                                  "rejected_tensor": rec.rejected_tensor.decode() if rec.rejected
                                  else None}
            self._report_rejections(rec.step)
            self._newest = max(self._newest or 0, rec.step)
            return bool(fresh)
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

    def _recover_tiers(self):
        tr = _lib.TierRecovery()
        rc = lib.pmck_recover_tiers(self._h.store, self.shared_dir.encode(), self.rank, byref(tr))
        if rc < 0:
            raise self._recovery_error(rc, _lib.errormsg() or _lib.strerror(rc))
        self.last_recovery = {"step": tr.step, "tier": "shared" if tr.tier else "local",
                              "path": tr.path.decode(), "reason": tr.reason.decode()}
        self._report_rejections(tr.step)
        self._newest = max(self._newest or 0, tr.step)

    def _recover_step(self, step):
        """Makes `step` readable from a local slot (load(step=))."""
        self._settle_inflight()
        if self._h is None:
            self._h = self._open_existing()
        if self._h is None:
            raise NoCheckpointError(f"no store '{self.name}' in {self.region_path}")
        if self._layout is None:
            self._layout = self._store_layout()
        rec = _lib.Recovery()
        rc = lib.pmck_store_recover_step(self._h.store, step, byref(rec))
        if rc == PMCK_E_NO_CHECKPOINT:
            held = [lib.pmck_store_slot_step(self._h.store, k) for k in (0, 1)]
            held = sorted(x for x in held if x >= 0)
            raise NoCheckpointError(f"store '{self.name}' holds no step {step} (its slots hold "
                                    f"{', '.join(map(str, held)) or 'nothing'})", rc)
        if rc < 0:
            raise self._recovery_error(rc, f"step {step}: {_lib.errormsg() or _lib.strerror(rc)}")
        self.last_recovery = {"step": step, "tier": "local", "slot": rec.slot}
        self._report_rejections(step)

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
        meta = self._h.tensors().get(META_NAME)
        if meta is None:
            raise LayoutError(f"store '{self.name}' holds no {META_NAME} tensor")
        return _blob_at(lib.pmck_store_tensor_data(self._h.store, meta.index),
                        self._layout.capacity())

    def _stored(self, name, info):
        """(index, StoredTensor, shape, dtype) of tensor `name` in the recovered checkpoint."""
        st = self._h.tensors().get(name)
        if st is None:
            raise CorruptError(f"checkpoint metadata names tensor '{name}', which the store lacks")
        return (st.index, st, *_shape_dtype(st, info))

    def _tensor_view(self, name, info, stored=None):
        """A tensor viewing the recovered checkpoint's bytes of `name` in the
        region (no copy; valid until the next save), with its dtype, shape and
        strides.  stored: what _stored(name, info) returned, if the caller has it."""
        idx, ti, shape, dtype = stored or self._stored(name, info)
        stride = info.get("stride")
        if ti.nbytes == 0:
            return idx, ti, torch.empty_strided(shape, stride, dtype=dtype) if stride \
                else torch.empty(shape, dtype=dtype)
        u8 = _u8_view(lib.pmck_store_tensor_data(self._h.store, idx), ti.nbytes)
        flat = u8.view(dtype)
        view = flat.as_strided(shape, stride) if stride else flat.reshape(shape)
        return idx, ti, view

    def _load_tensor(self, name, info, dst, map_location, copier, fresh=None):
        """Tensor `name` of the recovered checkpoint: into dst, else new.  fresh: the
        buffers recovery filled (_fresh_buffers): a new host tensor views its own,
        which is removed from fresh."""
        stored = idx, ti, shape, dtype = self._stored(name, info)
        if dst is None and fresh:
            buf = fresh.get(idx)
            dev = map_location if map_location is not None else info.get("dev", "cpu")
            if buf is not None and buf.numel() == ti.nbytes and torch.device(dev).type == "cpu":
                del fresh[idx]  # taken: what is left in fresh went unused
                flat = buf.view(dtype)
                stride = info.get("stride")
                return flat.as_strided(shape, stride) if stride else flat.view(shape)
        if dst is not None and dst.device.type == "cpu" and "stride" not in info and \
                dst.is_contiguous() and dst.dtype == dtype and dst.shape == shape and \
                dst.numel() * dst.element_size() == ti.nbytes:
            # The common case without a view of the region: a contiguous host tensor of
            # into= of the dtype and shape the checkpoint holds, copied by address.
            copier.add(dst.data_ptr(), lib.pmck_store_tensor_data(self._h.store, idx), ti.nbytes)
            return dst
        _, _, src = self._tensor_view(name, info, stored)
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


def _blob_at(ptr, capacity):
    """(JSON document, binary part) of the metadata blob at ptr (parse_blob), read no
    further than its header says nor than capacity bytes."""
    _, jlen, blen = BLOB_HEAD.unpack(ctypes.string_at(ptr, BLOB_HEAD.size))
    return parse_blob(ctypes.string_at(ptr, min(BLOB_HEAD.size + jlen + blen, capacity)))


def _shape_dtype(st, info):
    """(shape, torch dtype) of a stored tensor (StoredTensor) as its metadata `info` says."""
    shape = tuple(info["shape"]) if "shape" in info else st.shape
    return shape, torch_dtype(info["dtype"]) if "dtype" in info else _PMCK_TO_TORCH[st.dtype]
