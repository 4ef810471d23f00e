# SPDX-License-Identifier: BSD-3-Clause
"""pmckpt.lightning -- a Lightning CheckpointIO on a pmckpt store.

    trainer = Trainer(plugins=[PmckptCheckpointIO(shared_dir="/shared/ckpt")],
                      callbacks=[ModelCheckpoint(every_n_train_steps=1, save_last=True)])
    trainer.fit(model, ckpt_path="last")

What Lightning saves (its checkpoint dict: model and optimizer states, LR
schedulers, loops, callbacks, hyper-parameters, versions) goes into a store
as it is, step after step: the model's and the optimizers' tensors as the
store's tensors, written from their own memory; everything else (numbers,
strings, the callbacks' small score tensors) as the checkpoint's metadata.
A value the store cannot keep is refused with its key path
(UnsupportedObjectError); hyper-parameters that are arbitrary objects can be
pickled instead, on request (pickle_hyperparameters=True: loading then runs
the pickle, so load only checkpoints you trust).

The files that ModelCheckpoint names (epoch=0-step=100.ckpt, last.ckpt) are
small pointer files: a JSON record naming the store and its step.  Lightning
lists, dates, links and removes them as it does its own files, and
ckpt_path="last" resumes.  Two saves at one training step (a step's file
and last.ckpt) write the tensors once.  A step that a live file still names
is written out as a regular Lightning .ckpt into that file before the store
overwrites its slot (top-k keeps old checkpoints; the store keeps two), so
every file Lightning holds loads.  export() writes any of them as a regular
.ckpt for users who leave (also python -m pmckpt.lightning export SRC DST).

Asynchronous mode (the default): save_checkpoint returns once the
checkpoint has begun; its layers are written in the background from the
tensors' own memory.  Until then each optimizer step waits, before it
updates its parameters, for their layers only, and each module's forward
for its own buffers (BatchNorm statistics): global hooks installed while the
plug-in is in use.  A model changed in place elsewhere (an EMA written
outside the optimizer) needs asynchronous=False.  teardown() waits for what
is in flight.

Rank 0 saves (Lightning's strategies call save_checkpoint there); every
rank loads from the file: one node's store, or, across nodes, a shared_dir
and the store's fallback to it.  FSDP and DeepSpeed checkpoints
(sharded) are not for this plug-in: use pmckpt.dcp."""
import collections
import json
import os
import pickle
import sys
import warnings

import torch
import torch.nn.modules.module as _module
import torch.optim.optimizer as _optimizer

from . import hooks as _hooks
from .errors import Error, NoCheckpointError, UnsupportedObjectError
from .store import Store

from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

POINTER_FORMAT = "pmckpt-lightning-1"
_POINTER_HEAD = b'{"format": "' + POINTER_FORMAT.encode() + b'"'
_TENSOR = "__pmckpt_tensor__"   # a small tensor kept in the metadata
_PICKLE = "__pmckpt_pickle__"   # pickled hyper-parameters (opt-in)
_STORE_KEYS = ("state_dict", "optimizer_states")  # their tensors are the store's tensors


# ------------------------------------------------------------ conversion

def _dtype_name(dt):
    return str(dt).replace("torch.", "")


def _small_tensor(t):
    t = t.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return {_TENSOR: [_dtype_name(t.dtype), list(t.shape), raw]}


def _from_small(v, map_location):
    dtype, shape, raw = v[_TENSOR]
    dt = getattr(torch, dtype)
    if raw:
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape)
    else:
        t = torch.empty(shape, dtype=dt)
    return t.to(map_location) if isinstance(map_location, (str, torch.device)) else t


