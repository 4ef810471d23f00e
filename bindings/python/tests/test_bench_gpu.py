# SPDX-License-Identifier: BSD-3-Clause
"""bench_gpu.py runs only on a lent GPU machine, where a crash costs a whole device
session: here it is run as far as a machine without a GPU takes it.  Its CUDA branch up
to the library's own check (torch made to see a device), then a dry run on host
tensors that must print every ratio line the next GPU session reads."""
import contextlib
import io
import os
import subprocess
import sys

import torch

from tap import Tap

T = Tap()
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
RATIOS = ("gpu_save_durable_vs_pinned_d2h", "gpu_save_durable_device_hash_vs_pinned_d2h",
          "gpu_save_device_hash_vs_host_hash", "gpu_save_threads12_vs_default",
          "gpu_load_into_vs_pinned_h2d", "gpu_stall_vs_dcp_async", "gpu_dcp_save_vs_store_save",
          "gpu_dcp_save_pmckpt_vs_filesystem", "save_async_call_vs_without_memo",
          "load_into_call_vs_without_memo")


def test_cuda_branch():
    """main() with torch seeing a device: the library's check says why it skips (a name
    bound later in main() once made `pmckpt` unbound here, on every GPU machine)."""
    sys.path.insert(0, BENCH)
    import bench_gpu
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    out = io.StringIO()
    old_argv = sys.argv
    sys.argv = ["bench_gpu.py", "--no-train"]
    try:
        with contextlib.redirect_stdout(out):
            rc = bench_gpu.main()
    finally:
        torch.cuda.is_available = real
        sys.argv = old_argv
    if rc != 0 or "bench: gpu skipped: GPU path unavailable" not in out.getvalue():
        return f"rc {rc}, output: {out.getvalue()!r}"


def test_dry_run():
    """--device cpu, 16 MB: every ratio line present, with a number."""
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_gpu.py"), "--device", "cpu",
                        "--mb", "16", "--no-train", "--reps", "1", "--call-reps", "2"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode:
        return f"rc {p.returncode}: {p.stderr[-2000:]}"
    got = {}
    for line in p.stdout.splitlines():
        w = line.split()
        if line.startswith("ratio: ") and len(w) >= 3:
            got[w[1]] = float(w[2])
    missing = [r for r in RATIOS if r not in got]
    if missing:
        return f"no ratio line for {missing}:\n{p.stdout}"
    T.diag(" ".join(f"{k} {v}" for k, v in got.items()))


if torch.cuda.is_available():
    T.skip("bench_gpu.py's CUDA branch up to the library's check", "a GPU is present: "
           "make bench-gpu runs it")
else:
    T.run("bench_gpu.py's CUDA branch, torch seeing a device: the library's check skips it",
          test_cuda_branch)
T.run("bench_gpu.py --device cpu: a dry run prints every ratio line", test_dry_run)
T.done()
