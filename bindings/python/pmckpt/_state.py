# SPDX-License-Identifier: BSD-3-Clause
"""Mapping a state_dict onto a store's layout and back.

A state_dict (nested dicts, lists, tuples; tensors and plain values) becomes
  - one store tensor per distinct tensor, named by its key path
    ("model/fc1.weight", "optim/state/3/exp_avg"), in order of first
    appearance, and
  - a JSON tree of everything else (the structure, ints, floats, strings,
    None, bools, bytes, dtypes), which goes into the reserved BYTES tensor
    "__pmckpt_meta__" of fixed capacity, so it commits atomically with the
    tensors.
Layers: consecutive tensors with the same module prefix (the name up to its
last '.' or '/') form one layer, numbered in order of first appearance
(module order), so the pipeline writes, and training waits, per module.
Everything here is checked before anything is written.
"""
import base64
import collections
import hashlib
import json
import marshal
import math
import operator
import struct

import torch

from . import _lib
from .errors import UnsupportedObjectError, CorruptError

META_NAME = "__pmckpt_meta__"
FORMAT = "pmckpt-python/1"
BLOB_MAGIC = b"PMCKMETA"
BLOB_HEAD = struct.Struct("<8sQQ")  # magic, JSON length, binary length

_TORCH_TO_PMCK = {
    torch.bool: _lib.DT_BOOL, torch.uint8: _lib.DT_U8, torch.int8: _lib.DT_I8,
    torch.int16: _lib.DT_I16, torch.float16: _lib.DT_F16, torch.bfloat16: _lib.DT_BF16,
    torch.int32: _lib.DT_I32, torch.float32: _lib.DT_F32, torch.int64: _lib.DT_I64,
    torch.float64: _lib.DT_F64,
}
for _tname, _code in (("uint16", _lib.DT_U16), ("uint32", _lib.DT_U32), ("uint64", _lib.DT_U64),
                      ("float8_e4m3fn", _lib.DT_F8_E4M3), ("float8_e5m2", _lib.DT_F8_E5M2)):
    if hasattr(torch, _tname):
        _TORCH_TO_PMCK[getattr(torch, _tname)] = _code
_PMCK_TO_TORCH = {v: k for k, v in _TORCH_TO_PMCK.items()}
_PMCK_TO_TORCH[_lib.DT_BYTES] = torch.uint8
# safetensors dtype names -> pmck codes (U8 is ambiguous with BYTES: decided by the tree)
_ST_TO_PMCK = {"BOOL": _lib.DT_BOOL, "U8": _lib.DT_U8, "I8": _lib.DT_I8, "I16": _lib.DT_I16,
               "U16": _lib.DT_U16, "F16": _lib.DT_F16, "BF16": _lib.DT_BF16, "I32": _lib.DT_I32,
               "U32": _lib.DT_U32, "F32": _lib.DT_F32, "I64": _lib.DT_I64, "U64": _lib.DT_U64,
               "F64": _lib.DT_F64, "F8_E4M3": _lib.DT_F8_E4M3, "F8_E5M2": _lib.DT_F8_E5M2}


class RawJSON(str):
    """JSON text, put into a document as it is by make_blob."""


_quote = json.encoder.encode_basestring_ascii  # a str as a JSON string literal (json.dumps's)
_DICTS = ("dicts",)  # a Flattener memo's key for its containers (key paths are strings)
_CONTAINERS = (dict, collections.OrderedDict, list, tuple)  # those a memo remembers
# The dict memo's key of the state's top dict: its key path, "", is also that of a dict
# at key "" in it (whose tensors' paths begin with "/")
_TOP = ("top",)


# Read over every tensor of a replayed container at once, in C (map): _tensors_as_then
# (compared by identity: a metaclass's __eq__ and __hash__ could make another type pass)
_TENSOR_TYPE_IDS = frozenset(map(id, (torch.Tensor, torch.nn.Parameter)))
# (shape, dtype, device, layout, requires_grad): one tuple a tensor, in one pass
_properties = operator.attrgetter("shape", "dtype", "device", "layout", "requires_grad")


def _blob(v):
    """marshal's bytes of container v (its items' if an OrderedDict), or None if
    marshal refuses them.  Version 2: no references and no interning flags
    (both from version 3), so equal values give equal bytes, and floats as
    their 8 bytes (-0.0 is not 0.0; NaNs of other payloads differ, which only
    makes a memo miss).  CPython's marshal writes only values of its types,
    exactly (a bool is not an int, a list not a tuple; an OrderedDict or any
    other subclass is refused), but any bytes-like object (a numpy array, a
    bytearray) as bytes: a blob is made (_remember) only for containers holding
    strings, ints, floats, bools, None and such containers alone, so bytes equal
    to one are the same values of the same types."""
    try:
        return marshal.dumps(list(v.items()) if type(v) is collections.OrderedDict else v, 2)
    except ValueError:
        return None


def _checked_later(step):
    """Sort key of a _Memo's plan: the containers with a blob first."""
    cm = step[0]
    return cm is None or cm.blob is None