def _convert(checkpoint, pickle_hp):
    """(what the store saves, a skeleton for telling two saves apart): tensors under
    state_dict and optimizer_states stay tensors; other tensors become metadata."""
    def walk(v, store_tensors):
        if isinstance(v, torch.Tensor):
            if store_tensors:
                return v, ("T", v.data_ptr(), v._version, tuple(v.shape), str(v.dtype),
                           str(v.device))
            small = _small_tensor(v)
            return small, ("t", small[_TENSOR][0], tuple(small[_TENSOR][1]), small[_TENSOR][2])
        if isinstance(v, dict):
            out = collections.OrderedDict() if isinstance(v, collections.OrderedDict) else {}
            sk = []
            for k, x in v.items():
                out[k], s = walk(x, store_tensors)
                sk.append((k, s))
            md = getattr(v, "_metadata", None)  # a module state_dict's versions
            if md is not None:
                out._metadata = md
            return out, ("d", tuple(sk))
        if isinstance(v, (list, tuple)) and type(v) in (list, tuple):
            pairs = [walk(x, store_tensors) for x in v]
            return type(v)(p[0] for p in pairs), (type(v).__name__, tuple(p[1] for p in pairs))
        return v, ("v", repr(v))

    out, sk = {}, []
    for k, v in checkpoint.items():
        if k == "hyper_parameters" and pickle_hp:
            blob = pickle.dumps(v)
            out[k], s = {_PICKLE: blob}, ("p", blob)
        else:
            out[k], s = walk(v, k in _STORE_KEYS)
        sk.append((k, s))
    return out, tuple(sk)


def _restore(v, map_location):
    """Undoes _convert on a loaded checkpoint."""
    if isinstance(v, dict):
        if len(v) == 1 and _TENSOR in v:
            return _from_small(v, map_location)
        if len(v) == 1 and _PICKLE in v:
            return pickle.loads(v[_PICKLE])
        for k in list(v):
            v[k] = _restore(v[k], map_location)
        return v
    if isinstance(v, list):
        return [_restore(x, map_location) for x in v]
    if isinstance(v, tuple):
        return tuple(_restore(x, map_location) for x in v)
    return v


def _has_pickle(sd):
    hp = sd.get("hyper_parameters") if isinstance(sd, dict) else None
    return isinstance(hp, dict) and len(hp) == 1 and _PICKLE in hp


def _layout_key(skeleton):
    """A hash of the store tensors' places, dtypes and shapes, from _convert's skeleton:
    one store per distinct layout (a weights-only ModelCheckpoint beside a full one)."""
    import hashlib
    parts = []

    def walk(sk, path):
        if sk[0] == "T":
            parts.append(f"{path}:{sk[4]}:{sk[3]}")
        elif sk[0] == "d":
            for k, x in sk[1]:
                walk(x, f"{path}/{k}")
        elif sk[0] in ("list", "tuple"):
            for i, x in enumerate(sk[1]):
                walk(x, f"{path}/{i}")
    for k, sk in skeleton:
        if k in _STORE_KEYS:
            walk(sk, k)
    return hashlib.sha256(";".join(parts).encode()).hexdigest()[:12]


# ------------------------------------------------------------ pointer files

