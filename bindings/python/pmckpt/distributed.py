# SPDX-License-Identifier: BSD-3-Clause
"""pmckpt's collectives over torch.distributed (struct pmck_collectives).

A Store given a process group (Store(..., group=...)) makes its checkpoints
global: step s exists only once every rank of the group committed it, and
load() brings every rank back to the same step (docs/multirank.md).  The
library calls the functions below: allreduce-min/max of one 64-bit value,
a barrier, and a non-blocking allreduce that a global pipeline starts on its
writer thread at each local commit and completes at the next begin.

The group must be the store's alone: the writer thread issues collectives
while training issues its own, so sharing a group with training would
interleave them in different orders on different ranks.  new_group() makes
one over all ranks (gloo: CPU tensors, progress on gloo's own threads).  An
NCCL group works too (the values travel in a CUDA tensor of the current
device).  Set a timeout on the group: a rank that dies leaves the others
waiting in the agreement until it expires.
"""
import datetime
import errno
import threading

import torch
import torch.distributed as dist

from . import _lib

_BIAS = 1 << 63  # u64 <-> i64, order-preserving: torch reduces signed int64


def new_group(timeout=datetime.timedelta(minutes=5)):
    """A gloo group over all ranks of the default group, for one Store.
    Collective: every rank calls it at the same point."""
    return dist.new_group(backend="gloo", timeout=timeout)


class TorchCollectives:
    """struct pmck_collectives over a torch.distributed process group.

    Keeps the ctypes callbacks alive (the library holds pointers to them);
    `struct` is what pmck_global_new takes.  A failing collective returns
    -EIO to the library and leaves its exception text in `error`."""

    def __init__(self, group):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: call "
                               "init_process_group before creating a Store with a group")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if dist.get_backend(group) == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.error = None
        self._lock = threading.Lock()
        self._requests = {}
        self._next_request = 1
        self._callbacks = (_lib.ALLREDUCE_FN(self._allreduce), _lib.BARRIER_FN(self._barrier),
                           _lib.IALLREDUCE_START_FN(self._istart),
                           _lib.IALLREDUCE_TEST_FN(self._itest))
        self.struct = _lib.Collectives(None, self.rank, self.size, *self._callbacks)

    # ------------------------------------------------------------ helpers

    def _tensor(self, value):
        return torch.tensor([value - _BIAS], dtype=torch.int64, device=self.device)

    @staticmethod
    def _op(op):
        return dist.ReduceOp.MIN if op == _lib.REDUCE_MIN else dist.ReduceOp.MAX

    def _failed(self, what, exc):
        self.error = f"torch.distributed {what} failed: {type(exc).__name__}: {exc}"
        return -errno.EIO

    def allreduce(self, value, op=_lib.REDUCE_MIN):
        """allreduce-min (or max) of one unsigned 64-bit value, from Python."""
        t = self._tensor(value)
        dist.all_reduce(t, op=self._op(op), group=self.group)
        return int(t.item()) + _BIAS

    # ------------------------------------------------- called by the library

    def _allreduce(self, _ctx, value, op):
        try:
            value[0] = self.allreduce(value[0], op)
            return 0
        except Exception as e:  # noqa: BLE001 -- nothing may cross the C boundary
            return self._failed("all_reduce", e)

    def _barrier(self, _ctx):
        try:
            self.allreduce(0)  # a barrier that works on every backend and device
            return 0
        except Exception as e:  # noqa: BLE001
            return self._failed("barrier", e)

    def _istart(self, _ctx, value, op, req):
        try:
            t = self._tensor(value)
            work = dist.all_reduce(t, op=self._op(op), group=self.group, async_op=True)
        except Exception as e:  # noqa: BLE001
            return self._failed("all_reduce(async_op=True)", e)
        with self._lock:
            rid = self._next_request
            self._next_request += 1
            self._requests[rid] = (work, t)
        req[0] = rid
        return 0

    def _itest(self, _ctx, req, wait, done, result):
        with self._lock:
            work, t = self._requests[req]
        try:
            if wait:
                work.wait()
            if not work.is_completed():
                done[0] = 0
                return 0
            work.wait()  # raises what a completed work failed with
            value = int(t.item()) + _BIAS
        except Exception as e:  # noqa: BLE001
            with self._lock:
                self._requests.pop(req, None)
            return self._failed("completing all_reduce", e)
        with self._lock:
            self._requests.pop(req, None)
        done[0] = 1
        result[0] = value
        return 0


def message(coll, rc_message):
    """The library's message, with the collective's own failure if there was one."""
    if coll is not None and coll.error:
        return f"{rc_message} ({coll.error})"
    return rc_message


__all__ = ["new_group", "TorchCollectives"]
