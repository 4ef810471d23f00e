# SPDX-License-Identifier: BSD-3-Clause
"""The binding's side of a private ramdisk tier (issue #32), run as root with user
nobody as the attacker: Store(ramdisk="/dev/shm", name="victim").save() on a file
nobody planted is refused (the directory, then, shared on purpose, the file), as
is a planted link; what was planted is unchanged; a shared_dir of nobody's is
refused for saving and for loading; the modes of a save and a copy-out, private
and with sharing="group".  The C test tests/local_private.c covers the library's
side, the default directory included, in a mount namespace of its own."""
import os
import stat
import subprocess
import sys

import torch

import pmckpt

from tap import Tap

T = Tap()
NOBODY = 65534
if os.geteuid() != 0:
    print("1..0 # SKIP needs root: it plants files as user nobody")
    sys.exit(0)

D = T.tmpdir("pmck-py-private-")   # root's own, 0700
PUBLIC = T.tmpdir("pmck-py-public-")
os.chmod(PUBLIC, 0o1777)            # a /dev/shm of the test's own, so no real name is touched
NAME = f"victim{os.getpid()}"
POOL = os.path.join(PUBLIC, f"pmckpt-{NAME}.pool")
SD = {"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(16)}


def as_nobody(*cmd):
    """Runs a shell command as nobody; True if it exited 0.  (Not this Python, which
    may lie where nobody cannot go: pyenv under /root.)"""
    r = subprocess.run(["sh", "-c", " ".join(cmd)], user=NOBODY, group=NOBODY, extra_groups=[],
                       capture_output=True, text=True, cwd="/")
    if r.returncode:
        T.diag(r.stderr)
    return r.returncode == 0


def blank(path, n, uid):
    st = os.lstat(path)
    with open(path, "rb") as f:
        data = f.read()
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid and len(data) == n and not any(data)


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_public_dir():
    with pmckpt.Store(ramdisk=PUBLIC, name=NAME) as s:
        T.raises("ramdisk=DIR of mode 1777: UnsafePathError", pmckpt.UnsafePathError, s.save,
                 SD, 1, match="1777")
    return not os.path.exists(POOL) or "a pool file was made"


def test_planted_file():
    if not as_nobody("truncate -s 1M", POOL, "&& chmod 666", POOL):
        return "nobody could not plant the file"
    with pmckpt.Store(ramdisk=PUBLIC, name=NAME) as s:
        T.raises("nobody's file under the name: refused (the directory)", pmckpt.UnsafePathError,
                 s.save, SD, 1)
    with pmckpt.Store(ramdisk=PUBLIC, name=NAME, sharing="group") as s:
        T.raises("shared on purpose: refused (the file's owner)", PermissionError, s.save, SD, 1,
                 match="owned by nobody")
    ok = blank(POOL, 1 << 20, NOBODY)
    os.unlink(POOL)
    return ok or "the planted file changed"


def test_planted_link():
    target = os.path.join(D, "blank")
    with open(target, "wb") as f:
        f.truncate(2 << 20)
    if not as_nobody("ln -s", target, POOL):
        return "nobody could not plant the link"
    with pmckpt.Store(ramdisk=PUBLIC, name=NAME, sharing="group") as s:
        T.raises("a link under the name: refused, not followed", pmckpt.UnsafePathError, s.save,
                 SD, 1, match="symbolic link")
    os.unlink(POOL)
    return blank(target, 2 << 20, 0) or "the link's target changed"


def test_nobodys_shared_dir():
    shared = os.path.join(PUBLIC, f"shared{os.getpid()}")
    if not as_nobody("mkdir -m 755", shared):
        return "nobody could not make the directory"
    with pmckpt.Store(ramdisk=D, name="co", shared_dir=shared) as s:
        T.raises("save with a shared_dir of nobody's: refused", pmckpt.UnsafePathError, s.save,
                 SD, 1, match="copy-out directory")
    with pmckpt.Store(ramdisk=T.tmpdir("pmck-py-empty-"), name="co", shared_dir=shared) as s:
        T.raises("load from it: refused before reading", pmckpt.UnsafePathError, s.load,
                 match="owned by nobody")
    return os.listdir(shared) == [] or f"written into it: {os.listdir(shared)}"


def test_modes(sharing, dm, fm):
    shared = os.path.join(D, f"shared-{sharing}")
    ram = os.path.join(D, f"ram-{sharing}")
    with pmckpt.Store(ramdisk=ram, name="m", shared_dir=shared, sharing=sharing) as s:
        s.save(SD, 3)
        s.wait_copyout()
        pool = s.region_path
    step = os.path.join(shared, "step-000000000003")
    got = {ram: mode(ram), pool: mode(pool), shared: mode(shared), step: mode(step),
           os.path.join(step, "rank-00000.safetensors"): None, os.path.join(step, "COMPLETE"): None}
    want = {ram: 0o700, pool: 0o600, shared: dm, step: dm}
    bad = []
    for p in got:
        w = want.get(p, fm)
        if mode(p) != w:
            bad.append(f"{p}: {oct(mode(p))}, expected {oct(w)}")
    return not bad or "; ".join(bad)


T.run("ramdisk=/dev/shm-like directory refused, nothing made", test_public_dir)
T.run("Store(ramdisk=DIR, name='victim') on nobody's planted file", test_planted_file)
T.run("a planted link to a blank file of root's", test_planted_link)
T.run("a shared_dir of nobody's", test_nobodys_shared_dir)
T.run("modes, sharing='private': 0700 dirs, 0600 files", test_modes, "private", 0o700, 0o600)
T.run("modes, sharing='group': copy-out 0750 / 0640", test_modes, "group", 0o750, 0o640)
T.raises("sharing must be private or group", ValueError, lambda: pmckpt.Store(sharing="world"))
T.done()
