# SPDX-License-Identifier: BSD-3-Clause
"""python -m pmckpt --version: the binding's version, the library it loaded and
what that library was built with (CUDA or not, libpmem2's version)."""
import argparse
import sys


def describe():
    from . import __version__, _lib
    lines = [f"pmckpt {__version__} (Python binding)", f"library: {_lib.path}"]
    info = _lib.optional("pmck_build_info")
    if info is None:
        lines.append("build: unknown (a library older than pmck_build_info)")
        return "\n".join(lines)
    b = _lib.BuildInfo()
    info(b)
    cuda = (f"CUDA {b.cuda // 1000}.{b.cuda % 1000 // 10} (runtime linked statically)"
            if b.cuda else "without CUDA (CUDA tensors are copied through host memory)")
    lines.append(f"build: libpmckpt {b.version.decode()}, {cuda}, libpmem2 "
                 f"{b.pmem2.decode() or 'unknown'}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m pmckpt",
                                 description="pmckpt's Python binding")
    ap.add_argument("--version", action="store_true", help="versions and build")
    args = ap.parse_args(argv)
    if args.version:
        print(describe())
        return 0
    ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
