# SPDX-License-Identifier: BSD-3-Clause
"""pmckpt.GradientLog: a checkpoint every step, most of them as the step's gradients.

A checkpoint of a training state is mostly the parameters and the optimizer's
state (Adam: two moments), which the next optimizer step rewrites in full.
When a step's state is known, the next one follows from it and that step's
gradients alone: the optimizer's step is a function of its state, its
parameter groups (the learning rate the scheduler set), the parameters and
their gradients.  So GradientLog saves chains of K + 1 steps
(records_per_state=K, 1 by default):

  step t:       the whole state, into a Store (two slots, as Store.save_async);
  step t+i:     for i = 1..K, a *record*: the gradients optimizer.step() used
                at step t+i, and everything of the state that the step does not
                produce (buffers, the scheduler, RNG states, counters, any
                tensor that is not a parameter or the optimizer's state), into
                the i-th records' Store;
  step t+K+1:   the whole state again, and so on.

A record is a third of the bytes of the whole state for Adam (a parameter's
gradient against the parameter and its two moments), so a checkpoint every
step moves (1 + K/3) / (1 + K) of the bytes of whole states every step: two
thirds with K = 1, half with K = 3.  load() loads the newest whole state and
replays, with the caller's optimizer, the records of the steps after it that
belong to it, in order, up to the first missing one: the result is the state
of the newest of them.  A record names the whole state it follows by a random
id kept in both, so a record never applies to another state of the same step
number (a rerun after a restart, whose steps differ on a GPU).

The replay is exact when the optimizer's step is deterministic and a function
of those inputs alone (its state, the parameter groups it ran with, the
parameters, the gradients), as torch.optim's are, with the same
implementation (foreach or fused: param_groups carry the flags) on the same
kind of device; the replay runs the step function without the step hooks.
What the hooks can see breaks that condition makes the step a whole state,
with a warning once per reason: a closure (LBFGS), GradScaler's fused
unscaling, sparse gradients, more than one step since the last checkpoint,
gradients replaced or changed in place during or after the step, parameters
or optimizer state changed in place outside the steps (their version
counters), a parameter group added, other step hooks (unless
trust_step_hooks), a state_dict without the optimizer's state_dict() or one
of its parameters.  Changes made through .data are not seen
(docs/python.md, "Every step for fewer bytes").
"""
import collections
import copy
import functools
import itertools
import operator
import os
import secrets
import sys
import warnings

import torch

from .errors import CorruptError, Error, LayoutError, NoCheckpointError
from .hooks import hook_optimizer, hook_module
from .store import Store, RecoveryWarning

__all__ = ["GradientLog", "GradientLogHandle"]

_VERSION = 1
_PLAIN = (dict, list, tuple)
# Read over every parameter or tensor at every step, in C (map): the hooks' and the
# save's checks take ~1170 tensors each for GPT-2 medium with AdamW
_grad = operator.attrgetter("grad")
_version = operator.attrgetter("_version")
_layout = operator.attrgetter("layout")
_not_none = functools.partial(operator.is_not, None)


def _versions_of(tensors):
    """Each tensor's version counter, 0 for None."""
    if all(map(_not_none, tensors)):
        return list(map(_version, tensors))
    return [t._version if t is not None else 0 for t in tensors]


def _dict_copy(node, items):
    """A mapping like node (another dict subclass than OrderedDict as a dict, as
    Store loads it) of items, with node's _metadata (a module's state_dict()
    carries its version there)."""
    out = (type(node) if type(node) in (dict, collections.OrderedDict) else dict)(items)
    meta = getattr(node, "_metadata", None)
    if meta is not None:
        out._metadata = meta
    return out


class GradientLogHandle:
    """A checkpoint of GradientLog.save_async in flight.  kind: "state" (the
    whole state) or "record" (the step's gradients).  wait() returns once the
    step can be loaded: its checkpoint, and for a record the whole state it
    follows and the records between them, committed and durable; raises the
    failure of any of them."""

    def __init__(self, step, kind, handle, bases=()):
        self.step = step
        self.kind = kind
        self._handle = handle
        self._bases = tuple(bases)  # a record: the SaveHandles of the state and records before

    @property
    def skipped(self):
        return self._handle.skipped

    @property
    def done(self):
        return self._handle.done and all(b.done for b in self._bases)

    def wait(self):
        self._handle.wait()
        for b in self._bases:
            b.wait()


