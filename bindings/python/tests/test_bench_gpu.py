# SPDX-License-Identifier: BSD-3-Clause
"""bench_gpu.py runs only on a lent GPU machine, where a crash costs a whole device
session: here it is run as far as a machine without a GPU takes it.  Its CUDA branch up
to the library's own check (torch made to see a device), then a dry run on host
tensors that must print every ratio line the next GPU session reads; and
bench_train.py, which it runs for the training figures, with the configurations the
next GPU session runs, two steps each on the CPU."""
import contextlib
import io
import os
import re
import subprocess
import sys

import torch

from tap import Tap

T = Tap()
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
RATIOS = ("gpu_save_durable_vs_pinned_d2h", "gpu_save_durable_host_hash_vs_pinned_d2h",
          "gpu_save_default_vs_host_hash", "gpu_save_threads12_vs_default",
          "gpu_load_into_vs_pinned_h2d", "gpu_load_new_vs_pinned_h2d",
          "gpu_load_new_early_vs_after_verify", "gpu_stall_vs_dcp_async", "gpu_dcp_save_vs_store_save",
          "gpu_dcp_save_pmckpt_vs_filesystem", "gpu_dcp_save_cached_plan_vs_store_save",
          "gpu_dcp_save_nested_vs_store_save", "gpu_dcp_save_vs_store_save_plus_dcp_own_work",
          "save_async_call_vs_without_memo",
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


TRAIN_CONFIGS = {"pm_every1": "train_tput_ckpt_every_step_vs_none",
                 "bgcopy": "train_tput_background_copies_vs_none",
                 "bgcopy2": "train_tput_background_copies_2gbps_vs_full",
                 "bgwait": "train_tput_background_wait_kernel_vs_none",
                 "pmsow_every1": "train_tput_snapshot_on_wait_every_step_vs_none",
                 "pmqsow_every1": "train_tput_queue_snapshot_on_wait_every_step_vs_none",
                 "pmdh_every1": "train_tput_device_hash_every_step_vs_none",
                 "pmgl_every1": "train_tput_gradlog_every_step_vs_none",
                 "pmglqsnap_every1": "train_tput_gradlog_queue_snapshot_every_step_vs_none",
                 "pmglqsnapk3_every1": "train_tput_gradlog_k3_queue_snapshot_every_step_vs_k1",
                 "pmglqsnap_every1:sub8": "train_tput_pmglqsnap_every1_sub8_vs_default_sub",
                 "pmglqsnapk3_every1:rate35":
                     "train_tput_pmglqsnapk3_every1_rate35_vs_unpaced",
                 "pmglqsnap_every1:dh": "train_tput_pmglqsnap_every1_device_hash_vs_none",
                 "pmglqsnap_every1:hh": "train_tput_pmglqsnap_every1_vs_host_hash",
                 "pm_every1:block": "train_tput_pm_every1_block_vs_spin"}


def test_train_dry_run():
    """bench_train.py --device cpu: a cost line per configuration, its ratio lines."""
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_train.py"), "--device", "cpu",
                        "--ranks", "0", "--steps", "2", "--warmup", "1", "--reps", "1",
                        "--configs", ",".join(["none", *TRAIN_CONFIGS])],
                       capture_output=True, text=True, timeout=600)
    if p.returncode:
        return f"rc {p.returncode}: {p.stderr[-2000:]}"
    lines = p.stdout.splitlines()
    for cfg in ["none", *TRAIN_CONFIGS]:
        if not any(ln.startswith(f"bench: cost {cfg}: ") for ln in lines):
            return f"no cost line for {cfg}:\n{p.stdout}"
    for cfg, ratio in TRAIN_CONFIGS.items():
        if not any(ln.startswith(f"ratio: {ratio} ") for ln in lines):
            return f"no ratio line {ratio} ({cfg}):\n{p.stdout}"
    if not any("ckpt call by phase" in ln for ln in lines):
        return f"no checkpoint call split by phase:\n{p.stdout}"
    if not any(ln.startswith("bench: cost pm_every1: ") and "(state_dict() " in ln
               for ln in lines):
        return f"no state_dict() time in pm_every1's cost line:\n{p.stdout}"
    if not all(re.search(r"gc \d+\.\d+ \(\d+ collections, \d+ full, in 2 steps\)", ln)
               for ln in lines if ln.startswith("bench: cost ")):
        return f"a cost line without the collector's time:\n{p.stdout}"
    if not any(ln.startswith("bench: cost pm_every1: ") and "writers' ms per step" in ln
               and " busy " in ln for ln in lines):
        return f"no writers' time in pm_every1's cost line:\n{p.stdout}"
    paced = [float(m.group(1)) for ln in lines if ln.startswith("bench: cost bgcopy2: ")
             for m in [re.search(r"background copies ([0-9.]+) GB/s", ln)] if m]
    if not paced or paced[0] > 2.5:  # paced to 2 GB/s: never faster (one piece early at most)
        return f"bgcopy2 not paced to 2 GB/s ({paced}):\n{p.stdout}"


