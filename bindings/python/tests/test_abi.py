# SPDX-License-Identifier: BSD-3-Clause
"""The binding's ctypes structures against include/pmckpt.h: for each, a C
program compiled here prints sizeof and every field's offsetof as the C
compiler lays them out, and they must equal ctypes' (a field added to a
header struct but not to _lib.py, or in another order, would make the library
write past the Python object, as pmck_pipeline_stats would into a short
PipelineStats).  Skipped without a C compiler."""
import ctypes
import os
import shutil
import subprocess
import tempfile

from pmckpt import _lib

from tap import Tap

T = Tap()
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CC = os.environ.get("CC", "cc")

# ctypes class -> the C struct it stands for
STRUCTS = {
    _lib.TensorDesc: "pmck_tensor_desc",
    _lib.TensorInfo: "pmck_tensor_info",
    _lib.Recovery: "pmck_recovery",
    _lib.GivenChecksums: "pmck_given_checksums",
    _lib.PipelineOpts: "pmck_pipeline_opts",
    _lib.PipelineStats: "pmck_pipeline_stats",
    _lib.BuildInfo: "pmck_build_info",
    _lib.LocalOpts: "pmck_local_opts",
    _lib.Local: "pmck_local",
    _lib.CopyoutOpts: "pmck_copyout_opts",
    _lib.CopyoutStats: "pmck_copyout_stats",
    _lib.CopyoutFailure: "pmck_copyout_failure",
    _lib.FileInfo: "pmck_file_info",
    _lib.TierRecovery: "pmck_tier_recovery",
    _lib.Collectives: "pmck_collectives",
    _lib.GlobalRecovery: "pmck_global_recovery",
    _lib.Rejection: "pmck_rejection",
    _lib.PartnerOpts: "pmck_partner_opts",
    _lib.PartnerStats: "pmck_partner_stats",
}


def c_name(field):
    """The C member a ctypes field names ("global_": global, a C++ keyword's dodge)."""
    return field[:-1] if field.endswith("_") else field


def c_layout(workdir):
    """{struct: (sizeof, {member: offsetof})} as the C compiler lays them out."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <pmckpt.h>",
             "int main(void) {"]
    for cls, name in STRUCTS.items():
        lines.append(f'\tprintf("{name} . %zu\\n", sizeof(struct {name}));')
        for f, *_ in cls._fields_:
            lines.append(f'\tprintf("{name} {c_name(f)} %zu\\n", '
                         f'offsetof(struct {name}, {c_name(f)}));')
    lines += ["\treturn 0;", "}"]
    src, exe = os.path.join(workdir, "layout.c"), os.path.join(workdir, "layout")
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    r = subprocess.run([CC, "-std=c11", "-D_GNU_SOURCE", "-I", os.path.join(ROOT, "include"),
                        "-o", exe, src], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{CC} failed:\n{r.stderr}")
    sizes, offsets = {}, {}
    for line in subprocess.run([exe], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        name, member, value = line.split()
        if member == ".":
            sizes[name] = int(value)
        else:
            offsets.setdefault(name, {})[member] = int(value)
    return {name: (sizes[name], offsets.get(name, {})) for name in sizes}


def test_layouts():
    d = tempfile.mkdtemp(prefix="pmck-abi-")
    try:
        layout = c_layout(d)
    finally:
        shutil.rmtree(d)
    bad = []
    for cls, name in STRUCTS.items():
        size, fields = layout[name]
        for f, *_ in cls._fields_:
            if getattr(cls, f).offset != fields[c_name(f)]:
                bad.append(f"{name}.{c_name(f)}: offset {getattr(cls, f).offset} in "
                           f"{cls.__name__}, {fields[c_name(f)]} in C")
        if ctypes.sizeof(cls) != size:
            bad.append(f"{name}: {ctypes.sizeof(cls)} bytes in {cls.__name__}, {size} in C "
                       "(a member missing at the end?)")
    T.diag(f"{len(STRUCTS)} structures, "
           f"{sum(len(c._fields_) for c in STRUCTS)} members compared")
    return "; ".join(bad) or None


if shutil.which(CC) is None:
    T.skip("ctypes structures laid out as include/pmckpt.h's", f"no C compiler ({CC})")
else:
    T.run("ctypes structures laid out as include/pmckpt.h's (sizeof, every offsetof)",
          test_layouts)
T.done()