class _Chain:
    """The whole state that records may follow, and the records saved after it."""

    __slots__ = ("step", "id", "shape", "handles", "last_step", "last_versions")

    def __init__(self, step, base_id, handle, shape, versions):
        self.step = step  # the whole state's
        self.id = base_id  # its random id, kept in each record of the chain
        self.shape = shape  # (parameter groups, parameters) of the optimizer then
        self.handles = [handle]  # the state's SaveHandle and each record's, in order
        # the step of the chain's last checkpoint (the state or a record), and the version
        # counters _versions() gave then: the next step must begin from those
        self.last_step = step
        self.last_versions = versions

    @property
    def handle(self):
        """The whole state's SaveHandle."""
        return self.handles[0]

    @property
    def records(self):
        return len(self.handles) - 1


_ATOMS = (int, float, str, bool, type(None))


def _group_value_copy(v):
    """A copy of a parameter group's value as it is now: tensors cloned, numbers,
    strings and tuples of them as they are (immutable), the rest deep-copied."""
    tv = type(v)
    if tv in _ATOMS or (tv is tuple and all(type(x) in _ATOMS for x in v)):
        return v
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    return copy.deepcopy(v)


def _record_paths(path, records_path, k):
    """The records' stores' files or devices, one for each of the k positions (None
    each on a ramdisk); ValueError where records_path does not give k distinct ones."""
    if records_path is None:
        return [None] * k
    paths = [records_path] if isinstance(records_path, (str, bytes, os.PathLike)) \
        else list(records_path) if isinstance(records_path, (list, tuple)) else None
    if paths is None or len(paths) != k or \
            not all(isinstance(p, (str, bytes, os.PathLike)) for p in paths):
        raise ValueError(f"records_path: {k} file(s) or device(s), one for each record after "
                         f"a whole state (records_per_state={k}), not {records_path!r}")
    names = [os.path.realpath(os.fsdecode(p)) for p in [path] + paths]
    if len(set(names)) != len(names):
        raise ValueError("path and each of records_path must be different files or devices")
    return paths


def _key(t):
    return (t.device, t.data_ptr(), t.dtype, t.shape, t.stride())  # (a Size is a tuple)


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _fill(tree, fills, path=()):
    """tree rebuilt with the values of fills (path tuple -> value) at their paths."""
    if path in fills:
        return fills[path]
    if isinstance(tree, dict):
        return _dict_copy(tree, ((k, _fill(v, fills, path + (k,))) for k, v in tree.items()))
    if type(tree) in _PLAIN:
        return type(tree)(_fill(v, fills, path + (i,)) for i, v in enumerate(tree))
    return tree


