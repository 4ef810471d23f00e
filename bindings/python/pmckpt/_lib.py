# SPDX-License-Identifier: BSD-3-Clause
"""ctypes declarations of libpmckpt (and the libpmalloc calls it needs).

Every function used is declared here with its argtypes and restype; the
structures mirror include/pmckpt.h and include/pmalloc.h field for field.
Calls release the GIL (ctypes.CDLL), so the writer threads of a pipeline and
blocking waits never hold up other Python threads.

Where the library is found, first match wins:
  1. $PMCKPT_LIBRARY (a path to libpmckpt.so.0);
  2. the development tree: <repo>/build/libpmckpt.so.0, relative to this file;
  3. ctypes.util.find_library("pmckpt"): an installed library (make install).
libpmckpt.so.0 finds libpmalloc.so.0 beside it (RUNPATH $ORIGIN); symbols of
both are reached through the one handle (dlsym searches the dependencies).
Namespace names ("ckpt0") are resolved by libpmalloc_ns.so.0 (pma_ns_dax_path),
which libpmckpt does not link: it is loaded optionally, from beside the
libpmckpt.so.0 found above, else by its soname; without it, namespace names
cannot be resolved (optional("pma_ns_dax_path") is None).
"""
import ctypes
import ctypes.util
import errno as _errno
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_int64, c_size_t,
                    c_uint, c_uint32, c_uint64, c_void_p)

from .errors import raise_for

PMCK_NAME_MAX = 128
PMCK_MAX_DIMS = 8
PMCK_HASH_CHUNK = 1 << 20
PMCK_SKIPPED = 1

PMA_REGION_CREATE = 1 << 0
PMA_REGION_NO_PREFAULT = 1 << 1
PMA_REGION_RDONLY = 1 << 2
PMCK_LOCAL_RDONLY = 1 << 0
PMCK_LOCAL_EXISTING = 1 << 1
PMCK_LOCAL_SHARED_DIR = 1 << 2
PMCK_COPYOUT_SHARED_DIR = 1 << 0
PMCK_COPYOUT_GROUP = 1 << 1

# enum pmck_dtype
DT_BYTES, DT_BOOL, DT_U8, DT_I8, DT_I16, DT_U16, DT_F16, DT_BF16, DT_I32, DT_U32, \
    DT_F32, DT_I64, DT_U64, DT_F64, DT_F8_E4M3, DT_F8_E5M2 = range(16)

# enum pmck_backend
BACKEND_NAMES = {0: "devdax", 1: "fsdax", 2: "ramdisk"}
# enum pmck_source
SOURCE_HOST, SOURCE_GPU_DIRECT, SOURCE_GPU_KERNEL, SOURCE_GPU_STAGED, SOURCE_GPU_SNAPSHOT = range(5)
# enum pmck_busy_policy
BUSY_WAIT, BUSY_SKIP = 0, 1
PIPELINE_VERIFY_SOURCES = 1  # PMCK_PIPELINE_VERIFY_SOURCES
PIPELINE_GPU_HASH = {"host": 1 << 1, "device": 1 << 2}  # PMCK_PIPELINE_GPU_HASH_HOST, _DEVICE
# enum pmck_tier
TIER_LOCAL, TIER_SHARED = 0, 1


class TensorDesc(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_uint32),
                ("shape", c_uint64 * PMCK_MAX_DIMS), ("layer", c_uint32)]


class TensorInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_uint32),
                ("shape", c_uint64 * PMCK_MAX_DIMS), ("layer", c_uint32),
                ("offset", c_uint64), ("nbytes", c_uint64)]


class Recovery(Structure):
    _fields_ = [("step", c_uint64), ("slot", c_uint), ("rejected", c_int),
                ("rejected_slot", c_uint), ("rejected_step", c_uint64),
                ("rejected_tensor", c_char * PMCK_NAME_MAX)]


class GivenChecksums(Structure):
    """struct pmck_given_checksums (pmck_store_recover_given)."""
    _fields_ = [("slot", c_uint), ("step", c_uint64), ("n", c_size_t),
                ("idx", POINTER(c_size_t)), ("csum", POINTER(c_uint64)),
                ("fill", c_void_p), ("arg", c_void_p)]