def is_pointer(path):
    """True if path is a pointer file of this plug-in (not a regular .ckpt)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(_POINTER_HEAD)) == _POINTER_HEAD
    except OSError:
        return False


def _read_pointer(path):
    with open(path, "rb") as f:
        rec = json.loads(f.read(64 << 10))
    if rec.get("format") != POINTER_FORMAT:
        raise Error(f"{path}: not a pmckpt Lightning pointer file")
    return rec


def _replace(path, write):
    """write(temporary path), then renamed over path: a reader sees the old file or
    the new one, whole.  Not fsync'd: a pointer lost by a power failure leaves the
    older pointer, which still loads."""
    tmp = f"{path}.pmckpt-tmp.{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _write_bytes(data):
    def write(tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return write


class PmckptCheckpointIO(CheckpointIO):
    """Lightning's CheckpointIO on a pmckpt store (see the module's text).

    path / ramdisk / shared_dir / keep / name: as for pmckpt.Store (where the
    store lives; shared_dir adds the copy-out, keeping `keep` steps).
    asynchronous: save in the background (True) or return once durable.
    pickle_hyperparameters: pickle checkpoint["hyper_parameters"] instead of
    refusing objects the store cannot keep (loading runs the pickle).
    Other keyword arguments go to pmckpt.Store (threads, meta_capacity, ...)."""

    def __init__(self, path=None, *, ramdisk=None, shared_dir=None, keep=2, name="lightning",
                 asynchronous=True, pickle_hyperparameters=False, meta_capacity=1 << 20,
                 **store_options):
        super().__init__()
        for k in ("group", "on_busy", "rank", "world_size"):
            if k in store_options:
                raise ValueError(f"{k}= is not for the Lightning plug-in (rank 0 saves, every "
                                 "rank loads from the file)")
        self._store_args = dict(store_options, path=path, ramdisk=ramdisk,
                                shared_dir=shared_dir, keep=keep, meta_capacity=meta_capacity)
        self.name = name
        self.asynchronous = bool(asynchronous)
        self.pickle_hyperparameters = bool(pickle_hyperparameters)
        self._stores = {}       # store name -> Store
        self._foreign = {}      # stores that pointer files of another configuration name
        self._last = None       # (store name, step, skeleton) of the newest save
        self._live = {}         # pointer path -> (store name, step)
        self._adopted = set()   # directories whose pointer files are in _live
        self._hooks = []

    # ------------------------------------------------------------ stores

    def _store(self, name):
        s = self._stores.get(name)
        if s is None:
            s = self._stores[name] = Store(name=name, **self._store_args)
        return s

    def _store_for(self, rec):
        """The store a pointer record names: ours, or one opened where it says (kept
        open until close())."""
        if rec["name"] in self._stores or rec.get("where") == self._where():
            return self._store(rec["name"])
        args = {k: rec.get(k) for k in ("path", "ramdisk", "shared_dir")}
        key = (rec["name"], json.dumps(args, sort_keys=True))
        s = self._foreign.get(key)
        if s is None:
            s = self._foreign[key] = Store(name=rec["name"], **args)
        return s

    def _where(self):
        a = self._store_args
        return [a.get("path"), a.get("ramdisk"), a.get("shared_dir")]

    # ------------------------------------------------------------ saving

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        if storage_options is not None:
            raise TypeError("PmckptCheckpointIO.save_checkpoint takes no storage_options "
                            f"(got {storage_options!r})")
        path = os.path.abspath(os.fspath(path))
        self._adopt(os.path.dirname(path))
        state, skeleton = _convert(checkpoint, self.pickle_hyperparameters)
        name = f"{self.name}-{_layout_key(skeleton)}"
        if self._last is not None and self._last[0] == name and self._last[2] == skeleton:
            step = self._last[1]  # the same checkpoint again (a step's file, then last.ckpt)
        else:
            store = self._store(name)
            held = store.slot_steps()  # waits for the checkpoint in flight
            step = held[-1] + 1 if held else 1
            self._materialize_before(store, name, held)
            try:
                if self.asynchronous:
                    self._install_hooks()
                    store.save_async(state, step)
                else:
                    store.save(state, step)
            except UnsupportedObjectError as e:
                hint = "" if self.pickle_hyperparameters or "hyper_parameters" not in str(e) \
                    else "; PmckptCheckpointIO(pickle_hyperparameters=True) pickles them"
                raise UnsupportedObjectError(f"Lightning checkpoint for {path}: {e}{hint}") from e
            self._last = (name, step, skeleton)
        a = self._store_args
        rec = {"format": POINTER_FORMAT, "name": name, "step": step,
               "global_step": checkpoint.get("global_step"), "epoch": checkpoint.get("epoch"),
               "path": a.get("path"), "ramdisk": self._store(name).ramdisk_dir,
               "shared_dir": a.get("shared_dir"), "where": self._where()}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _replace(path, _write_bytes(json.dumps(rec).encode()))
        self._live[path] = (name, step)

    def _adopt(self, directory):
        """The pointer files of our stores already in `directory` (an earlier run's, which
        Lightning may still keep) are live too, once per directory."""
        if directory in self._adopted:
            return
        self._adopted.add(directory)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return
        for n in names:
            p = os.path.join(directory, n)
            if n.endswith(".ckpt") and p not in self._live and is_pointer(p):
                try:
                    rec = _read_pointer(p)
                except (OSError, ValueError, Error):
                    continue
                if rec.get("where") == self._where() and rec["name"].startswith(self.name + "-"):
                    self._live[p] = (rec["name"], rec["step"])

    def _materialize_before(self, store, name, held):
        """Before a save overwrites the store's older slot (held: the slots' steps): each
        live file naming that slot's step becomes a regular .ckpt (top-k keeps checkpoints
        older than two)."""
        if len(held) < 2:
            return
        paths = [p for p, (n, s) in self._live.items() if n == name and s == held[0]]
        if not paths:
            return
        sd = _restore(store.load(step=held[0]), None)
        for p in paths:
            _replace(p, lambda tmp: torch.save(sd, tmp))
            self._live.pop(p, None)

    def _install_hooks(self):
        if self._hooks:
            return
        stores = self._stores

        def busy():
            return [s for s in stores.values() if s._pending or s.inflight is not None]

        def pre_step(opt, args, kwargs):
            for s in busy():
                s.wait_for(_hooks._optimizer_tensors(opt))

        def pre_forward(module, args):
            bufs = None
            for s in busy():
                if bufs is None:
                    bufs = list(module.buffers(recurse=False))
                if bufs:
                    s.wait_for(bufs)

        self._hooks = [_optimizer.register_optimizer_step_pre_hook(pre_step),
                       _module.register_module_forward_pre_hook(pre_forward)]

    # ------------------------------------------------------------ loading

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        if not is_pointer(path):  # a regular .ckpt (written out, or Lightning's own)
            return TorchCheckpointIO().load_checkpoint(path, map_location=map_location,
                                                       weights_only=weights_only)
        rec = _read_pointer(path)
        store = self._store_for(rec)
        dev = map_location if isinstance(map_location, (str, torch.device)) else None
        step = rec["step"]
        held = store.slot_steps()
        if step in held:
            sd = store.load(step=step, map_location=dev)
        elif not held or step > max(held):
            # Saved, never committed (the job stopped during the save): the newest that was.
            sd = store.load(map_location=dev)
            warnings.warn(f"{path} names step {step} of store '{rec['name']}', which was "
                          f"never committed (the job stopped while saving it): loaded step "
                          f"{store.step}, the newest committed", stacklevel=2)
        else:
            raise NoCheckpointError(f"{path} names step {step} of store '{rec['name']}', which "
                                    f"it no longer holds (it holds {sorted(held)}): the file "
                                    "was not written out before its slot was reused")
        if weights_only and _has_pickle(sd):
            raise Error(f"{path}: its hyper_parameters were pickled (pickle_hyperparameters="
                        "True), which weights_only=True refuses to load")
        return _restore(sd, map_location)

    def remove_checkpoint(self, path):
        path = os.path.abspath(os.fspath(path))
        self._live.pop(path, None)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def teardown(self):
        """Waits for the checkpoints in flight (raising their failure) and removes the hooks."""
        err = None
        for s in self._stores.values():
            try:
                s.wait()
            except BaseException as e:  # noqa: BLE001 -- every store is waited for
                err = err or e
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if err is not None:
            raise err

    def close(self):
        """teardown(), then closes the stores."""
        self.teardown()
        for s in list(self._stores.values()) + list(self._foreign.values()):
            s.close()
        self._stores.clear()
        self._foreign.clear()


def export(src, dst, checkpoint_io=None):
    """Writes the checkpoint that Lightning file `src` holds (a pointer of this plug-in,
    or a regular .ckpt) to `dst` as a regular Lightning .ckpt (torch.save), loadable by
    LightningModule.load_from_checkpoint without pmckpt."""
    io = checkpoint_io or PmckptCheckpointIO()
    sd = io.load_checkpoint(src)
    TorchCheckpointIO().save_checkpoint(sd, dst)
    return dst


def main(argv=None):
    """python -m pmckpt.lightning export SRC DST: SRC (a file that ModelCheckpoint
    named) as a regular Lightning .ckpt at DST."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m pmckpt.lightning",
                                 description="Lightning checkpoints kept by pmckpt")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write SRC as a regular Lightning .ckpt at DST")
    ex.add_argument("src")
    ex.add_argument("dst")
    args = ap.parse_args(argv)
    io = PmckptCheckpointIO()
    try:
        export(args.src, args.dst, io)
    except (Error, OSError) as e:
        print(f"python -m pmckpt.lightning export: {e}", file=sys.stderr)
        return 1
    finally:
        io.close()
    print(f"{args.src} -> {args.dst}")
    return 0


__all__ = ["PmckptCheckpointIO", "export", "is_pointer", "POINTER_FORMAT"]

if __name__ == "__main__":
    sys.exit(main())
