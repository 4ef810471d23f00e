# SPDX-License-Identifier: BSD-3-Clause
"""Multi-rank stores (Store(group=...)): joining a torch.distributed group,
tying the store to it (pmck_global_new: one step agreed by every rank), the
collective recovery that brings every rank back to one step
(pmck_global_recover), and errors that carry the collective's own failure.
Internals of pmckpt.Store (store.py), mixed into it; docs/multirank.md."""
from ctypes import byref

from . import _lib
from ._lib import lib
from ._state import Layout
from .errors import Error, NoCheckpointError, PMCK_E_NONE_USABLE, PMCK_E_NO_CHECKPOINT, \
    PMCK_E_WORLD_SIZE, WorldSizeError, error_for


class _MultiRank:
    """The group side of a Store."""

    def _join_group(self, group, rank, world_size, name):
        """Store(group=...): takes rank and world size from the group (True: a new gloo
        group over all ranks) and names this rank's own store NAME-rankR."""
        from .distributed import TorchCollectives, new_group, partner_group, nccl_device
        p2p_device = nccl_device() if self.partner and self.partner_transport == "nccl" else None
        group = new_group() if group is True else group
        p2p_group = partner_group(group, backend=self.partner_transport) if self.partner else None
        self._coll = TorchCollectives(group, p2p_group, p2p_device)
        if (rank, world_size) not in ((0, 1), (self._coll.rank, self._coll.size)):
            raise ValueError(f"rank={rank}, world_size={world_size} contradict the group "
                             f"(rank {self._coll.rank} of {self._coll.size})")
        self.rank, self.world_size = self._coll.rank, self._coll.size
        self.name = f"{name}-rank{self.rank}"  # ranks sharing a node need their own stores

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
        if self.partner:
            try:
                self._attach_partner()
            except BaseException:
                lib.pmck_global_delete(byref(self._global))  # no group without its partner tier
                raise

    def _attach_partner(self):
        """pmck_partner_new (collective): places the copies, opens the stores that hold
        this rank's share of other ranks' copies, starts the partner thread."""
        from .distributed import launcher_node
        if _lib.optional("pmck_partner_new") is None:
            raise Error(f"{_lib.path} is older than this binding: it has no partner copies "
                        "(pmck_partner_new)")
        node = launcher_node() if self.node is None else int(self.node)
        where = self.partner_dir or self.ramdisk_dir or _lib.default_ramdisk_dir()
        flags = _lib.PMCK_LOCAL_SHARED_DIR if self.sharing == "group" else 0
        opts = _lib.PartnerOpts(node, where.encode(), None, self.name.encode(),
                                self.partner_every, self.partner_keep, flags)
        self._check_global(lib.pmck_partner_new(self._global, byref(self._coll.struct),
                                                byref(opts), byref(self._partner)),
                           f"partner copies of store '{self.name}' (node {node}, in {where})")

    def _delete_partner(self):
        """Waits for the queued rounds and stops the partner thread; the first round
        that failed since the last report as an Error, or None."""
        rc = lib.pmck_partner_wait(self._partner)
        err = error_for(rc, f"partner copies: {_lib.errormsg()}") if rc < 0 else None
        lib.pmck_partner_delete(byref(self._partner))
        return err

    def _layout_from_group(self):
        """Collective: with partner copies, a rank that has no store (node replaced)
        and no shared file takes the layout of the lowest rank that has one (the
        ranks of a group share one layout: pmck_global_new checks it), so that its
        partner can send it the step."""
        rows, why = None, None
        if self._h is not None:
            try:
                rows = (self._layout or self._store_layout()).rows
            except Error as e:  # raised after the collectives: no rank is left waiting
                why = e
        root = self._coll.allreduce(self.rank if rows is not None else self.world_size)
        if root < self.world_size:
            rows = self._coll.broadcast_object(rows, root)
            if self._h is None:
                self._open_write(Layout(rows))
        if why is not None:
            raise why

    def _recover_global(self):
        """Every rank of the group loads the newest step that all of them can
        produce (pmck_global_recover).  A rank without a local store (node
        replaced, ramdisk lost) creates it from its newest shared file first."""
        if self._h is None:
            self._h = self._open_existing()
        foreign = 0
        self._check_shared_dir()  # collective
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
        if self.partner:
            self._layout_from_group()
        if not self._coll.allreduce(1 if self._h is not None else 0):
            raise NoCheckpointError(
                f"some rank of the {self.world_size} has neither a store nor a shared file "
                f"(this rank, {self.rank}: {'has' if self._h else 'lacks'} '{self.name}' in "
                f"{self.region_path})")
        if self._layout is None:
            self._layout = self._store_layout()
        self._ensure_global()
        self._delete_pipeline()  # recovery may unseal or import slots: no pipeline meanwhile
        rec = _lib.GlobalRecovery()
        shared = self.shared_dir.encode() if self.shared_dir else None
        rc = lib.pmck_global_recover(self._global, shared, byref(rec))
        if rc in (PMCK_E_NONE_USABLE, PMCK_E_NO_CHECKPOINT):
            from .distributed import message
            raise self._recovery_error(rc, f"recovery of {self.world_size} ranks: "
                                       f"{message(self._coll, _lib.errormsg() or _lib.strerror(rc))}")
        self._check_global(rc, f"recovery of {self.world_size} ranks")
        self.last_recovery = {"step": rec.step, "tier": ("local", "shared", "partner")[rec.tier],
                              "reason": rec.reason.decode()}
        self._report_rejections(rec.step)
        self._newest = rec.step
