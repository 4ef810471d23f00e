# SPDX-License-Identifier: BSD-3-Clause
"""Where a Store lives and how it is opened: the PM device or file (or a
namespace name), the ramdisk fallback, the region -> pool -> store opening
(pmck_local_open: creating, or PMCK_LOCAL_EXISTING for what exists), the
store's layout, and the copy-out tier attached to it.  Internals of
pmckpt.Store (store.py), mixed into it."""
import collections
import ctypes
import os
from ctypes import byref, c_int, c_void_p

from . import _lib
from ._lib import lib, check
from ._state import META_NAME, Layout
from .errors import CopyoutError, Error, LayoutError, PMA_E_NOT_POOL, PMA_E_UNSAFE, \
    UnsafePathError, error_for
from ._pipeline import _tasks


# A tensor of an open store (pmck_tensor_info): index, pmck dtype, shape, offset in a
# slot, bytes, layer.
StoredTensor = collections.namedtuple("StoredTensor",
                                      "index dtype shape offset nbytes layer")


class _Handles:
    """A region, its pool and the store, opened together by pmck_local_open."""

    def __init__(self, local, description, prefaulted):
        self.local = local
        self.description = description
        self.prefaulted = prefaulted
        self._tensors = self._slot_base = None

    def tensors(self):
        """{name: StoredTensor} of the open store's tensors, in index order, read from
        the library once: its layout is fixed while it is open (its layout, and a
        load's lookups, then cost no call per tensor)."""
        if self._tensors is None:
            s, ti, table = self.store, _lib.TensorInfo(), {}
            for i in range(lib.pmck_store_ntensors(s)):
                check(lib.pmck_store_tensor(s, i, byref(ti)))
                table[ti.name.decode()] = StoredTensor(i, ti.dtype, tuple(ti.shape[:ti.ndim]),
                                                       ti.offset, ti.nbytes, ti.layer)
            self._tensors = table
        return self._tensors

    def slot_address(self, slot, offset):
        """The address of `offset` in slot `slot` (0 or 1) of the open store's region,
        as pmck_store_slot_tensor_data gives a tensor's (fixed while it is open)."""
        if self._slot_base is None:
            first = next(iter(self.tensors().values()))
            data = _lib.optional("pmck_store_slot_tensor_data")
            self._slot_base = [data(self.store, k, first.index) - first.offset for k in (0, 1)]
        return self._slot_base[slot] + offset

    @property
    def region(self):
        return c_void_p(self.local.region)

    @property
    def pool(self):
        return c_void_p(self.local.pool)

    @property
    def store(self):
        return c_void_p(self.local.store)

    def close(self):
        if self.local is not None:
            lib.pmck_local_close(byref(self.local))
            self.local = None
        self._tensors = self._slot_base = None  # addresses of a region no longer mapped

    def destroy_store(self, name):
        """Closes everything after deleting store `name` from the pool; returns how
        many allocations the pool still holds (0: nothing else is in it)."""
        store = self.store
        lib.pmck_store_close(byref(store))
        self.local.store = None
        pool = self.pool
        rc = lib.pmck_store_destroy(pool, name.encode())
        msg = _lib.errormsg()
        left = [0]
        count = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)(
            lambda info, arg: left.__setitem__(0, left[0] + 1) or 0)
        if rc == 0:
            lib.pma_pool_foreach(pool, count, None)
        self.close()
        if rc < 0:
            raise error_for(rc, msg)
        return left[0]


