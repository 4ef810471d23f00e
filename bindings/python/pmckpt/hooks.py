# SPDX-License-Identifier: BSD-3-Clause
"""Training-loop hooks: wait for a checkpoint's layers only where they are modified.

An asynchronous checkpoint (Store.save_async) reads the parameters, buffers
and optimizer state from their own memory while training goes on.  Forward
and backward only read parameters; what writes them in place is the
optimizer's step (parameters and its state: exp_avg, exp_avg_sq, step, ...)
and, for modules with buffers (BatchNorm's running statistics), the forward
pass.  These hooks block exactly there, and only for the layers involved:
an optimizer waits for the parameters and state it is about to update.

A save registered as pending (DCP's async_save through
pmckpt.dcp.StorageWriter(staging="none"), which begins later in DCP's
thread) is waited for first until it has begun, then for its layers
(Store.wait_for).
"""
import torch


def _optimizer_tensors(opt):
    """The optimizer's parameters and the tensors of its state (a list: made at
    every step, the state's own order, without a lookup by parameter, whose hash
    is a Python call)."""
    tensors = [p for group in opt.param_groups for p in group["params"]]
    # (a state that is not a dict: an optimizer's own counter under a key of its own,
    # which torch's state_dict() allows)
    tensors += [v for s in opt.state.values() if isinstance(s, dict) for v in s.values()
                if isinstance(v, torch.Tensor)]
    return tensors


def hook_optimizer(optimizer, store):
    """Before each optimizer.step(), waits until the checkpoint in flight has
    persisted the layers holding this optimizer's parameters and state.
    Returns the hook's handle (.remove() to undo)."""
    def pre_step(opt, args, kwargs):
        if store._pending or store.inflight is not None:
            store.wait_for(_optimizer_tensors(opt))
    return optimizer.register_step_pre_hook(pre_step)


class _Handles(list):
    def remove(self):
        for h in self:
            h.remove()
        self.clear()


def hook_module(module, store):
    """Before the forward of each submodule that has buffers (updated in place
    by forward, like BatchNorm's running statistics), waits until the
    checkpoint in flight has persisted them.  Returns a handle (.remove())."""
    handles = _Handles()
    for m in module.modules():
        bufs = list(m.buffers(recurse=False))
        if not bufs:
            continue

        def pre_forward(mod, args, bufs=bufs):
            if store._pending or store.inflight is not None:
                store.wait_for(bufs)
        handles.append(m.register_forward_pre_hook(pre_forward))
    return handles
