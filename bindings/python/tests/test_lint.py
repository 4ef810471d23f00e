"""pylint's error checks that see a fault without running the code: the binding,
its tests and its benchmarks.  Much of the binding runs only with a CUDA device
(load onto a GPU, the stream-ordered waits), which this machine lacks; on the
first GPU it met, such a branch called a name its own function had rebound to a
tuple (E1102, not-callable).  Only checks that report faults are on: a name
used before it is bound or never bound, calls with the wrong arguments,
unpacking that cannot match, a loop or except name rebinding an argument.
Noisy checks are off (no-member: the Store's mixins; unsubscriptable-object and
possibly-used-before-assignment: guarded or later-cleared names)."""

import importlib.util
import os
import subprocess
import sys
import tempfile

from tap import Tap

T = Tap()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # bindings/python
CHECKS = ",".join((
    "not-callable",                  # E1102
    "used-before-assignment",        # E0601
    "undefined-variable",            # E0602
    "no-value-for-parameter",        # E1120
    "too-many-function-args",        # E1121
    "unexpected-keyword-arg",        # E1123
    "redundant-keyword-arg",         # E1124
    "redefined-argument-from-local",  # R1704
    "function-redefined",            # E0102
    "assignment-from-no-return",     # E1111
    "unpacking-non-sequence",        # E0633
    "unbalanced-tuple-unpacking",    # W0632
    "no-self-argument",              # E0213
    "abstract-class-instantiated",   # E0110
))


def pylint(*paths):
    """(exit status, output) of pylint with CHECKS only, from bindings/python, the
    tests' and benchmarks' folders importable as they are when run."""
    hook = ("import sys; sys.path[:0] = [%r, %r, %r]"
            % (ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")))
    r = subprocess.run([sys.executable, "-m", "pylint", "--disable=all", "--enable=" + CHECKS,
                        "--score=n", "--persistent=n", "--init-hook=" + hook, *paths],
                       cwd=ROOT, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def test_catches_a_shadowed_callable():
    """The fault of 2026-11-27, in small: a parameter that is a callable, rebound
    to what a lookup returned, then called.  The checks must see it."""
    src = ("def lookup():\n    return (1, 2)\n\n\n"
           "def load(newest=None):\n    newest = lookup()\n"
           "    return newest() if newest else None\n")
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "shadowed.py")
        with open(p, "w") as f:
            f.write(src)
        rc, out = pylint(p)
    if rc == 0 or "not-callable" not in out:
        return f"pylint missed it (status {rc}): {out}"


FOLDERS = (("pmckpt", "the binding (pmckpt)"), ("tests", "the binding's tests"),
           ("bench", "the binding's benchmarks"))
_all = []  # one pylint run over every folder (they import pmckpt: inferred once)


def test_clean(folder):
    if not _all:
        _all.append(pylint(*(f for f, _what in FOLDERS)))
    rc, out = _all[0]
    if rc & ~0b11110:  # fatal (1) or usage error (32); messages are 2, 4, 8 and 16
        return f"pylint failed (status {rc}):\n{out}"
    mine = [line for line in out.splitlines() if line.startswith(folder + os.sep)]
    if mine:
        return "\n".join(mine)


if importlib.util.find_spec("pylint") is None:  # requirements.txt pins it
    print("1..0 # SKIP pylint is not installed in this interpreter (tools/python-env installs it)")
    sys.exit(0)
T.run("pylint's error checks see a callable parameter rebound and called", test_catches_a_shadowed_callable)
for f, what in FOLDERS:
    T.run(f"{what}: no fault pylint's error checks see", test_clean, f)
T.done()
