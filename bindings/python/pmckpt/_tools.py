# SPDX-License-Identifier: BSD-3-Clause
"""The command-line tools a wheel carries (pmckpt/_native, `make wheel`), as the
console scripts `pmckpt` and `pmbench`: each replaces this process with the
bundled program, which finds the wheel's libraries through its RPATH."""
import os
import sys

from ._lib import NATIVE


def _run(name):
    exe = os.path.join(NATIVE, name)
    if not os.access(exe, os.X_OK):
        sys.exit(f"{name}: this pmckpt install has no bundled {name} (only a wheel built with "
                 f"`make wheel` carries it; from a checkout, run build/{name})")
    os.execv(exe, [name] + sys.argv[1:])


def pmckpt():
    _run("pmckpt")


def pmbench():
    _run("pmbench")