class GradientLog:
    """Checkpoints of a training state every step, K of every K + 1 as the
    step's gradients (the module's documentation says how and when).

    optimizer: the torch.optim.Optimizer whose steps are recorded; step hooks
    are registered on it here (close() removes them): a pre-hook that takes
    the gradients and parameter groups of a step that may be recorded (kept
    after the other pre-hooks), a post-hook that checks the step used them,
    and hook_optimizer's, which makes the step wait for the whole state in
    flight, as for Store.save_async.
    records_per_state: K >= 1, the records saved after each whole state (each
    a step).  A larger K moves fewer bytes a step and makes a load replay up
    to K steps; each position in the chain has a records' store of its own
    (two slots, as every store), so the records take K times the memory.  A
    record's gradients stay allocated until it is written and a later call
    polls its store (each call polls them all): about as long as they take to
    cross, whatever K.
    name, path, and the other keywords: those of Store, for the store of
    whole states (name) and the records' stores (name + "-grads" for the
    first record after a whole state, name + "-grads2" ... for the others;
    in the same ramdisk directory; on PM, records_path: one file or device,
    or with K > 1 a sequence of K, one for each position).  Not with group=
    or partner=: a record is one rank's.  shared_dir copies out the whole
    states only.  The records' stores write from the GPU with gpu_source
    "direct" where the whole states' use "snapshot" (nothing changes a
    record's sources), and without snapshots on wait.

    trust_step_hooks: the optimizer's other step hooks (and global ones) change
    neither parameters nor optimizer state, so a replay need not run them.
    Without it, such hooks make every step a whole state (a warning says so).

    Use: after each step's optimizer.step() (and scheduler step),
    save_async(state_dict, step), where state_dict holds the model's
    state_dict(), the optimizer's state_dict() and whatever else a resume
    needs; on restart, load() with the model and optimizer built as before.
    A record takes each parameter's .grad from it (sets it to None, as
    optimizer.zero_grad() does by default), so that the next backward
    writes new gradients while the recorded ones are copied out."""

    def __init__(self, optimizer, *, name="default", path=None, records_path=None,
                 records_per_state=1, trust_step_hooks=False, **store_kw):
        if store_kw.get("group") not in (None, False) or store_kw.get("partner"):
            raise ValueError("GradientLog keeps one rank's records: not with group= or "
                             "partner= (use Store for multi-rank checkpoints)")
        if type(records_per_state) is not int or records_per_state < 1:
            raise ValueError(f"records_per_state must be an int >= 1, not "
                             f"{records_per_state!r}")
        if (path is None) != (records_path is None):
            raise ValueError("on PM, give path for the whole states and records_path for "
                             "the records (files or devices of their own); on a ramdisk, "
                             "neither")
        record_paths = _record_paths(path, records_path, records_per_state)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("optimizer must be a torch.optim.Optimizer")
        self.optimizer = optimizer
        self.store = Store(path, name=name, **store_kw)
        # A record's sources are the gradients taken off the parameters and copies of the
        # rest: nothing changes them, so a device snapshot of them would be a wasted copy.
        rec_kw = {k: v for k, v in store_kw.items()
                  if k not in ("shared_dir", "keep", "copyout_every", "gpu_snapshot_on_wait")}
        if rec_kw.get("gpu_source") == "snapshot":
            rec_kw["gpu_source"] = "direct"
        stores = []
        try:
            for i, rp in enumerate(record_paths):
                stores.append(Store(rp, name=f"{name}-grads{i + 1 if i else ''}", **rec_kw))
        except BaseException:
            try:
                _each([self.store] + stores, Store.close)
            except BaseException:  # noqa: BLE001 -- the open's failure is the one to raise
                pass
            raise
        # the records' stores, one for each position in a chain (the i-th record after a
        # whole state goes into record_stores[i - 1]); records: the first one's
        self.record_stores = tuple(stores)
        self.records = stores[0]
        self.trust_step_hooks = bool(trust_step_hooks)
        self._hooks = []
        try:
            self._hooks.append(optimizer.register_step_pre_hook(self._pre_step))  # [0]
            self._hooks.append(optimizer.register_step_post_hook(self._post_step))
            self._hooks.append(hook_optimizer(optimizer, self.store))
        except BaseException:
            self._unhook()
            try:
                _each((self.store,) + self.record_stores, Store.close)
            except BaseException:  # noqa: BLE001 -- the hooks' failure is the one to raise
                pass
            raise
        self._replaying = False
        self._groups = None  # the parameter groups the step since the last checkpoint ran with
        self._why_step = None  # why that step cannot be recorded
        self._warned = set()  # the reasons warned about (once each)
        k = len(stores)
        self._records_broken = [None] * k  # why each records' store cannot be read
        self._stepped = None  # _versions() after the step since the chain's last checkpoint
        self._depth = 0  # optimizer.step() calls in progress (a subclass calls its parent's)
        # The next whole state guards the next chain's first record (it waits for that
        # state): after a failed whole state, and at the start and after load(), where the
        # records' stores may hold a newer record of a chain whose whole state never
        # committed, so that the record the first chain overwrites may be one that the
        # newest loadable step needs
        self._keep_previous = True
        self._base = None  # the _Chain a record may continue, None if none may
        self._steps = 0  # optimizer steps since the chain's last checkpoint
        self._taken = None  # the gradients of the one step since, and their versions
        self._grad_pattern = None  # which parameters had gradients in the records saved
        # each records' store's newest step (False: not read yet)
        self._records_newest = [False] * k
        self._prev_record_base = None  # the SaveHandle of the last chain's whole state
        self.last_recovery = None
        self.records_saved = 0
        self.states_saved = 0

    # ------------------------------------------------------------ saving

    def _params(self):
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _pre_step(self, opt, args, kwargs):
        if self._replaying:
            return
        self._depth += 1
        if self._depth > 1:
            return  # a step called inside the step (a subclass's super().step())
        self._steps += 1
        self._taken = self._groups = None
        chain = self._base
        if chain is None or self._steps != 1:
            return  # this step cannot be a record: nothing to take
        params = self._params()
        if args and args[0] is opt:
            args = args[1:]  # torch passes the optimizer itself first
        if any(a is not None for a in args) or any(v is not None for v in kwargs.values()):
            self._why_step = "optimizer.step() was given a closure or arguments"
        elif getattr(opt, "grad_scale", None) is not None or \
                getattr(opt, "found_inf", None) is not None:
            self._why_step = "GradScaler passes its scale to the (fused) step"
        elif (len(opt.param_groups), len(params)) != chain.shape:
            self._why_step = ("the optimizer's parameter groups changed since the whole "
                              "state (add_param_group)")
        elif self._versions(params) != chain.last_versions:
            self._why_step = ("parameters or optimizer state were changed in place since "
                              "the last checkpoint, outside optimizer.step()")
        else:
            grads = list(map(_grad, params))
            if not {torch.strided}.issuperset(map(_layout, filter(_not_none, grads))):
                self._why_step = "the gradients are sparse"
                return
            self._taken = (grads, _versions_of(grads))
            # The parameter groups as this step runs with them: the learning rate set
            # before the step (by the loop or a scheduler) is not the whole state's.
            self._groups = [{k: _group_value_copy(v) for k, v in g.items() if k != "params"}
                            for g in opt.param_groups]

    def _post_step(self, opt, args, kwargs):
        if self._replaying:
            return
        self._depth = max(0, self._depth - 1)
        if self._depth or self._taken is None:
            return
        # the step must have used the gradients taken before it (a hook after ours may
        # have replaced or changed them)
        params = self._params()
        grads, versions = self._taken
        if not all(map(operator.is_, map(_grad, params), grads)) or \
                _versions_of(grads) != versions:
            self._taken = None
            self._why_step = "the gradients were replaced or changed during the step"
            return
        self._stepped = self._versions(params)  # what the step left: nothing may change it

    def _versions(self, params):
        """The version counters of the parameters (the optimizer's, _params()) and of
        the optimizer's state tensors, with the identities of the states and their
        tensors: an in-place change outside optimizer.step() shows there (not one
        through .data), as does a state moved or a tensor replaced."""
        # The parameters with a state, in the state's own order (no lookup by parameter,
        # whose hash is a Python call); not the empty ones, which a mere read of the
        # defaultdict (opt.state[p] in a logging callback) adds, nor values that are not
        # dicts (an optimizer's own counter under a key of its own)
        held = [(p, s) for p, s in self.optimizer.state.items() if s and isinstance(s, dict)]
        keys, states = zip(*held) if held else ((), ())
        tensors = [v for s in states for v in s.values() if isinstance(v, torch.Tensor)]
        return (list(map(_version, params)),
                list(map(id, params)),  # which parameters (one replaced shows)
                # which parameter has which state (the object: one moved to another
                # parameter shows), holding how many values
                list(map(id, keys)), list(map(id, states)), list(map(len, states)),
                # its tensors' versions, and which tensors (one replaced at the same
                # version shows)
                list(map(_version, tensors)), list(map(id, tensors)))

    def _pre_hook_last(self):
        """Puts GradientLog's step pre-hook after the others (global ones run first
        anyway): the gradients and groups it takes are what the step then runs with."""
        hooks = getattr(self.optimizer, "_optimizer_step_pre_hooks", None)
        hid = getattr(self._hooks[0], "id", None)
        if isinstance(hooks, collections.OrderedDict) and hid in hooks:
            hooks.move_to_end(hid)

    def _foreign_hooks(self):
        """Step hooks other than GradientLog's own: a replay does not run them again."""
        from torch.optim import optimizer as optmod
        ours = {h.id for h in self._hooks if hasattr(h, "id")}
        opt = self.optimizer
        n = sum(1 for k in getattr(opt, "_optimizer_step_pre_hooks", {}) if k not in ours)
        n += sum(1 for k in getattr(opt, "_optimizer_step_post_hooks", {}) if k not in ours)
        n += len(getattr(optmod, "_global_optimizer_pre_hooks", {}))
        n += len(getattr(optmod, "_global_optimizer_post_hooks", {}))
        return n

    def _recordable(self, step, params):
        """The gradients of step `step` if it can be a record, else None (saying why,
        once per reason, where the loop would otherwise silently never record)."""
        chain = self._base
        if chain is None or chain.last_step != step - 1 or chain.handle.skipped:
            return None
        if self._steps != 1:
            if self._steps > 1:
                self._cannot(f"{self._steps} optimizer steps since the last checkpoint: a "
                             "record is one step, saved at the step after a whole state or "
                             "a record")
            return None
        if self._taken is None:
            return self._cannot(self._why_step)
        opt = self.optimizer
        shape = (len(opt.param_groups), len(params))
        if shape != chain.shape or len(self._groups) != shape[0] or \
                len(self._taken[0]) != shape[1]:
            return self._cannot("the optimizer's parameter groups changed since the whole "
                                "state (add_param_group)")
        if self._versions(params) != self._stepped:
            return self._cannot("parameters or optimizer state were changed in place after "
                                "the step, outside optimizer.step()")
        n = self._foreign_hooks()
        if n and not self.trust_step_hooks:
            return self._cannot(f"the optimizer has {n} step hook(s) besides GradientLog's, "
                                "which a replay would not run again (trust_step_hooks=True "
                                "if they change neither parameters nor optimizer state)")
        pos = chain.records  # this record's store: record_stores[pos]
        if self._records_newest[pos] is False:
            try:
                self._records_newest[pos] = self.record_stores[pos].newest_step()
            except Error as e:
                self._records_newest[pos] = None
                self._records_broken[pos] = str(e)
        store_name = self.record_stores[pos].name
        if self._records_broken[pos]:
            return self._cannot(f"the records' store is unusable ('{store_name}': "
                                f"{self._records_broken[pos]}): remove its file")
        newest = self._records_newest[pos]
        if newest is not None and step <= newest:
            return self._cannot(f"the records' store '{store_name}' holds step {newest}, "
                                "after this one (the whole states' store was lost?): "
                                "records again after that step")
        grads, versions = self._taken
        if _versions_of(grads) != versions:
            return self._cannot("the step's gradients were changed in place after it "
                                "(zero_grad(set_to_none=False) before the save?)")
        pattern = tuple(map(operator.is_, grads, itertools.repeat(None)))
        if self._grad_pattern is not None and pattern != self._grad_pattern:
            return self._cannot("other parameters have gradients than in the records before")
        return grads

    def _split(self, state, params):
        """(rest, param paths, optimizer path, bytes copied): state without what the
        optimizer's step produces, its other tensors copied; None if it cannot be."""
        opt = self.optimizer
        index = {_key(p): i for i, p in enumerate(params)}
        opt_tensors = [v for s in opt.state.values() if isinstance(s, dict) for v in s.values()
                       if isinstance(v, torch.Tensor)]
        opt_ids = {id(v) for v in opt_tensors}
        opt_keys = None  # their _key()s, made only if a state_dict holds other objects
        paths, found, copied = [], [None], [0]
        tensor_type = torch.Tensor
        # numpy is optional: a state can hold its arrays only if the program imported it
        ndarray = getattr(sys.modules.get("numpy"), "ndarray", ())

        def is_opt_sd(node):
            nonlocal opt_keys
            if not (type(node) in (dict, collections.OrderedDict)
                    and node.keys() == {"state", "param_groups"}
                    and isinstance(node["state"], dict)
                    and len(node["param_groups"]) == len(opt.param_groups)):
                return False
            ts = [v for s in node["state"].values() if isinstance(s, dict)
                  for v in s.values() if isinstance(v, torch.Tensor)]
            if len(ts) != len(opt_tensors) or len(opt_ids) != len(opt_tensors):
                return False
            # optimizer.state_dict() holds the optimizer's own tensors (the same
            # objects): the same keys; another object with the same memory and
            # layout counts too
            if opt_ids.issuperset(map(id, ts)):
                return True
            if opt_keys is None:
                opt_keys = {_key(v) for v in opt_tensors}
            return all(_key(t) in opt_keys for t in ts)

        def tensor(t, path):
            i = index.get(_key(t))
            if i is not None:
                paths.append([i, path])
                return None
            copied[0] += t.numel() * t.element_size()
            return t.detach().clone()  # buffers, RNG states: as they are now

        def walk(node, path):
            if isinstance(node, torch.Tensor):
                return tensor(node, path)
            if isinstance(node, ndarray):
                return node.copy()
            if is_opt_sd(node):
                if found[0] is not None:
                    raise _Unrecordable("the optimizer's state_dict appears twice")
                found[0] = path
                return {"param_groups": walk(node["param_groups"], path + ["param_groups"])}
            # the containers Store saves (it loads a dict or list subclass as a dict or list)
            # (a module's state_dict(), a parameter group's indices: their tensors and
            # plain values without a call of walk each)
            if isinstance(node, dict):
                return _dict_copy(node, [(k, v if type(v) in _ATOMS else
                                          tensor(v, path + [k]) if isinstance(v, tensor_type)
                                          else walk(v, path + [k])) for k, v in node.items()])
            if isinstance(node, list):
                return [v if type(v) in _ATOMS else walk(v, path + [k])
                        for k, v in enumerate(node)]
            if type(node) is tuple:
                return tuple(walk(v, path + [k]) for k, v in enumerate(node))
            return node

        try:
            rest = walk(state, [])
        except _Unrecordable as e:
            return self._cannot(str(e))
        finally:
            # walk refers to itself (a cycle through its closure): undone here, so that
            # the walk's objects (~1500 for GPT-2 medium's shape) are freed now, not left
            # to the cyclic collector
            walk = None
        if found[0] is None:
            return self._cannot("the state_dict holds no state_dict() of the optimizer")
        missing = set(range(len(params))) - {i for i, _ in paths}
        if missing:
            return self._cannot(f"{len(missing)} of the optimizer's {len(params)} parameters "
                                "are not in the state_dict (as tensors sharing their memory)")
        return rest, paths, found[0], copied[0]

    def _cannot(self, why, level=5):
        """Warns once per reason that a step is saved whole; returns None.  level: the
        caller of save_async, from _recordable or _split (from _save_record: 4)."""
        self._warn_once(why, f"GradientLog: a whole state instead of a record: {why}",
                        level)
        return None

    def _warn_once(self, key, text, level):
        """warnings.warn(text) the first time for key; level: warn's stacklevel as the
        caller of _warn_once would give it (1: that caller)."""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(text, stacklevel=level + 1)

    def save_async(self, state_dict, step):
        """Starts the checkpoint of step `step` (after this step's optimizer.step())
        and returns a GradientLogHandle: a record of this step's gradients if
        step-1 was saved as a whole state or a record of its chain, the chain has
        fewer than records_per_state records, and this step can be recorded;
        else the whole state.  The whole state's tensors must stay unchanged
        until their layers are persisted (the optimizer's hook waits for them); a
        record's gradients are taken from the parameters (copied first where they
        are views of a shared buffer), its other tensors copied now.  A chain's
        first record waits for the whole state of the chain before, if that one
        has not committed yet (possible with on_busy="queue"): it overwrites the
        record of the chain before that, the newest loadable step until then.  If
        that whole state failed, this step is saved whole instead."""
        step = int(step)
        self._depth = 0  # not inside a step (one that raised left it counted)
        for records in self.record_stores:
            # a record written since is ended now, not at its store's next record (K + 1
            # steps later): its gradients are released as soon as they are persisted
            records.poll()
        h = self._save_record(state_dict, step)
        if h is not None:
            return h
        base_id = secrets.randbits(62)
        h = self.store.save_async({"gradlog": {"version": _VERSION, "id": base_id,
                                               "records_per_state": len(self.record_stores)},
                                   "state": state_dict}, step)
        if self._keep_previous and not h.skipped:
            # after a failed whole state (or at the start): the next record may overwrite
            # one that the newest loadable step needs, so it must wait for this whole state
            # (a skipped one would never be waited for)
            self._prev_record_base, self._keep_previous = h, False
        params = self._params()
        self._base = _Chain(step, base_id, h, (len(self.optimizer.param_groups), len(params)),
                            self._versions(params))
        self._steps, self._taken = 0, None
        self._pre_hook_last()
        self.states_saved += not h.skipped
        return GradientLogHandle(step, "state", h)

    def _save_record(self, state_dict, step):
        params = self._params()
        grads = self._recordable(step, params)
        split = self._split(state_dict, params) if grads is not None else None
        if split is None:
            return None
        rest, paths, opt_path, copied = split
        chain = self._base
        pos = chain.records  # 0: the chain's first record
        prev = self._prev_record_base if pos == 0 else None
        if prev is not None:
            try:
                prev.wait()  # returns at once if it has committed
            except Error as e:
                # record - 2 never counted, so the one before it is still the newest
                # loadable step: keep it (the next record waits for this whole state)
                self._prev_record_base = None
                self._keep_previous = True
                return self._cannot(f"the whole state of the record before failed ({e})", 4)
        nbytes = sum(g.numel() * g.element_size() for g in grads if g is not None)
        if copied > nbytes:
            self._warn_once(
                "large rest",
                f"GradientLog: a record copies {copied / 1e6:.3g} MB of tensors that are not "
                f"the optimizer's (frozen weights, EMA copies, a second model...) beside "
                f"{nbytes / 1e6:.3g} MB of gradients: most of a whole state", 3)
        # Gradients that are views of a buffer (DDP's gradient_as_bucket_view, contiguous
        # gradient buffers) are written again by the next backward: copy those now.
        sources = [g.detach().clone() if g is not None and g._is_view() else g for g in grads]
        rec = {"gradlog": {"version": _VERSION, "base": chain.id, "base_step": chain.step,
                           "position": pos + 1,
                           "nparams": len(grads), "params": paths, "optim": opt_path,
                           "devices": sorted({p.device.type for p in params})},
               "groups": self._groups, "grads": sources, "state": rest}
        try:
            h = self.record_stores[pos].save_async(rec, step)
        except LayoutError:
            return self._cannot("a record of another structure than the records' store's", 4)
        self._grad_pattern = tuple(g is None for g in grads)
        for p, g in zip(params, grads):
            if p.grad is g:
                p.grad = None  # the next backward makes new ones
        bases = tuple(chain.handles)
        chain.handles.append(h)
        if h.skipped or chain.records == len(self.record_stores):
            self._base = None  # the next step is a whole state: the chain is full or cut
        else:
            chain.last_step, chain.last_versions = step, self._stepped
        self._steps, self._taken = 0, None
        if pos == 0:
            self._prev_record_base = chain.handle
        self._records_newest[pos] = step
        self.records_saved += not h.skipped
        return GradientLogHandle(step, "record", h, bases)

    def save(self, state_dict, step):
        """save_async, then wait: returns once step `step` can be loaded."""
        h = self.save_async(state_dict, step)
        h.wait()
        return h

    def wait(self):
        """Waits for every store's checkpoint in flight; raises the first failure."""
        err = None
        for st in (self.store,) + self.record_stores:
            try:
                st.wait()
            except Error as e:
                err = err or e
        if err is not None:
            raise err

    def hook_module(self, module):
        """pmckpt.hook_module for the whole states: each submodule with buffers
        (BatchNorm's running statistics, updated in place by forward) waits for
        them before its forward.  Needed, as for Store.save_async, when the state
        holds such buffers; a record copies them at its call.  close() removes it."""
        h = hook_module(module, self.store)
        self._hooks.append(h)
        return h

    # ------------------------------------------------------------ loading

    def load(self, *, map_location=None, replay=True):
        """Returns the state_dict of the newest step that can be loaded.

        The newest verified whole state; then, for each step after it in turn
        (up to records_per_state of this GradientLog), if that step's record
        follows that very state (its id) and verifies, the step replayed with
        this GradientLog's optimizer: the parameters are set to the state's
        (before the first), the optimizer loads its state_dict with the
        parameter groups the step ran with, takes the recorded gradients and
        steps (its step function itself, without the step hooks), then gets
        that step's parameter groups as the state_dict of that step holds them.
        The first step without such a record ends the chain.  The model and
        optimizer are left at the returned step; the returned state_dict's
        parameters and optimizer state_dict are theirs (as state_dict() gives,
        on their devices whatever map_location says), the rest is the last
        replayed record's.  Apply it as any loaded state_dict
        (model.load_state_dict(...), ...).  last_recovery: step,
        whole_state_step, replayed (True if a record was), records_replayed,
        and each store's own (state; record: the first record's store's;
        records: each replayed record's).  A record that cannot be read or
        fails verification, or was saved from parameters on another kind of
        device (a replay there would not give the same bits), warns
        (RecoveryWarning) and the step before it is returned.  Errors: those of
        Store.load for the whole state; Error if the optimizer does not match a
        record (its parameters' count and shapes): the model and optimizer may
        then be partly changed, and load(replay=False) still loads the whole
        state alone (as does a record that cannot be replayed)."""
        full = self.store.load(map_location=map_location)
        info = full.get("gradlog") if isinstance(full, dict) else None
        if not isinstance(info, dict) or info.get("version") != _VERSION or "state" not in full:
            raise CorruptError(f"store '{self.store.name}' does not hold GradientLog "
                               "checkpoints (saved by Store.save, or another version)")
        base_step = self.store.last_recovery["step"]
        state, first_info, infos = full["state"], None, []
        for pos, records in enumerate(self.record_stores if replay else ()):
            step = base_step + pos + 1
            rec = self._chained_record(records, step, info["id"], pos, map_location)
            if pos == 0 and rec is not False:
                first_info = records.last_recovery
            if not rec:
                break
            state = self._replay(state, rec, first=pos == 0)
            infos.append(records.last_recovery)
        saved_k = info.get("records_per_state", 1)
        if len(infos) == len(self.record_stores) and saved_k > len(infos):
            warnings.warn(RecoveryWarning(
                f"GradientLog: the whole state of step {base_step} was saved with "
                f"records_per_state={saved_k}, this GradientLog has {len(infos)}: the records "
                f"of its chain after step {base_step + len(infos)}, if any, are not loaded "
                f"(open it with records_per_state={saved_k})"))
        self._base, self._steps, self._taken = None, 0, None
        self._keep_previous, self._prev_record_base = True, None  # as at the start
        self.last_recovery = {"step": base_step + len(infos), "whole_state_step": base_step,
                              "replayed": bool(infos), "records_replayed": len(infos),
                              "state": self.store.last_recovery, "record": first_info,
                              "records": infos}
        return state

    def _chained_record(self, records, step, base_id, pos, map_location):
        """The record of `step` in the records' store `records` if it continues the
        chain of the whole state base_id at position pos (0: the first record after
        it) and can be replayed here; None if not (a warning says why where it is
        not the chain's plain end); False if the store holds no record of `step`."""
        try:
            rec = records.load(step=step, map_location=map_location)
        except NoCheckpointError:
            return False
        except Error as e:  # unusable, truncated, not a pool: the steps before still are
            warnings.warn(RecoveryWarning(f"GradientLog: the record of step {step} is "
                                          f"unusable ({e}); step {step - 1} loaded"))
            return False
        info = rec.get("gradlog") if isinstance(rec, dict) else None
        if not isinstance(info, dict) or info.get("base") != base_id or \
                info.get("position", 1) != pos + 1:
            return None  # a record of another chain (an older run's, or cut short)
        here = sorted({p.device.type for p in self._params()})
        if info.get("devices") != here:
            warnings.warn(RecoveryWarning(
                f"GradientLog: the record of step {step} was saved from parameters on "
                f"{info.get('devices')}, these are on {here}: a replay would not give the "
                f"same bits; step {step - 1} loaded"))
            return None
        return rec

    def _replay(self, state, rec, first=True):
        """The state after replaying rec's step onto state (the whole state if first,
        else what the replay of the record before returned, whose parameters and
        optimizer state the model and optimizer already hold)."""
        info = rec["gradlog"]
        opt = self.optimizer
        params = self._params()
        if info["nparams"] != len(params) or len(rec["grads"]) != len(params):
            raise Error(f"the optimizer has {len(params)} parameters, the record of "
                        f"{info['nparams']}: not the optimizer the record was saved with")
        paths = info["params"]
        for p, g in zip(params, rec["grads"]):
            if g is not None and g.shape != p.shape:
                raise Error(f"a recorded gradient of shape {tuple(g.shape)} for a parameter "
                            f"of {tuple(p.shape)}: not the optimizer the record was saved with")
        opt_path = info["optim"]
        whole = _get(state, opt_path)
        if not len(rec["groups"]) == len(whole["param_groups"]) == len(opt.param_groups):
            raise Error(f"the optimizer has {len(opt.param_groups)} parameter groups, the "
                        f"whole state {len(whole['param_groups'])} and the record "
                        f"{len(rec['groups'])}: not the optimizer they were saved with")
        with torch.no_grad():
            for i, path in paths if first else ():
                src = _get(state, path)
                p = params[i]
                if not isinstance(src, torch.Tensor) or src.shape != p.shape \
                        or src.dtype != p.dtype:
                    raise Error(f"parameter {i} ({'/'.join(map(str, path))}): the whole "
                                f"state holds {getattr(src, 'shape', type(src).__name__)}, "
                                f"the optimizer's is {tuple(p.shape)} {p.dtype}")
                p.copy_(src)
        # the whole state's optimizer state, with the parameter groups the step ran with
        opt.load_state_dict({"state": whole["state"], "param_groups": [
            {**ran, "params": g["params"]}
            for ran, g in zip(rec["groups"], whole["param_groups"])]})
        for p, g in zip(params, rec["grads"]):
            p.grad = None if g is None else g.to(p.device)
        step = getattr(type(opt).step, "__wrapped__", None)  # the step without its hooks
        self._replaying = True
        try:
            if step is not None:
                step(opt)
            else:
                opt.step()
        finally:
            self._replaying = False
            for p in params:
                p.grad = None
        sd = opt.state_dict()
        sd["param_groups"] = _get(rec["state"], opt_path)["param_groups"]
        opt.load_state_dict(sd)  # the groups after the step (the scheduler's next values)
        fills = {tuple(path): params[i].detach() for i, path in paths}
        fills[tuple(opt_path)] = opt.state_dict()
        return _fill(rec["state"], fills)

    # ------------------------------------------------------------ lifetime

    def close(self):
        """Waits for the checkpoints in flight, removes the hooks, closes every store;
        then raises the first failure (of the waits first)."""
        err = None
        try:
            self.wait()
        except BaseException as e:  # noqa: BLE001 -- raised below, once all are closed
            err = e
        self._unhook()
        try:
            _each((self.store,) + self.record_stores, Store.close)
        except BaseException as e:  # noqa: BLE001
            err = err or e
        if err is not None:
            raise err

    def destroy(self):
        """Removes the hooks and deletes every store's files (Store.destroy; raises the
        first failure, after trying them all)."""
        self._unhook()
        _each((self.store,) + self.record_stores, Store.destroy)

    def _unhook(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Unrecordable(Exception):
    pass


def _each(stores, method):
    """method(store) for every store, even after one raises; then raises the first error."""
    err = None
    for st in stores:
        try:
            method(st)
        except BaseException as e:  # noqa: BLE001 -- raised below, once all are done
            err = err or e
    if err is not None:
        raise err