def _plan(slots):
    """A _Memo's plan of its slots ((position, container's _Memo or None), in
    order): (container's _Memo, position, None) for a container, (None,
    position, None) for a tensor alone, (None, None, itemgetter) for a run of
    tensors (itemgetter(values) gives them in order); those of containers with
    a blob first (one marshal each: they fail first when something changed, a
    learning rate, before any tensor is read)."""
    plan, run = [], []
    for pos, cm in slots + ((None, False),):  # a last container: the last run ends
        if cm is None:
            run.append(pos)
            continue
        if len(run) == 1:
            plan.append((None, run[0], None))
        elif run:
            plan.append((None, None, operator.itemgetter(*run)))
        run = []
        if cm is not False:
            plan.append((cm, pos, None))
    return tuple(sorted(plan, key=_checked_later))


def _gather(v, m, found):
    """Whether container v has the structure memo m says (see
    Flattener._replay): the same type, keys (of the same types; a sequence:
    the same length), equal other values, and so for the containers under it
    and its _metadata; appends the objects where m had tensors, in order, to
    `found` (they are checked, all at once, by _tensors_as_then)."""
    if type(v) is not m.type:
        return False
    blob = m.blob
    if blob is not None:  # no tensors under it, no _metadata then
        return _blob(v) == blob and (m.type is not collections.OrderedDict or
                                     not isinstance(getattr(v, "_metadata", None), dict))
    if m.keys is None:  # a list or a tuple
        values = v
        if len(v) != m.size:
            return False
    else:
        now = tuple(v)
        # equal keys of other types (True == 1 == 1.0) are written otherwise
        # (the types first, by identity as far as both go: a key that is a tensor is not
        # compared, == is elementwise; the tuples' == then tells the lengths apart)
        if not all(map(operator.is_, map(type, now), m.key_types)) or now != m.keys:
            return False
        values = tuple(v.values())
    for pos, tx, x in m.atoms:
        y = values[pos]
        if type(y) is not tx or y != x:
            return False
    for cm, pos, run in m.plan:
        if cm is not None:
            if not _gather(values[pos], cm, found):
                return False
        elif run is None:
            found.append(values[pos])
        else:
            found += run(values)
    mm = m.md
    if mm is None:
        # v's _metadata was not a dict then (a plain dict has none)
        return m.type is not collections.OrderedDict or \
            not isinstance(getattr(v, "_metadata", None), dict)
    md = getattr(v, "_metadata", None)
    return isinstance(md, dict) and _gather(md, mm, found)


def _tensors_as_then(found, m):
    """(data_ptr()s, keys as in Flattener._alias) of the objects of `found` if
    each is a dense tensor (a Parameter or a plain one) not requiring grad,
    with the shape, strides, dtype and device of _Memo m's tensor at its
    position (m.expected); else None.  Their properties are read over all of
    them at once, in C (map), one pass for the attributes, one each for
    stride() and data_ptr(): this is the hot path of an encode (the ~1170
    tensors of an AdamW state, a step's gradients).  (A remembered container
    holds no tensor requiring grad: _remember takes only the caller's own
    tensors, which _tensor detaches when they do; one that does now is walked
    afresh.)"""
    if not _TENSOR_TYPE_IDS.issuperset(map(id, map(type, found))):
        return None
    properties, strides, columns = m.expected
    try:
        if list(map(_properties, found)) != properties or \
                list(map(torch.Tensor.stride, found)) != strides:
            return None
        ptrs = list(map(torch.Tensor.data_ptr, found))
    except RuntimeError:  # no storage, no strides (nested)
        return None
    return ptrs, list(zip(ptrs, *columns))


def _json(v):
    return json.dumps(v, separators=(",", ":"), allow_nan=False)


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def torch_dtype(name):
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise CorruptError(f"unknown torch dtype '{name}' in the checkpoint's metadata")
    return dt


def module_prefix(name):
    """'model/fc1.weight' -> 'model/fc1'; 'optim/state/3/exp_avg' -> 'optim/state/3'."""
    i = max(name.rfind("/"), name.rfind("."))
    return name[:i] if i > 0 else name


def layers_of(prefixes):
    """Layer of each module prefix: consecutive equal ones share one."""
    layers, prev, layer = [], None, -1
    for p in prefixes:
        if p != prev:
            layer += 1
            prev = p
        layers.append(layer)
    return layers


def assign_layers(names):
    """Layer of each name: consecutive names with the same module prefix share one."""
    return layers_of(module_prefix(n) for n in names)


def entry_layers(entries):
    """Each entry's layer (assign_layers of their names, from their prefixes)."""
    return layers_of([e.prefix for e in entries])


class Entry:
    """How one store tensor is declared: its name, store dtype and shape.  Not
    changed once made, so that a Flattener memo hands the same Entry to the
    next encode of an unchanged tensor (no object made per tensor and save);
    the tensor itself, and where its bytes come from, are the Flattener's
    (tensors, srcs: one of each per entry)."""
    __slots__ = ("name", "qname", "code", "shape", "nbytes", "zero_copy", "prefix",
                 "info_json")

    def __init__(self, name, qname, code, shape, nbytes, zero_copy, prefix, info_json):
        self.name = name
        self.qname = qname        # the name as a JSON string literal
        self.code = code          # pmck dtype
        self.shape = shape        # store shape (a tuple)
        self.nbytes = nbytes      # its bytes in the store
        self.zero_copy = zero_copy  # written from the tensor's own memory (not a copy)
        self.prefix = prefix      # module_prefix(name): its layer's key
        # '"name":{...}' (JSON text): what the tree needs beyond dtype and shape (the
        # device, strides, raw dtype, numpy), or None when nothing
        self.info_json = info_json


