# SPDX-License-Identifier: BSD-3-Clause
"""pmckpt: checkpoints of PyTorch state_dicts on persistent memory (or a ramdisk).

    store = pmckpt.Store("/dev/dax0.0")          # or Store(): /dev/shm/pmckpt-UID, 0700
    store.save(state_dict, step)                  # synchronous, durable on return
    h = store.save_async(state_dict, step)        # layer-wise, in the background
    state = store.load()                          # newest verified checkpoint

pmckpt.dcp has a StorageWriter/StorageReader pair for torch.distributed.checkpoint.
See docs/python.md.
"""
from .errors import (Error, NoCheckpointError, LayoutError, CorruptError, VersionError,
                     UnsupportedObjectError, MetadataTooLargeError, BusyError,
                     NotAPoolError, TruncatedError, SourceChangedError,
                     CheckpointsUnusableError, WorldSizeError, CopyoutError, UnsafePathError)
from .store import Store, SaveHandle, RecoveryWarning, GpuPathWarning, GpuMemoryWarning
from .hooks import hook_optimizer, hook_module
from .gradlog import GradientLog, GradientLogHandle
from .safetensors import load_file as load_safetensors, verify as verify_safetensors
from . import _lib

__version__ = "0.1.0"
library_path = _lib.path


def gpu_available(device=0):
    """True if this libpmckpt can write from CUDA device `device` (built with
    CUDA, driver and device present); the reason otherwise is in gpu_unavailable_reason()."""
    return _lib.lib.pmck_gpu_available(device) == 0


def gpu_unavailable_reason(device=0):
    return None if _lib.lib.pmck_gpu_available(device) == 0 else _lib.errormsg()


__all__ = ["Store", "SaveHandle", "Error", "NoCheckpointError", "CheckpointsUnusableError",
           "WorldSizeError", "LayoutError", "CorruptError",
           "VersionError", "UnsupportedObjectError", "MetadataTooLargeError", "BusyError",
           "NotAPoolError", "TruncatedError", "SourceChangedError", "CopyoutError",
           "UnsafePathError",
           "RecoveryWarning", "GpuPathWarning", "GpuMemoryWarning", "hook_optimizer", "hook_module",
           "GradientLog", "GradientLogHandle",
           "load_safetensors",
           "verify_safetensors", "gpu_available", "gpu_unavailable_reason", "library_path"]
