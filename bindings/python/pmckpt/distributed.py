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

Partner copies (Store(..., partner=True)) add send/recv of host memory
(the committed checkpoint, in pieces of 4 MiB) and an allgather: the
partner thread sends while the writer thread and training run collectives,
so send/recv travel over a group of their own (partner_group()): gloo,
which sends the host memory in place, or NCCL (partner_transport="nccl"),
which needs device memory: each piece is then staged through a buffer on
the rank's CUDA device, copied on a stream of the partner thread's own.
"""
import contextlib
import ctypes
import datetime
import errno
import hashlib
import os
import socket
import threading

import torch
import torch.distributed as dist

from . import _lib

_BIAS = 1 << 63  # u64 <-> i64, order-preserving: torch reduces signed int64


def new_group(timeout=datetime.timedelta(minutes=5)):
    """A gloo group over all ranks of the default group, for one Store.
    Collective: every rank calls it at the same point."""
    return dist.new_group(backend="gloo", timeout=timeout)


def partner_group(group, backend="gloo", timeout=datetime.timedelta(minutes=5)):
    """A group with the members of `group` (gloo, or nccl), for the send/recv of
    partner copies.  Collective over the default group, as dist.new_group is."""
    return dist.new_group(ranks=dist.get_process_group_ranks(group), backend=backend,
                          timeout=timeout)


def nccl_device():
    """The CUDA device NCCL partner copies stage through: this process's current
    one.  Raises ValueError, saying why, where NCCL cannot carry them."""
    if not dist.is_nccl_available():
        raise ValueError("partner_transport='nccl': this torch has no NCCL backend")
    if not torch.cuda.is_available():
        raise ValueError("partner_transport='nccl': torch sees no CUDA device (NCCL moves "
                         "device memory); use partner_transport='gloo'")
    return torch.device("cuda", torch.cuda.current_device())


def launcher_node():
    """This process's node for the placement of partner copies, from the
    launcher: torchrun's GROUP_RANK (the node's rank), else the global rank
    divided by LOCAL_WORLD_SIZE (launchers give a node's ranks consecutive
    numbers), else a hash of the host name."""
    if os.environ.get("GROUP_RANK", "").isdigit():
        return int(os.environ["GROUP_RANK"])
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and int(local) > 0:
        return dist.get_rank() // int(local)
    digest = hashlib.sha256(socket.gethostname().encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # below 2^63: not a small node rank


def _bytes_at(address, n):
    """A uint8 tensor over n bytes at a C address (no copy)."""
    return torch.frombuffer((ctypes.c_char * n).from_address(address), dtype=torch.uint8)


class TorchCollectives:
    """struct pmck_collectives over a torch.distributed process group.

    Keeps the ctypes callbacks alive (the library holds pointers to them);
    `struct` is what pmck_global_new (and pmck_partner_new) take.  With
    p2p_group (a group of the same ranks, gloo or NCCL, used for nothing else),
    sendrecv is filled in for partner copies; without it, it stays NULL.
    p2p_device: None, send/recv of the host memory in place (gloo); else
    the device every piece is staged through (NCCL: the rank's CUDA device),
    in two buffers grown to the largest piece, copied on a stream of their
    own.  A failing collective returns -EIO to the library and leaves its
    exception text in `error`."""

    def __init__(self, group, p2p_group=None, p2p_device=None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: call "
                               "init_process_group before creating a Store with a group")
        self.group = group
        self.p2p_group = p2p_group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if dist.get_backend(group) == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.error = None
        self.p2p_device = p2p_device
        self._stage = [None, None]  # staging buffers on p2p_device: send, receive
        self._stage_stream = None
        self._lock = threading.Lock()
        self._requests = {}
        self._next_request = 1
        # group rank -> global rank, for send/recv (dst and src are global ranks in torch)
        self._global_rank = [dist.get_global_rank(group, r) for r in range(self.size)] \
            if group is not None and group is not dist.GroupMember.WORLD else list(range(self.size))
        self._callbacks = (_lib.ALLREDUCE_FN(self._allreduce), _lib.BARRIER_FN(self._barrier),
                           _lib.IALLREDUCE_START_FN(self._istart),
                           _lib.IALLREDUCE_TEST_FN(self._itest),
                           _lib.ALLGATHER_FN(self._allgather),
                           _lib.SENDRECV_FN(self._sendrecv) if p2p_group is not None
                           else _lib.SENDRECV_FN())
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

    def allgather_object(self, obj):
        """Every group rank's obj, in group rank order (pickled: for small things)."""
        out = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_object(self, obj, root):
        """Group rank `root`'s obj, on every rank (pickled: for small things)."""
        box = [obj]
        dist.broadcast_object_list(box, src=self._global_rank[root], group=self.group)
        return box[0]

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

    def _allgather(self, _ctx, value, out):
        try:
            t = self._tensor(value)
            parts = [torch.empty_like(t) for _ in range(self.size)]
            dist.all_gather(parts, t, group=self.group)
            for r, p in enumerate(parts):
                out[r] = int(p.item()) + _BIAS
            return 0
        except Exception as e:  # noqa: BLE001
            return self._failed("all_gather", e)

    def _sendrecv(self, _ctx, dst, sbuf, slen, src, rbuf, rlen):
        # Both halves in flight at once (the peers send to each other in rounds).
        try:
            if self.p2p_device is not None:
                self._sendrecv_staged(dst, sbuf, slen, src, rbuf, rlen)
                return 0
            works = []
            if slen:
                works.append(dist.isend(_bytes_at(sbuf, slen), self._global_rank[dst],
                                        group=self.p2p_group))
            if rlen:
                works.append(dist.irecv(_bytes_at(rbuf, rlen), self._global_rank[src],
                                        group=self.p2p_group))
            for w in works:
                w.wait()
            return 0
        except Exception as e:  # noqa: BLE001
            return self._failed(f"send/recv (to rank {dst}, from rank {src})", e)

    def _staging(self, k, n):
        """Staging buffer k (0 send, 1 receive) of at least n bytes on p2p_device."""
        buf = self._stage[k]
        if buf is None or buf.numel() < n:
            buf = self._stage[k] = torch.empty(max(n, 1), dtype=torch.uint8,
                                               device=self.p2p_device)
        return buf[:n]

    def _sendrecv_staged(self, dst, sbuf, slen, src, rbuf, rlen):
        """send/recv through buffers on p2p_device: on the partner thread, or on the
        thread recovering (the library never runs two at once).  On a CUDA device
        the copies run on a stream of their own, never on the default stream that
        training computes on, with the device set for the call only (the
        recovering thread's current device is the caller's); NCCL orders its send
        after the copy in and the copy out after its receive (ProcessGroupNCCL
        waits on the current stream, and Work.wait makes the current stream wait
        on it), and the receive's bytes are in rbuf before this returns."""
        dev = self.p2p_device
        cuda = dev.type == "cuda"
        with contextlib.ExitStack() as ctx:
            if cuda:
                ctx.enter_context(torch.cuda.device(dev))
                if self._stage_stream is None:
                    self._stage_stream = torch.cuda.Stream(dev)
                ctx.enter_context(torch.cuda.stream(self._stage_stream))
            out = self._staging(0, slen)
            inb = self._staging(1, rlen)
            if slen:
                out.copy_(_bytes_at(sbuf, slen))
            # One batch: NCCL pairs a ring of sends and receives without deadlock.
            ops = []
            if slen:
                ops.append(dist.P2POp(dist.isend, out, self._global_rank[dst], self.p2p_group))
            if rlen:
                ops.append(dist.P2POp(dist.irecv, inb, self._global_rank[src], self.p2p_group))
            for w in dist.batch_isend_irecv(ops) if ops else ():
                w.wait()
            if rlen:
                _bytes_at(rbuf, rlen).copy_(inb)
            if cuda:
                self._stage_stream.synchronize()


def message(coll, rc_message):
    """The library's message, with the collective's own failure if there was one."""
    if coll is not None and coll.error:
        return f"{rc_message} ({coll.error})"
    return rc_message


__all__ = ["new_group", "partner_group", "nccl_device", "launcher_node", "TorchCollectives"]