def dense_permutation(t):
    """A permutation p with t.permute(p) contiguous (t non-overlapping and dense), or None."""
    if t.is_contiguous():
        return list(range(t.dim()))
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.size(d)))
    p = t.permute(order)
    return order if p.is_contiguous() else None


def _short_name(base, taken):
    """(a store name for key path `base`: < PMCK_NAME_MAX bytes, unique among `taken`,
    not the meta name; whether it is the path's own, without a '#k' to make it unique)."""
    name = base or "_"
    if len(name.encode()) >= _lib.PMCK_NAME_MAX - 8 or name == META_NAME:
        h = hashlib.sha1(base.encode()).hexdigest()[:16]
        cut = name.encode()[:90].decode("utf-8", "ignore")
        name = f"{cut}~{h}"
    k, cand = 1, name
    while cand in taken:
        cand = f"{name}#{k}"
        k += 1
    return cand, k == 1


class _Memo:
    """What an encode remembers of a container it wrote (a dict, an
    OrderedDict, a list or a tuple), for the next encode to write an
    unchanged one again without walking it (Flattener._remember,
    Flattener._replay).  It holds keys, values that are ints, strings, bools
    or None, the tensors' declarations, the text and, for a container without
    tensors, its marshal bytes: no reference to the state's tensors or
    containers."""
    __slots__ = ("type", "keys", "key_types", "size", "atoms", "plan", "md", "blob", "text",
                 "entries", "containers", "tensor_memos", "where", "_names", "_qnames", "_cuda",
                 "_expected")

    def __init__(self, v, atoms, slots, md, blob, text, entries, containers, tensor_memos,
                 where):
        self.type = type(v)
        if isinstance(v, dict):
            self.keys = tuple(v)
            self.key_types = tuple(map(type, self.keys))
        else:  # a list or a tuple: its length
            self.keys = self.key_types = None
        self.size = len(v)
        # the values that are neither tensors nor containers: ((position, type, value), ...)
        self.atoms = tuple(atoms)
        # where its tensors and containers are: _plan of slots, ((position, None) for a
        # tensor, (position, the container's _Memo)), in order
        self.plan = _plan(tuple(slots))
        self.md = md  # the _Memo of an OrderedDict's _metadata dict, or None
        # _blob(v) of a container without tensors, or None: what it holds is then
        # checked in one comparison (and it may hold floats, which atoms may not)
        self.blob = blob
        self.text = text
        self.entries = entries  # every entry under v, in order (a tuple)
        self.containers = tuple(containers)  # (key path, _Memo) of the containers under v
        self.tensor_memos = tuple(tensor_memos)  # (key path, _tensor's memo) of its tensors
        self.where = where
        # made when first replayed: a container walked at every encode (the state
        # itself, most often) is remembered at every encode, and never replayed
        self._names = self._qnames = self._expected = None
        self._cuda = False

    @property
    def names(self):
        """{name: Entry} of the entries under v."""
        if self._names is None:
            self._names = {e.name: e for e in self.entries}
        return self._names

    @property
    def qnames(self):
        """The entries' names as JSON string literals, in order."""
        if self._qnames is None:
            self._qnames = tuple(e.qname for e in self.entries)
        return self._qnames

    @property
    def expected(self):
        """What the tensors under v were, in order (their entries'), as
        _tensors_as_then reads them: ([(shape, dtype, device, strided, False),
        ...], [strides, ...], (shapes, strides, dtypes, devices)): the columns
        of their keys but the address."""
        if self._expected is None:
            keys = [tm[0] for _, tm in self.tensor_memos]
            _, shapes, strides, dtypes, devices = map(list, zip(*keys)) if keys else [[]] * 5
            self._expected = ([(k[1], k[3], k[4], torch.strided, False) for k in keys],
                              strides, (shapes, strides, dtypes, devices))
        return self._expected

    @property
    def cuda_device(self):
        """The device of the first CUDA tensor under v, or None."""
        if self._cuda is False:
            self._cuda = next((tm[0][4] for _, tm in self.tensor_memos if tm[2]), None)
        return self._cuda