class PipelineOpts(Structure):
    _fields_ = [("threads", c_uint), ("numa_node", c_int), ("on_busy", c_int),
                ("source", c_int), ("cuda_device", c_int), ("copyout", c_void_p),
                ("global_", c_void_p), ("on_commit", c_void_p), ("on_commit_arg", c_void_p),
                ("flags", c_uint), ("cuda_stream", c_void_p), ("snapshot_on_wait", c_size_t)]


class PipelineStats(Structure):
    _fields_ = [("committed", c_uint64), ("skipped", c_uint64), ("last_step", c_uint64),
                ("wait_ns", c_uint64), ("snapshot_on_wait_bytes", c_uint64),
                ("snapshot_on_wait_pieces", c_uint64), ("writer_busy_ns", c_uint64),
                ("writer_copy_wait_ns", c_uint64), ("writer_tail_ns", c_uint64),
                ("writer_hash_wait_ns", c_uint64), ("commit_ns", c_uint64)]


class LocalOpts(Structure):
    _fields_ = [("pm_path", c_char_p), ("ramdisk_dir", c_char_p), ("store_name", c_char_p),
                ("descs", POINTER(TensorDesc)), ("ndescs", c_size_t), ("pm_size", c_uint64),
                ("flags", c_uint)]


class Local(Structure):
    _fields_ = [("region", c_void_p), ("pool", c_void_p), ("store", c_void_p),
                ("backend", c_int), ("path", c_char * 4096), ("description", c_char * 4608),
                ("created", c_int), ("made_file", c_int)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint64, c_uint64, c_uint64)


class CopyoutOpts(Structure):
    # marker_timeout_ms sits where older headers had padding: 0 means the default
    # in both, so this layout fits libraries built from either.
    _fields_ = [("dir", c_char_p), ("keep", c_uint), ("rank", c_uint), ("world_size", c_uint),
                ("marker_timeout_ms", c_uint), ("progress", c_void_p), ("progress_arg", c_void_p),
                ("on_done", c_void_p), ("on_done_arg", c_void_p), ("flags", c_uint)]


class CopyoutStats(Structure):
    _fields_ = [("copied", c_uint64), ("bytes", c_uint64), ("deleted", c_uint64),
                ("last_step", c_uint64), ("busy_ns", c_uint64), ("failed", c_uint64)]


COPYOUT_WAIT = 1


class CopyoutFailure(Structure):
    _fields_ = [("error", c_int), ("step", c_uint64), ("needed", c_uint64),
                ("available", c_uint64), ("path", c_char * 4096), ("message", c_char * 1024)]


class FileInfo(Structure):
    _fields_ = [("step", c_uint64), ("rank", c_uint), ("world_size", c_uint),
                ("ntensors", c_uint64), ("data_bytes", c_uint64), ("has_checksums", c_int)]


class TierRecovery(Structure):
    _fields_ = [("step", c_uint64), ("tier", c_int), ("path", c_char * 4096),
                ("reason", c_char * 512)]


# struct pmck_collectives: callbacks the library calls (distributed.py fills them)
ALLREDUCE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_uint64), c_int)
BARRIER_FN = ctypes.CFUNCTYPE(c_int, c_void_p)
IALLREDUCE_START_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint64, c_int, POINTER(c_void_p))
IALLREDUCE_TEST_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_int, POINTER(c_int),
                                      POINTER(c_uint64))
ALLGATHER_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint64, POINTER(c_uint64))
SENDRECV_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint, c_void_p, c_size_t, c_uint, c_void_p,
                               c_size_t)
REDUCE_MIN, REDUCE_MAX = 0, 1


class Collectives(Structure):
    _fields_ = [("ctx", c_void_p), ("rank", c_uint), ("size", c_uint),
                ("allreduce_u64", ALLREDUCE_FN), ("barrier", BARRIER_FN),
                ("iallreduce_u64_start", IALLREDUCE_START_FN),
                ("iallreduce_u64_test", IALLREDUCE_TEST_FN),
                # partner copies (read by pmck_partner_new alone)
                ("allgather_u64", ALLGATHER_FN), ("sendrecv", SENDRECV_FN)]


