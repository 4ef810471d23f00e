# SPDX-License-Identifier: BSD-3-Clause
"""setup.py -- the native part of building the binding (the rest is pyproject.toml).

Inside a pmckpt checkout, `pip wheel bindings/python` (and `pip install
./bindings/python`) first builds the C libraries and tools with the project's
own Makefile (`make all`) and puts libpmckpt, libpmalloc(_ns), `pmckpt` and
`pmbench` into the package as pmckpt/_native, so the wheel holds them: a
platform wheel (py3-none-linux_x86_64) that still links the system's libpmem2,
libndctl and the others.  `make wheel` builds it this way and then has
auditwheel vendor those (tools/make-wheel).  Outside a checkout, or with PMCKPT_NATIVE=0, the package
is pure Python and loads an installed libpmckpt (or $PMCKPT_LIBRARY).
PMCKPT_BUILD=DIR takes the files from another build directory (default build)."""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
NATIVE = ("libpmckpt.so.0", "libpmalloc.so.0", "libpmalloc_ns.so.0", "pmckpt", "pmbench")


def native():
    """Build and bundle the native files: in a checkout, unless PMCKPT_NATIVE=0."""
    checkout = os.path.exists(os.path.join(ROOT, "Makefile")) and \
        os.path.isdir(os.path.join(ROOT, "runtime"))
    return os.environ.get("PMCKPT_NATIVE", "1" if checkout else "0") == "1"


class BuildPy(build_py):
    def run(self):
        super().run()
        if not native():
            return
        build = os.path.join(ROOT, os.environ.get("PMCKPT_BUILD", "build"))
        subprocess.check_call(["make", "-C", ROOT, f"BUILD={os.path.relpath(build, ROOT)}",
                               "all"])
        dst = os.path.join(self.build_lib, "pmckpt", "_native")
        os.makedirs(dst, exist_ok=True)
        for f in NATIVE:
            shutil.copy2(os.path.join(build, f), os.path.join(dst, f))
        if shutil.which("strip"):  # debug information only: the libraries keep their symbols
            subprocess.check_call(["strip", "--strip-debug"] +
                                  [os.path.join(dst, f) for f in NATIVE])


class NativeDistribution(Distribution):
    """Native files make a platform wheel (installed into platlib)."""

    def has_ext_modules(self):
        return native()


class BdistWheel(bdist_wheel):
    """py3-none: the binding has no CPython extension (ctypes), so one wheel serves
    every CPython."""

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if native() else (python, abi, plat)


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