class Flattener:
    """Encodes one state_dict: the JSON tree and the list of store tensors.

    It runs on the training thread at every save_async, over every key and
    tensor of the state (a GPT-2 medium with AdamW: ~4500 values, 1174
    tensors), so the walk is kept lean: the common types are dispatched on
    their exact type, the key path is one list pushed and popped (joined only
    for a tensor's name or an error), and each tensor's properties are read
    once.

    memo: the previous encode's self.memo (a store passes its last save's).
    A dense tensor found at the same key path with the same shape, strides,
    dtype and device as then (at any address) is declared as then, without
    the checks and the naming: a training loop saves the same tensors every
    time, and gradients of the same shapes.  And a container (a dict, an
    OrderedDict, a list or a tuple) at the same key path, of the same type,
    with the same keys (of the same types; a sequence: the same length), its
    tensors declared as then (the same checks, and none the same tensor as
    another: a tie), its other values equal ints, strings, bools or None, or
    containers that pass the same checks, and so its _metadata, is written
    as then without walking it (_replay): a module's state_dict() (tensors,
    and a _metadata of the modules' dicts), an optimizer's state (AdamW: a
    dict per parameter of step, exp_avg and exp_avg_sq), a parameter group's
    list of parameter indices, a list of a step's gradients (new tensors of
    the same shapes) each as one.  A container with no tensor under it is
    checked by comparing its marshal bytes with then's (_blob), and may hold
    floats too (a parameter group, a scheduler's lists).  A memo holds no reference to the state's
    tensors or containers: only their keys (the addresses, shapes, ...) and
    text (_Memo).  A memo is only read; each encode makes a new self.memo."""

    def __init__(self, memo=None):
        self.entries = []
        self.tensors = []  # each entry's tensor, the caller's (for waits on its memory)
        self.srcs = []  # each entry's source: a tensor whose memory holds the bytes, dense
        # each entry's tensor's data_ptr() as the encode read it (0 for an empty one), so
        # that a save reads no tensor's address twice
        self.ptrs = []
        self.staged = False  # stage_cuda() made host copies of the CUDA tensors
        self.by_name = {}
        self.cuda_device = None  # the device of the first CUDA tensor met, if any
        # key path -> (key, Entry, on CUDA?) of the tensors there
        self.memo = {}
        self._memo = memo or {}
        # key path -> the _Memo of the container there, if it can be written again as
        # it was (_remember, _replay)
        self._containers = self.memo[_DICTS] = {}
        self._containers_then = self._memo.get(_DICTS) or {}
        # id -> _Memo (or None: not rememberable) of each container written in this
        # encode (_remember of the container that holds it)
        self._written = {}
        self._alias = {}
        self._path = []
        self._np = None

    def _where(self):
        return "/".join(self._path) or "<root>"

    def stage_cuda(self):
        """Points the sources of CUDA tensors at host copies of them (made now):
        for a library without the GPU path.  They are no longer zero copy
        (self.staged)."""
        srcs = self.srcs
        for i, src in enumerate(srcs):
            if src.device.type == "cuda":
                srcs[i] = src.to("cpu")
                self.staged = True

    def _tensor(self, t, numpy=False):
        """Declares tensor t (once: a view of the same bytes again is the same
        entry); returns its name as a JSON string literal."""
        tp = type(t)
        path = "/".join(self._path)
        m = None
        if self._memo and not numpy and (tp is torch.Tensor or tp is torch.nn.Parameter) and \
                t.layout is torch.strided:
            m = self._memo.get(path)
        if m is None:
            return self._new_tensor(t, numpy, path)
        # Declared as in the memo's save if it has the same shape, strides, dtype and
        # device as then (the memo holds only dense, contiguous, non-empty tensors,
        # checked then), wherever its memory is now: a gradient is new memory at
        # each step, and its declaration the same.
        if t.requires_grad:
            t = t.detach()
        try:
            key = (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)
        except RuntimeError:  # no storage, no strides (nested): _new_tensor says why
            return self._new_tensor(t, numpy, path)
        then, e, cuda = m
        if key[1:] != then[1:] or e.name in self.by_name:
            return self._new_tensor(t, numpy, path)
        alias = self._alias.get(key)
        if alias is not None:
            return alias
        if cuda and self.cuda_device is None:
            self.cuda_device = key[4]
        self.entries.append(e)
        self.tensors.append(t)
        self.srcs.append(t)
        self.ptrs.append(key[0])
        self.by_name[e.name] = e
        self._alias[key] = e.qname
        self.memo[path] = m if key[0] == then[0] else (key, e, cuda)
        return e.qname

    def _new_tensor(self, t, numpy, path):
        """_tensor without the memo: checked, named after its key path `path`."""
        dev = t.device
        devtype = dev.type
        if t.layout != torch.strided or t.is_quantized or t.is_nested or devtype == "meta":
            raise UnsupportedObjectError(
                f"state_dict entry '{self._where()}': {t.layout} / quantized / nested / meta "
                "tensors cannot be saved (dense tensors only)")
        if devtype != "cpu" and devtype != "cuda":
            raise UnsupportedObjectError(
                f"state_dict entry '{self._where()}': tensors on {dev} cannot be saved "
                "(CPU or CUDA only)")
        if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            raise UnsupportedObjectError(
                f"state_dict entry '{self._where()}': tensor subclass {type(t).__qualname__} "
                "(DTensor, ShardedTensor, ...) cannot be saved by Store.save: use the DCP "
                "integration (pmckpt.dcp) for distributed tensors")
        if t.requires_grad:
            t = t.detach()  # state_dict()'s tensors are detached already: skip the call
        numel = t.numel()
        shape = t.shape
        stride = t.stride()
        # Views of the same bytes as the same dtype are one store tensor (its name twice).
        key = (t.data_ptr() if numel else id(t), shape, stride, t.dtype, dev)
        if numel and key in self._alias:
            return self._alias[key]
        if devtype == "cuda" and self.cuda_device is None:
            self.cuda_device = dev
        name, own = _short_name(path, self.by_name)
        info = {}
        if numpy:
            info["np"] = 1
        if devtype == "cuda":
            info["dev"] = str(dev)
        # Contiguous (nearly every tensor of a model and its optimizer): src is t
        # itself, without dense_permutation's permute; it costs ~0.1 ms per tensor,
        # which on every save of a 358-tensor GPT-2 state was ~15 % of save_async.
        contiguous = t.is_contiguous()
        if contiguous:
            src, zero_copy = t, True
        else:
            perm = dense_permutation(t)
            zero_copy = perm is not None
            if perm is None:
                src = t.contiguous()   # overlapping or holey view: its elements, packed (a copy)
            else:
                src = t.permute(perm)  # same memory, a contiguous view of it
                if perm != list(range(t.dim())):
                    info["shape"] = list(shape)  # the store holds the permuted (dense) shape
                    info["stride"] = list(stride)
            shape = tuple(src.shape)
        code = _TORCH_TO_PMCK.get(t.dtype)
        if code is None or len(shape) > _lib.PMCK_MAX_DIMS:
            # no store dtype for it (complex, ...) or too many dims: opaque bytes
            info["dtype"] = dtype_name(t.dtype)
            info["shape"] = list(t.shape)
            code = _lib.DT_BYTES
            shape = (src.numel() * src.element_size(),)
        qname = _quote(name)
        e = Entry(name, qname, code, tuple(shape), src.numel() * src.element_size(), zero_copy,
                  module_prefix(name), qname + ":" + _json(info) if info else None)
        self.entries.append(e)
        self.tensors.append(t)
        self.srcs.append(src)
        self.ptrs.append(key[0] if numel else 0)
        self.by_name[name] = e
        self._alias[key] = qname
        # Remembered only under the path's own name: two tensors whose key paths read
        # the same ({"a/b": x, "a": {"b": y}}) are told apart by their order, which the
        # memo (by path) does not keep, so the one named 'a/b#1' is named afresh
        if contiguous and numel and not numpy and own:
            self.memo[path] = (key, e, devtype == "cuda")
        return qname

    def tensors_json(self):
        """The JSON text of {name: {...}} for the entries that need more than dtype
        and shape (Entry.info_json)."""
        return RawJSON("{" + ",".join([e.info_json for e in self.entries if e.info_json]) + "}")

    def encode(self, v):
        """The JSON text of v's tree (RawJSON); its tensors become self.entries,
        in order.  The text is written as the walk goes, without a tree of
        Python objects first: what json.loads(text) gives is the tree
        (Decoder's input)."""
        self._np = _numpy()
        self._path = []
        self._out = []
        self._enc(v)
        text, self._out = "".join(self._out), None
        return RawJSON(text)

    def _enc(self, v):
        out = self._out
        tp = type(v)  # the common types first, on their exact type
        if tp is torch.Tensor or tp is torch.nn.Parameter:
            out.append('{"T":' + self._tensor(v) + "}")
        elif tp is dict or tp is collections.OrderedDict:
            self._dict(v)
        elif tp is str:
            out.append(_quote(v))
        elif tp is int:
            out.append(int.__repr__(v))
        elif tp is bool:
            out.append("true" if v else "false")
        elif v is None:
            out.append("null")
        elif tp is float:
            out.append(float.__repr__(v) if math.isfinite(v) else _json({"f": repr(v)}))
        elif tp is list:
            out.append('{"l":')
            self._seq(v)
            out.append("}")
        else:
            self._other(v)

    def _dict(self, v):
        path, out, enc = self._path, self._out, self._enc
        tp = type(v)
        plain = tp is dict or tp is collections.OrderedDict
        if plain:
            mark = self._replay_here(v)
            if mark is None:
                return
        # Items as [key,value] pairs: '{"d":[' '[k1,' v1 '],[k2,' v2 ']]' (one append
        # per item besides the value's).
        sep = '{"od":[[' if isinstance(v, collections.OrderedDict) else '{"d":[['
        for k, x in v.items():
            if type(k) is str:
                out.append(sep + _quote(k) + ",")
            elif type(k) is int:  # an optimizer's state, by parameter index
                out.append(sep + int.__repr__(k) + ",")
            else:
                if not isinstance(k, (str, int, float, bool, type(None), tuple)):
                    raise UnsupportedObjectError(
                        f"state_dict entry '{self._where()}': key {k!r} of type "
                        f"{type(k).__qualname__} (keys: str, int, float, bool, None, tuple)")
                out.append(sep)
                path.append("<key>")
                enc(k)
                path.pop()
                out.append(",")
            sep = "],["
            path.append(str(k))
            enc(x)
            path.pop()
        out.append("]]" if sep == "],[" else sep[:-1] + "]")
        md = getattr(v, "_metadata", None)
        if isinstance(md, dict):
            out.append(',"m":')
            path.append("_metadata")
            enc(md)
            path.pop()
        out.append("}")
        if plain:
            self._written[id(v)] = self._remember(v, v.items(), *mark, md)

    def _replay_here(self, v):
        """Writes container v (a dict, an OrderedDict, a list or a tuple) as the
        last encode wrote the one at the same key path, if it can (_replay), and
        returns None; else returns (where, prefix, start, first) for the
        _remember of v after it is walked: v's key in the memo (_TOP for the
        state itself), what its items' key paths begin with, and where its text
        and its entries will begin."""
        path = self._path
        prefix = "/".join(path) + "/" if path else ""
        where = prefix[:-1] if path else _TOP
        m = self._containers_then.get(where)
        if m is not None and self._replay(v, where, m):
            return None
        return where, prefix, len(self._out), len(self.entries)

    def _remember(self, v, items, where, prefix, start, first, md):
        """The memo of container v (a dict, an OrderedDict with its _metadata md,
        a list or a tuple), just written from out[start:] with the entries from
        `first` on, for the next encode's _replay (items: v's (key, value)
        pairs, a sequence's (index, value); where: its key in the memo; prefix:
        what its items' key paths begin with); or None if v cannot be written
        again as it is: its keys must be strings or ints, and its values ints,
        strings, bools, None, tensors that each became a new entry remembered
        in self.memo (dense, contiguous, not seen before in this encode, not
        requiring grad), or containers remembered in this encode at their own
        key paths (an optimizer's state: one dict per parameter; a module's
        _metadata; a parameter group's list of parameter indices), and so must
        md be if it is a dict.  Floats too where v holds no tensors, nor
        containers that do, and no md: such a container is checked by its blob
        (its marshal bytes) alone (a parameter group: its learning rate)."""
        entries, tensors, written, memo = self.entries, self.tensors, self._written, self.memo
        atoms, slots, j = [], [], first
        containers, tensor_memos = [], []
        floats = False
        tree = md is None  # no tensors under v: it can have a blob
        for pos, (k, x) in enumerate(items):
            tk, tx = type(k), type(x)
            if tk is not str and tk is not int:
                return None
            if tx is torch.Tensor or tx is torch.nn.Parameter:
                tpath = prefix + str(k)  # _tensor's key path
                tm = memo.get(tpath)
                if j >= len(entries) or tensors[j] is not x or tm is None or \
                        tm[1] is not entries[j]:
                    return None  # an alias of an earlier tensor, or not remembered
                slots.append((pos, None))
                tensor_memos.append((tpath, tm))
                j += 1
                tree = False
            elif tx is int or tx is str or tx is bool or x is None:
                atoms.append((pos, tx, x))
            elif tx is float:
                floats = True  # -0.0 == 0.0, nan != nan: compared in the blob alone
            elif tx in _CONTAINERS:
                cm = written.get(id(x))
                if cm is None or cm.where != prefix + str(k):
                    return None  # not remembered (here, at this key path)
                slots.append((pos, cm))
                j += len(cm.entries)
                containers += cm.containers
                containers.append((cm.where, cm))
                tensor_memos += cm.tensor_memos
                tree = tree and cm.blob is not None
            else:
                return None  # everything else: walked each time
        mm = None
        if isinstance(md, dict):
            mm = written.get(id(md))
            if type(md) not in (dict, collections.OrderedDict) or mm is None or \
                    mm.where != prefix + "_metadata":
                return None
            j += len(mm.entries)
            containers += mm.containers
            containers.append((mm.where, mm))
            tensor_memos += mm.tensor_memos
        if j != len(entries):
            return None
        blob = _blob(v) if tree else None
        if floats and blob is None:
            return None
        m = _Memo(v, atoms, slots, mm, blob, "".join(self._out[start:]),
                  tuple(entries[first:j]), containers, tensor_memos, where)
        self._containers[where] = m
        return m

    def _replay(self, v, where, m):
        """Writes container v as the last encode wrote the one whose memo m (of
        _remember) it kept under `where` (v's key path, or _TOP), if v is of
        the same type, has the same keys in the same order (a sequence: the
        same length), equal non-tensor values, tensors each declared as then
        (the checks of _tensor's memo path: the same shape, strides, dtype and
        device, at any address), containers that can each be written again as
        then, and so has its _metadata; returns whether it did (else nothing
        was written)."""
        by_name, alias = self.by_name, self._alias
        found = []
        if not _gather(v, m, found):
            return False
        checked = _tensors_as_then(found, m)
        if checked is None:
            return False
        ptrs, keys = checked
        # (after the check: a memo made anew at each encode, of a container that
        # changes at each, has its names made only when it is written again)
        if m.entries and not by_name.keys().isdisjoint(m.names):
            return False  # a name taken by an earlier tensor: written afresh ('#1')
        # No tensor here is one declared before it (a tie, which a fresh encode writes as
        # that one's alias): checked for all at once, in C, each key hashed twice (a dict
        # keeps the hashes it merges)
        if keys:
            new = dict(zip(keys, m.qnames))
            if len(new) != len(keys) or not alias.keys().isdisjoint(new):
                return False
            alias.update(new)
        # Every tensor was checked before any is declared, and they are declared
        # without a call per tensor (the hot path: the ~1170 tensors of an AdamW
        # state a save, most under two dicts, and a step's gradients in a list).
        self.entries += m.entries
        self.tensors += found
        self.srcs += found
        self.ptrs += ptrs
        by_name.update(m.names)
        if self.cuda_device is None:
            self.cuda_device = m.cuda_device
        self.memo.update(m.tensor_memos)
        self._containers.update(m.containers)
        self._containers[where] = m
        self._written[id(v)] = m
        self._out.append(m.text)
        return True

    def _seq(self, v):
        """A JSON array of v's items.  A list or a tuple is written again as
        the last encode wrote it where it can be (_replay): a parameter
        group's parameter indices, a gradient record's gradients."""
        path, out = self._path, self._out
        tp = type(v)
        plain = tp is list or tp is tuple
        if plain:
            mark = self._replay_here(v)
            if mark is None:
                return
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            path.append(str(i))
            self._enc(x)
            path.pop()
        out.append("]")
        if plain:
            self._written[id(v)] = self._remember(v, enumerate(v), *mark, None)

    def _other(self, v):
        """Every other value, by isinstance (subclasses of the common types too)."""
        np, out = self._np, self._out
        if np is not None and isinstance(v, np.generic):  # before float: np.float64 is one
            item = v.item()
            if isinstance(item, (bool, int, float)):
                out.append(_json({"n": [v.dtype.str, item if not isinstance(item, float) or
                                        math.isfinite(item) else repr(item)]}))
                return
        if v is None or isinstance(v, (bool, str)):
            out.append(_json(v))
        elif isinstance(v, int):
            out.append(int.__repr__(int(v)))
        elif isinstance(v, float):
            v = float(v)
            out.append(float.__repr__(v) if math.isfinite(v) else _json({"f": repr(v)}))
        elif isinstance(v, torch.Tensor):
            out.append('{"T":' + self._tensor(v) + "}")
        elif isinstance(v, dict):
            self._dict(v)
        elif isinstance(v, list):
            out.append('{"l":')
            self._seq(v)
            out.append("}")
        elif isinstance(v, torch.Size):
            out.append(_json({"S": list(v)}))
        elif isinstance(v, tuple) and type(v) is not tuple:
            raise UnsupportedObjectError(
                f"state_dict entry '{self._where()}': named tuple {type(v).__qualname__} "
                "cannot be saved (plain tuples can)")
        elif isinstance(v, tuple):
            out.append('{"t":')
            self._seq(v)
            out.append("}")
        elif isinstance(v, (bytes, bytearray)):
            out.append(_json({"b": base64.b64encode(bytes(v)).decode()}))
        elif isinstance(v, torch.dtype):
            out.append(_json({"dt": dtype_name(v)}))
        elif isinstance(v, torch.device):
            out.append(_json({"dev": str(v)}))
        elif np is not None and isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise UnsupportedObjectError(
                    f"state_dict entry '{self._where()}': numpy arrays of objects cannot be saved")
            t = torch.from_numpy(v if v.flags.c_contiguous and all(s >= 0 for s in v.strides)
                                 else np.ascontiguousarray(v))
            out.append('{"N":' + self._tensor(t, numpy=True) + "}")
        else:
            what = getattr(type(v), "__qualname__", type(v).__name__)
            raise UnsupportedObjectError(
                f"state_dict entry '{self._where()}': objects of type {what} cannot be saved "
                "(supported: tensors, numpy arrays, dict, list, tuple, str, int, float, bool, "
                "None, bytes, torch.dtype/Size/device)")