class _Backend:
    """Opening the local store (and its copy-out) for a Store."""

    def _pm_path(self):
        """The PM device or file of Store(path): a namespace name is resolved (once)."""
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

    def _local_opts(self, layout=None, flags=0):
        pm = self._pm_path()
        descs = layout.descs() if layout is not None else None
        if self._ramdisk_given and self.sharing == "group":
            flags |= _lib.PMCK_LOCAL_SHARED_DIR
        return _lib.LocalOpts(pm.encode() if pm else None,
                              self._ramdisk_given.encode() if self._ramdisk_given else None,
                              self.name.encode(), descs, len(layout.rows) if layout else 0,
                              self.size, flags)

    def _open_existing(self):
        """Opens region, pool and store if they exist, creating nothing; None if there
        is no store yet (no file, a region holding no pool: a blank device, or a
        ramdisk file whose creation was interrupted, which the creating open formats
        under its lock).  The region is not prefaulted (loading needs no prefault)."""
        opts = self._local_opts(flags=_lib.PMCK_LOCAL_EXISTING)
        local = _lib.Local()
        rc = lib.pmck_local_open(byref(opts), byref(local))
        if rc in (_lib.ENOENT, PMA_E_NOT_POOL):
            return None
        if rc == _lib.EINVAL and not opts.descs and "opts with a layout" in _lib.errormsg():
            raise Error(f"{_lib.path} is older than this binding: its pmck_local_open cannot "
                        "open a store without creating one (PMCK_LOCAL_EXISTING)")
        if rc < 0:
            raise error_for(rc, _lib.errormsg() or _lib.strerror(rc))
        return _Handles(local, f"existing store '{self.name}': {local.description.decode()}",
                        prefaulted=False)

    def _store_layout(self):
        """The layout of the open store; LayoutError if the binding did not write it."""
        rows = [(name, t.dtype, t.shape, t.layer) for name, t in self._h.tensors().items()]
        if not rows or rows[-1][0] != META_NAME or rows[-1][1] != _lib.DT_BYTES:
            raise LayoutError(
                f"store '{self.name}' in {self.region_path} was not written by the pmckpt Python "
                f"binding (no {META_NAME} tensor): open it with the C API, or use another name")
        return Layout(rows)

    def _open_write(self, layout):
        """Opens or creates the store for `layout`; LayoutError if it holds another one.
        Attaches the copy-out to shared_dir once the store is open."""
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
            if not self._h.prefaulted:
                lib.pma_region_prefault(self._h.region)  # no page faults in the first checkpoint
                self._h.prefaulted = True
        else:
            opts = self._local_opts(layout)
            local = _lib.Local()
            check(lib.pmck_local_open(byref(opts), byref(local)), f"store '{self.name}'")
            self._h = _Handles(local, local.description.decode(), prefaulted=True)
            self._layout = layout
        if self.shared_dir and not self._copyout:
            opts = _lib.CopyoutOpts(self.shared_dir.encode(), self.keep, self.rank,
                                    self.world_size, 0, None, None, None, None,
                                    _lib.PMCK_COPYOUT_SHARED_DIR | _lib.PMCK_COPYOUT_GROUP
                                    if self.sharing == "group" else 0)
            before = _tasks()
            check(lib.pmck_copyout_new(self._h.store, byref(opts), byref(self._copyout)),
                  f"copy-out to {self.shared_dir}")
            self._apply_policy(before, 1)

    def _check_shared_dir(self):
        """Before anything reads shared_dir: raises UnsafePathError (or the error of
        looking at it) if another user could write it, since it could then hold
        checkpoints anyone put there.  A missing one is fine (nothing to read), and
        sharing="group" accepts it as it is; the copier checks it again when it
        starts.  With a group this is collective: every rank raises if any rank
        must, so none is left waiting."""
        unsafe = None
        if self.shared_dir and self.sharing != "group":
            rc = lib.pmck_dir_check(self.shared_dir.encode(), 0)
            if rc not in (0, _lib.ENOENT):
                unsafe = error_for(rc, f"shared_dir: {_lib.errormsg() or _lib.strerror(rc)}")
        if self._coll is not None and self._coll.allreduce(1 if unsafe else 0, _lib.REDUCE_MAX):
            raise unsafe or UnsafePathError(
                f"another rank refused shared_dir {self.shared_dir} (see its message): nothing "
                "read", PMA_E_UNSAFE)
        if unsafe is not None:
            raise unsafe

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