def test_train_suffix_typo():
    """bench_train.py refuses a configuration's unknown suffix before running any (a
    pace out of range too), and :hh where it would not apply (no store; under
    PMCK_GPU_HASH=device, which overrides it)."""
    cases = [(f"pm_every1:{t}", f"unknown suffix :{t} of configuration pm_every1")
             for t in ("sub9", "rate1001")]
    cases += [(c, f":hh does not apply to {w}") for c, w in (
        ("dcp_every1:hh", "dcp_every1"), ("pm_every1:dh:hh", "pm_every1:dh"),
        ("pmdh_every1:hh", "pmdh_every1"))]
    for cfg, want in cases:
        p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_train.py"), "--device",
                            "cpu", "--ranks", "0", "--steps", "2", "--warmup", "1", "--reps",
                            "1", "--configs", f"none,{cfg}"],
                           capture_output=True, text=True, timeout=600)
        if p.returncode == 0 or want not in p.stderr:
            return f"{cfg}: rc {p.returncode}: {p.stderr[-2000:]}"
        if "rep 0" in p.stdout:
            return f"{cfg}: a configuration ran before it was refused:\n{p.stdout}"


def test_call_ab():
    """bench_call_ab.py: an A/A run (this tree's package as the base too) prints both
    versions' medians and a ratio for each kind of call; a base that is not a package
    is refused with a message."""
    pkg = os.path.join(BENCH, "..")
    for kind, calls in (("gradlog", ("record", "state")), ("store", ("state",))):
        p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_call_ab.py"),
                            "--base-dir", pkg, "--kind", kind, "--size", "tiny", "--steps",
                            "6", "--warmup", "2"], capture_output=True, text=True, timeout=600)
        if p.returncode:
            return f"{kind}: rc {p.returncode}: {p.stderr[-2000:]}"
        what = "gradlog_k1" if kind == "gradlog" else kind
        for call in calls:
            ratio = [float(m.group(1)) for m in re.finditer(
                rf"^ratio: call_{what}_{call}_vs_base ([0-9.]+)$", p.stdout, re.M)]
            both = all(re.search(rf"^bench: call_{what}_{call}_{v} [0-9.]+ ms \(n=\d+\)$",
                                 p.stdout, re.M) for v in ("this", "base"))
            if len(ratio) != 1 or not ratio[0] > 0 or not both:
                return f"{kind}: no figures for its {call} calls:\n{p.stdout}"
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_call_ab.py"),
                        "--base-dir", BENCH, "--steps", "1"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode == 0 or "holds no pmckpt package" not in p.stderr:
        return f"a base without a package: rc {p.returncode}: {p.stderr[-2000:]}"


if torch.cuda.is_available():
    T.skip("bench_gpu.py's CUDA branch up to the library's check", "a GPU is present: "
           "make bench-gpu runs it")
else:
    T.run("bench_gpu.py's CUDA branch, torch seeing a device: the library's check skips it",
          test_cuda_branch)
T.run("bench_gpu.py --device cpu: a dry run prints every ratio line", test_dry_run)
T.run("bench_train.py --device cpu, the next GPU session's configurations: cost and ratio "
      "lines", test_train_dry_run)
T.run("bench_call_ab.py, an A/A run: both versions' calls and their ratio", test_call_ab)
T.run("bench_train.py refuses an unknown configuration suffix, and :hh where it does not "
      "apply, before running any", test_train_suffix_typo)
T.done()