def _numpy():
    try:
        import numpy
        return numpy
    except ImportError:  # numpy is optional
        return None


_JSON_SCALARS = frozenset((type(None), bool, int, float, str))


class Decoder:
    """Rebuilds a state_dict from a tree, given a function name -> tensor.

    A load decodes the whole tree (~4500 values for GPT-2 medium with
    AdamW), so JSON's scalars, most of the values and keys, are passed
    through where their container is decoded, without a call each."""

    def __init__(self, tensor_of):
        self.tensor_of = tensor_of

    def decode(self, v):
        if type(v) in _JSON_SCALARS:
            return v
        if type(v) is not dict:
            raise CorruptError("malformed checkpoint metadata")
        if "T" in v:
            return self.tensor_of(v["T"])
        if "N" in v:
            return self.tensor_of(v["N"]).numpy()
        items = v.get("d")
        if items is None:
            items = v.get("od")
        scalars, dec = _JSON_SCALARS, self.decode
        if items is not None:
            d = collections.OrderedDict() if "od" in v else {}
            for k, val in items:
                d[k if type(k) in scalars else dec(k)] = val if type(val) in scalars else dec(val)
            if "m" in v:
                d._metadata = dec(v["m"])
            return d
        if "l" in v:
            return [i if type(i) in scalars else dec(i) for i in v["l"]]
        if "t" in v:
            return tuple(i if type(i) in scalars else dec(i) for i in v["t"])
        if "f" in v:
            return float(v["f"])
        if "b" in v:
            return base64.b64decode(v["b"])
        if "dt" in v:
            return torch_dtype(v["dt"])
        if "S" in v:
            return torch.Size(v["S"])
        if "dev" in v:
            return torch.device(v["dev"])
        if "n" in v:
            code, x = v["n"]
            return _numpy().dtype(code).type(float(x) if isinstance(x, str) else x)
        raise CorruptError(f"malformed checkpoint metadata ({sorted(v)})")