# struct pmck_partner_opts, struct pmck_partner_stats
class PartnerOpts(Structure):
    _fields_ = [("node", c_uint64), ("ramdisk_dir", c_char_p), ("pm_dir", c_char_p),
                ("store_name", c_char_p), ("every", c_uint), ("keep", c_uint), ("flags", c_uint)]


class PartnerStats(Structure):
    _fields_ = [("rounds", c_uint64), ("sent", c_uint64), ("confirmed_step", c_int64),
                ("received", c_uint64), ("held_step", c_int64), ("rejected", c_uint64),
                ("bytes_sent", c_uint64), ("bytes_received", c_uint64), ("busy_ns", c_uint64),
                ("target", c_uint), ("source", c_uint), ("self_step", c_int64)]


PARTNER_KEEP_MAX = 8


class GlobalRecovery(Structure):
    _fields_ = [("step", c_uint64), ("tier", c_int), ("reason", c_char * 512)]


# struct pmck_rejection (pmck_store_rejections); the recovery structs above are unchanged
REASON_MAX = 384


class Rejection(Structure):
    _fields_ = [("rank", c_uint), ("tier", c_int), ("step", c_uint64), ("quarantined", c_int),
                ("reason", c_char * REASON_MAX)]


vpp = POINTER(c_void_p)

# name: (restype, argtypes).  Optional ones (newer than the first release) are
# looked up with optional().
_PROTOS = {
    "pmck_errormsg": (c_char_p, []),
    "pmck_dtype_size": (c_size_t, [c_int]),
    "pmck_dtype_name": (c_char_p, [c_int]),
    # regions and pools (libpmalloc)
    "pma_region_open": (c_int, [c_char_p, c_size_t, c_uint, vpp]),
    "pma_region_close": (None, [vpp]),
    "pma_region_prefault": (None, [c_void_p]),
    "pma_region_addr": (c_void_p, [c_void_p]),
    "pma_region_size": (c_size_t, [c_void_p]),
    "pma_region_granularity": (c_int, [c_void_p]),
    "pma_region_kind": (c_int, [c_void_p]),
    "pma_pool_open": (c_int, [c_void_p, vpp]),
    "pma_pool_close": (None, [vpp]),
    "pma_lookup": (c_int, [c_void_p, c_char_p, vpp, POINTER(c_size_t)]),
    "pma_pool_foreach": (c_int, [c_void_p, c_void_p, c_void_p]),
    # stores
    "pmck_store_open": (c_int, [c_void_p, c_char_p, vpp]),
    "pmck_store_open_or_create": (c_int, [c_void_p, c_char_p, POINTER(TensorDesc), c_size_t, vpp]),
    "pmck_store_close": (None, [vpp]),
    "pmck_store_destroy": (c_int, [c_void_p, c_char_p]),
    "pmck_store_ntensors": (c_size_t, [c_void_p]),
    "pmck_store_data_size": (c_uint64, [c_void_p]),
    "pmck_store_tensor_bytes": (c_uint64, [c_void_p]),
    "pmck_store_layout_hash": (c_uint64, [c_void_p]),
    "pmck_store_region": (c_void_p, [c_void_p]),
    "pmck_store_tensor": (c_int, [c_void_p, c_size_t, POINTER(TensorInfo)]),
    "pmck_store_find": (c_int64, [c_void_p, c_char_p]),
    "pmck_store_begin": (c_int, [c_void_p, c_uint64, vpp]),
    "pmck_ckpt_write": (c_int, [c_void_p, c_size_t, c_void_p]),
    "pmck_ckpt_write_all": (c_int, [c_void_p, POINTER(c_void_p), c_uint]),
    "pmck_ckpt_commit": (c_int, [c_void_p]),
    "pmck_ckpt_abort": (None, [c_void_p]),
    "pmck_store_recover": (c_int, [c_void_p, POINTER(Recovery)]),
    "pmck_store_tensor_data": (c_void_p, [c_void_p, c_size_t]),
    "pmck_store_read": (c_int, [c_void_p, c_size_t, c_void_p]),
    # pipeline
    "pmck_pipeline_new": (c_int, [c_void_p, POINTER(PipelineOpts), vpp]),
    "pmck_pipeline_delete": (None, [vpp]),
    "pmck_pipeline_begin": (c_int, [c_void_p, c_uint64]),
    "pmck_pipeline_put_layer": (c_int, [c_void_p, c_uint32, POINTER(c_void_p)]),
    "pmck_pipeline_wait_layer": (c_int, [c_void_p, c_uint32]),
    "pmck_pipeline_wait": (c_int, [c_void_p]),
    "pmck_pipeline_busy": (c_int, [c_void_p]),
    "pmck_pipeline_stats": (None, [c_void_p, POINTER(PipelineStats)]),
    "pmck_gpu_available": (c_int, [c_int]),
    # local backend
    "pmck_local_open": (c_int, [POINTER(LocalOpts), POINTER(Local)]),
    "pmck_local_close": (None, [POINTER(Local)]),
    "pmck_local_default_dir": (c_int, [c_char_p, c_size_t]),
    "pmck_dir_check": (c_int, [c_char_p, c_uint]),
    # copy-out, safetensors, tiers
    "pmck_copyout_new": (c_int, [c_void_p, POINTER(CopyoutOpts), vpp]),
    "pmck_copyout_submit": (c_int, [c_void_p]),
    "pmck_copyout_wait": (c_int, [c_void_p]),
    "pmck_copyout_delete": (None, [vpp]),
    "pmck_copyout_stats": (None, [c_void_p, POINTER(CopyoutStats)]),
    "pmck_copyout_check": (c_int, [c_void_p, c_uint, POINTER(CopyoutFailure)]),
    "pmck_safetensors_write": (c_int, [c_void_p, c_char_p, c_uint, c_uint]),
    "pmck_safetensors_verify": (c_int, [c_char_p, POINTER(FileInfo)]),
    "pmck_safetensors_import": (c_int, [c_void_p, c_char_p, c_uint64]),
    "pmck_recover_tiers": (c_int, [c_void_p, c_char_p, c_uint, POINTER(TierRecovery)]),
    "pmck_tensor_checksum": (c_uint64, [c_void_p, c_uint64]),
    # multi-rank
    "pmck_global_new": (c_int, [c_void_p, POINTER(Collectives), vpp]),
    "pmck_global_delete": (None, [vpp]),
    "pmck_global_wait": (c_int, [c_void_p, POINTER(c_int64)]),
    "pmck_global_agreed": (c_int64, [c_void_p]),
    "pmck_global_recover": (c_int, [c_void_p, c_char_p, POINTER(GlobalRecovery)]),
    "pmck_store_discard_after": (c_int, [c_void_p, c_uint64]),
    "pmck_store_recover_step": (c_int, [c_void_p, c_uint64, POINTER(Recovery)]),
}

