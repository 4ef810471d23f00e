# SPDX-License-Identifier: BSD-3-Clause
"""Copy-out onto a full file system (tests/python_copyout_fail.sh mounts an 8 MiB
tmpfs and passes it): the failure is raised once, as CopyoutError with errno
ENOSPC, the path and the sizes, by the next save() / save_async() (which then
does nothing), wait_copyout() or close(); the local store is unaffected, no
partial step is left, the complete step before stays, and once space is freed
copies succeed again."""
import errno
import os
import sys
import time

import torch

import pmckpt

from tap import Tap

torch.set_num_threads(1)
T = Tap()
D = T.tmpdir("pmck-py-cofail-")
SHARED = sys.argv[1]
FILLER = os.path.join(SHARED, "filler")


def state(step):
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(768, 1024, generator=g), "step": step}  # 3 MiB


def step_dirs():
    return sorted(n for n in os.listdir(SHARED) if n.startswith("step-"))


def complete(step):
    return os.path.exists(os.path.join(SHARED, f"step-{step:012d}", "COMPLETE"))


def await_failed(store, n):
    """Until the copier has failed n copies (the test then knows the next call reports)."""
    for _ in range(2000):
        if store.stats()["copyout"]["failed"] >= n:
            return True
        time.sleep(0.005)
    return False


def check_error(e, step):
    assert isinstance(e, pmckpt.CopyoutError) and isinstance(e, pmckpt.Error), type(e)
    assert e.errno == errno.ENOSPC, f"errno {e.errno}: {e}"
    assert e.step == step, f"step {e.step}, want {step}: {e}"
    assert e.path and f"step-{step:012d}/rank-00000.safetensors" in e.path, e.path
    assert "No space left on device" in str(e) and e.path in str(e), str(e)
    assert e.needed > 3 << 20 and 0 < e.available < e.needed, (e.needed, e.available)


def expect_copyout_error(fn, step):
    try:
        fn()
    except pmckpt.CopyoutError as e:
        check_error(e, step)
        T.diag(f"CopyoutError: {e}")
        return
    raise AssertionError("no CopyoutError raised")


s = None


def test_first_step_fits():
    global s
    s = pmckpt.Store(ramdisk=D, name="cofail", shared_dir=SHARED, keep=2)
    s.save(state(1), 1)
    s.wait_copyout()
    assert complete(1), step_dirs()
    st = os.statvfs(SHARED)
    with open(FILLER, "wb") as f:  # leave 1 MiB: a 3 MiB step no longer fits
        os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize - (1 << 20))


def test_save_raises():
    s.save(state(2), 2)  # saved locally; its copy fails in the background
    assert await_failed(s, 1)
    expect_copyout_error(lambda: s.save(state(3), 3), 2)
    assert s.newest_step() == 2, s.newest_step()  # nothing of that call was done
    s.save(state(3), 3)  # reported once: saving again works
    assert s.newest_step() == 3


def test_save_async_raises():
    assert await_failed(s, 2)
    expect_copyout_error(lambda: s.save_async(state(4), 4), 3)
    s.save_async(state(4), 4).wait()
    assert s.newest_step() == 4


def test_wait_copyout_raises():
    expect_copyout_error(s.wait_copyout, 4)
    s.wait_copyout()  # reported once


def test_close_raises():
    global s
    s.save(state(5), 5)
    expect_copyout_error(s.close, 5)
    s = None


def test_directory_state():
    assert step_dirs() == [f"step-{1:012d}"], step_dirs()
    assert complete(1)
    tmp = [f for _, _, fs in os.walk(SHARED) for f in fs if f.endswith(".tmp")]
    assert not tmp, tmp


def test_space_freed():
    os.unlink(FILLER)
    with pmckpt.Store(ramdisk=D, name="cofail", shared_dir=SHARED, keep=2) as st:
        got = st.load()
        assert got["step"] == 5 and torch.equal(got["w"], state(5)["w"])
        st.save(state(6), 6)
        st.wait_copyout()
    assert complete(6) and complete(1), step_dirs()


T.run("step 1 fits; a filler leaves 1 MiB free", test_first_step_fits)
T.run("save(): the earlier copy's ENOSPC raised as CopyoutError before saving, once",
      test_save_raises)
T.run("save_async(): CopyoutError before starting, once", test_save_async_raises)
T.run("wait_copyout(): CopyoutError, once", test_wait_copyout_raises)
T.run("close(): CopyoutError", test_close_raises)
T.run("no partial step folder or temporary file; step 1 stays complete", test_directory_state)
T.run("space freed: the local store loads step 5, step 6 is copied", test_space_freed)
if s is not None:
    s.close()
T.done()