def tree_names(tree):
    """Tensor names of a tree in order of first appearance (= the store's declaration order)."""
    out, seen = [], set()

    def walk(v):
        if isinstance(v, dict):
            if "T" in v or "N" in v:
                n = v.get("T", v.get("N"))
                if n not in seen:
                    seen.add(n)
                    out.append(n)
                return
            for k, x in v.items():
                if k in ("d", "od"):
                    for key, val in x:
                        walk(key)
                        walk(val)
                elif k in ("l", "t"):
                    for i in x:
                        walk(i)
                elif k == "m":
                    walk(x)
    walk(tree)
    return out


def make_blob(doc, binary=b""):
    """The metadata blob of doc (a dict; values that are RawJSON go in as they are)."""
    raw = "".join(f",{_quote(k)}:{v}" for k, v in doc.items() if isinstance(v, RawJSON))
    text = _json({k: v for k, v in doc.items() if not isinstance(v, RawJSON)})
    if raw:
        text = "{" + raw[1:] + "}" if text == "{}" else text[:-1] + raw + "}"
    text = text.encode()
    return BLOB_HEAD.pack(BLOB_MAGIC, len(text), len(binary)) + text + binary


def blob_capacity(nbytes, minimum):
    """Capacity fixed at a store's first save: twice what is needed, rounded up to a power of two."""
    cap = 1 << max(12, (2 * nbytes - 1).bit_length())
    return max(cap, minimum)