# Partner copies: a library older than them lacks these (Store(partner=...) then says so).
_PARTNER = {
    "pmck_partner_new": (c_int, [c_void_p, POINTER(Collectives), POINTER(PartnerOpts), vpp]),
    "pmck_partner_delete": (None, [vpp]),
    "pmck_partner_wait": (c_int, [c_void_p]),
    "pmck_partner_stats": (None, [c_void_p, POINTER(PartnerStats)]),
}

class BuildInfo(Structure):
    _fields_ = [("version", c_char_p), ("cuda", c_int), ("pmem2", c_char_p)]


_OPTIONAL = {
    "pmck_build_info": (None, [POINTER(BuildInfo)]),
    # resolves a devdax namespace name ("ckpt0") to /dev/daxX.Y (include/pmalloc_ns.h)
    "pma_ns_dax_path": (c_int, [c_char_p, c_int, c_char_p, c_size_t]),
    "pmck_store_slot_step": (c_int64, [c_void_p, c_uint]),
    "pmck_store_slot_tensor_data": (c_void_p, [c_void_p, c_uint, c_size_t]),
    # recovery that copies the checkpoint out as it verifies it (load into new host tensors)
    "pmck_store_recover_into": (c_int, [c_void_p, POINTER(c_void_p), POINTER(Recovery)]),
    # a load's copies verified where they landed: checksums given to recovery, computed
    # on the GPU (docs/gpu.md; a library without them: recovery hashes the region)
    "pmck_store_recover_given": (c_int, [c_void_p, POINTER(c_void_p), POINTER(GivenChecksums),
                                         POINTER(Recovery)]),
    "pmck_gpu_hasher_new": (c_int, [c_int, vpp]),
    "pmck_gpu_hasher_add": (c_int, [c_void_p, c_void_p, c_size_t, POINTER(c_void_p),
                                    POINTER(c_uint64)]),
    "pmck_gpu_hasher_reserve": (c_int, [c_void_p, c_size_t]),
    "pmck_gpu_hasher_wait": (c_int, [c_void_p, POINTER(c_uint64), c_size_t]),
    "pmck_gpu_hasher_delete": (None, [vpp]),
    # the candidates the last recovery rejected (a library without it reports none)
    "pmck_store_rejections": (POINTER(Rejection), [c_void_p, POINTER(c_size_t)]),
    # stream-ordered GPU copies (a library without them: the caller synchronises the device)
    "pmck_pipeline_put_layer_stream": (c_int, [c_void_p, c_uint32, POINTER(c_void_p), c_void_p]),
    "pmck_pipeline_wait_layer_stream": (c_int, [c_void_p, c_uint32, c_void_p]),
    "pmck_pipeline_wait_layers_stream": (c_int, [c_void_p, POINTER(c_uint32), c_size_t,
                                                 c_void_p]),
    # every layer of a checkpoint put in one call
    "pmck_pipeline_put_layers_stream": (c_int, [c_void_p, POINTER(c_uint32), c_size_t,
                                                POINTER(c_void_p), c_void_p]),
    **_PARTNER,
}


NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


def _candidates():
    """PMCKPT_LIBRARY if set; else the wheel's own copy (pmckpt/_native, make wheel), the
    build tree of a checkout, and an installed libpmckpt, in that order."""
    env = os.environ.get("PMCKPT_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(NATIVE, "libpmckpt.so.0")
    dev = os.path.normpath(os.path.join(here, "..", "..", "..", "build", "libpmckpt.so.0"))
    found = ctypes.util.find_library("pmckpt")
    return [p for p in (bundled if os.path.exists(bundled) else None,
                        dev if os.path.exists(dev) else None, found) if p]


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError("pmckpt: cannot load libpmckpt.so.0 (" + ("; ".join(tried) or
                      "not built: run make in the repository, install it with make install, "
                      "or set PMCKPT_LIBRARY") + ")")


def _load_ns(pmckpt_path):
    """libpmalloc_ns.so.0 beside libpmckpt.so.0 (by soname when that was found by
    name), or None: the library is optional."""
    here = os.path.dirname(pmckpt_path)
    try:
        return ctypes.CDLL(os.path.join(here, "libpmalloc_ns.so.0") if here else "libpmalloc_ns.so.0")
    except OSError:
        return None


lib, path = _load()
ns_lib = _load_ns(path)


def _symbol(name):
    """`name` from libpmckpt (and libpmalloc), else from libpmalloc_ns; None if neither has it."""
    for h in (lib, ns_lib):
        f = getattr(h, name, None) if h is not None else None
        if f is not None:
            return f
    return None


for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
for _name, (_res, _args) in _OPTIONAL.items():
    _f = _symbol(_name)
    if _f is not None:
        _f.restype = _res
        _f.argtypes = _args


def optional(name):
    """The function `name` if the libraries loaded have it, else None."""
    return _symbol(name) if name in _OPTIONAL else None


def errormsg():
    m = lib.pmck_errormsg()
    return m.decode("utf-8", "replace") if m else ""


def check(rc, what=None):
    """Raises the pmckpt.Error for a negative return code, with the library's message."""
    if rc < 0:
        msg = errormsg() or strerror(rc)
        raise_for(rc, f"{what}: {msg}" if what else msg)
    return rc


def default_ramdisk_dir():
    """The ramdisk directory of Store() without ramdisk: the user's own (pmck_local_default_dir)."""
    buf = ctypes.create_string_buffer(4096)
    check(lib.pmck_local_default_dir(buf, len(buf)))
    return buf.value.decode()


def strerror(rc):
    return os.strerror(-rc) if 0 < -rc < 4096 else f"error {rc}"


ENOENT = -_errno.ENOENT
EINVAL = -_errno.EINVAL
ENOMEM = -_errno.ENOMEM
ENOTSUP = -_errno.ENOTSUP
