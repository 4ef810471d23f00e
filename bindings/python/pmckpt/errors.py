# SPDX-License-Identifier: BSD-3-Clause
"""Exceptions: every failure of the C library becomes a pmckpt.Error carrying
the library's message (pmck_errormsg) and its code; the codes that callers
act on have their own subclasses."""
import errno as _errno

PMA_E_NOT_POOL = -100001
PMA_E_VERSION = -100002
PMA_E_CORRUPT = -100003
PMA_E_TRUNCATED = -100004
PMA_E_BUSY = -100005
PMA_E_UNSAFE = -100006
PMCK_E_NO_CHECKPOINT = -100101
PMCK_E_LAYOUT = -100102
PMCK_E_CORRUPT = -100103
PMCK_E_VERSION = -100104
PMCK_E_NONE_USABLE = -100105
PMCK_E_WORLD_SIZE = -100106
PMCK_E_SOURCE_CHANGED = -100120


class Error(Exception):
    """A pmckpt failure.  `code` is the library's return code (a negative errno
    value or a PMA_E_* / PMCK_E_* code; None for checks made in Python),
    `errno` the positive errno value when the code is one."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.errno = -code if code is not None and -4096 < code < 0 else None


class NoCheckpointError(Error):
    """Nothing was ever saved here: a fresh start (PMCK_E_NO_CHECKPOINT)."""


class CheckpointsUnusableError(Error):
    """Checkpoints exist but every one was rejected (PMCK_E_NONE_USABLE): data
    was lost.  A sibling of NoCheckpointError, not a subclass, so that code
    that starts from scratch on NoCheckpointError does not do so silently
    here."""


class WorldSizeError(Error):
    """The checkpoints were written by a job of another world size
    (PMCK_E_WORLD_SIZE); nothing was loaded or changed.  Resharding is left
    to the caller (torch.distributed.checkpoint, say)."""


class LayoutError(Error):
    """The store holds another layout than the state_dict (PMCK_E_LAYOUT), or
    was not written by this binding."""


class CorruptError(Error):
    """Store, pool or file fails its checks (PMCK_E_CORRUPT, PMA_E_CORRUPT, ...)."""


class NotAPoolError(CorruptError):
    """The device or file holds no pool but other data (PMA_E_NOT_POOL): it is
    never formatted behind the caller's back (pmckpt create --force does)."""


class TruncatedError(CorruptError):
    """The file is smaller than the pool it holds (PMA_E_TRUNCATED)."""


class VersionError(Error):
    """Written by an unsupported version (PMCK_E_VERSION, PMA_E_VERSION)."""


class UnsupportedObjectError(Error, TypeError):
    """The state_dict holds an object that cannot be saved (checked before
    anything is written)."""


class MetadataTooLargeError(Error, ValueError):
    """The non-tensor values do not fit the store's metadata capacity."""


class SourceChangedError(Error):
    """A tensor changed while its checkpoint was written (PMCK_E_SOURCE_CHANGED,
    with Store(verify_sources=True)): that checkpoint is not committed."""


class BusyError(Error):
    """A checkpoint is in flight (-EBUSY), or the store's pool file or device
    is open in another process or another Store of this process (PMA_E_BUSY:
    one writer at a time; the message names the path and the holder's pid)."""


class UnsafePathError(Error, PermissionError):
    """A file or directory another user could read or change (PMA_E_UNSAFE):
    a ramdisk or shared directory not owned by the caller, or writable by
    its group or others, a symbolic link in its place, or a pool file of
    another user's.  Nothing was written.  Store(sharing="group") accepts a
    directory shared on purpose (the files in it must still be the caller's)."""

    # Defined here so that OSError does not read (message, code) as (errno, strerror).
    def __init__(self, message, code=None):
        Error.__init__(self, message, code)


class CopyoutError(Error):
    """Copying a checkpoint to shared_dir failed (a full file system, say).  The
    local checkpoint is unaffected and later steps are still copied.  Raised
    once per failure, by the next save()/save_async() (before it starts
    anything), wait_copyout() or close().  `errno` is the cause (ENOSPC, ...),
    `path` the file or directory, `step` the step whose copy failed, and for a
    space failure `needed` / `available` the bytes the file needed and those
    free (else 0)."""

    def __init__(self, message, code=None, path=None, step=None, needed=0, available=0):
        super().__init__(message, code)
        self.path = path
        self.step = step
        self.needed = needed
        self.available = available


_BY_CODE = {
    PMCK_E_NO_CHECKPOINT: NoCheckpointError,
    PMCK_E_NONE_USABLE: CheckpointsUnusableError,
    PMCK_E_WORLD_SIZE: WorldSizeError,
    PMCK_E_LAYOUT: LayoutError,
    PMCK_E_CORRUPT: CorruptError,
    PMA_E_CORRUPT: CorruptError,
    PMA_E_TRUNCATED: TruncatedError,
    PMA_E_NOT_POOL: NotAPoolError,
    PMCK_E_VERSION: VersionError,
    PMA_E_VERSION: VersionError,
    -_errno.EBUSY: BusyError,
    PMCK_E_SOURCE_CHANGED: SourceChangedError,
    PMA_E_BUSY: BusyError,
    PMA_E_UNSAFE: UnsafePathError,
}


def error_for(code, message):
    return _BY_CODE.get(code, Error)(message, code)


def raise_for(code, message):
    raise error_for(code, message)