def parse_blob(raw):
    """(JSON document, binary part) of a metadata blob (bytes-like)."""
    if len(raw) < BLOB_HEAD.size:
        raise CorruptError("checkpoint metadata truncated")
    magic, jlen, blen = BLOB_HEAD.unpack_from(raw, 0)
    if magic != BLOB_MAGIC or BLOB_HEAD.size + jlen + blen > len(raw):
        raise CorruptError("checkpoint metadata: bad header (not written by the pmckpt binding?)")
    doc = json.loads(bytes(raw[BLOB_HEAD.size:BLOB_HEAD.size + jlen]))
    binary = bytes(raw[BLOB_HEAD.size + jlen:BLOB_HEAD.size + jlen + blen])
    if doc.get("format") != FORMAT:
        raise CorruptError(f"checkpoint metadata of unknown format {doc.get('format')!r}")
    return doc, binary


class Layout:
    """The store layout of a prepared state: names, pmck dtypes, shapes, layers."""

    def __init__(self, rows):
        self.rows = rows  # [(name, code, shape, layer)]

    @classmethod
    def of(cls, entries, layers, capacity):
        """The layout of entries in layers (entry_layers(entries))."""
        last = layers[-1] + 1 if layers else 0
        rows = [(e.name, e.code, e.shape, layer) for e, layer in zip(entries, layers)]
        rows.append((META_NAME, _lib.DT_BYTES, (capacity,), last))
        return cls(rows)

    def descs(self):
        arr = (_lib.TensorDesc * len(self.rows))()
        self._keep = []
        for i, (name, code, shape, layer) in enumerate(self.rows):
            b = name.encode()
            self._keep.append(b)
            arr[i].name = b
            arr[i].dtype = code
            arr[i].ndim = len(shape)
            for d, s in enumerate(shape):
                arr[i].shape[d] = s
            arr[i].layer = layer
        return arr

    def capacity(self):
        return self.rows[-1][2][0]

    def difference(self, other):
        """A sentence naming the first difference from `other` (the store's), or None."""
        if self.rows == other.rows:
            return None  # every save of the same state: one comparison in C
        mine = {r[0]: r for r in self.rows}
        theirs = {r[0]: r for r in other.rows}
        for r in self.rows:
            o = theirs.get(r[0])
            if o is None:
                return f"the state_dict has tensor '{r[0]}', which the store does not"
            if r[0] == META_NAME:
                continue
            if o[1] != r[1] or o[2] != r[2]:
                return (f"tensor '{r[0]}': {_pmck_name(r[1])}{list(r[2])} in the state_dict, "
                        f"{_pmck_name(o[1])}{list(o[2])} in the store")
            if o[3] != r[3]:
                return f"tensor '{r[0]}': layer {r[3]} in the state_dict, {o[3]} in the store"
        for r in other.rows:
            if r[0] not in mine:
                return f"the store has tensor '{r[0]}', which the state_dict does not"
        if [r[0] for r in self.rows] != [r[0] for r in other.rows]:
            return "the tensors appear in another order"
        return None


def _pmck_name(code):
    n = _lib.lib.pmck_dtype_name(code)
    return "BYTES" if code == _lib.DT_BYTES else (n.decode() if n else str(code))
