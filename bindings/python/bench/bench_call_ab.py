# SPDX-License-Identifier: BSD-3-Clause
"""bench_call_ab.py -- the checkpoint call on the training thread, this tree's
Python binding against another revision's, in one process.

The binding's own Python decides most of what a checkpoint costs the training
thread (encoding the state, GradientLog's checks): changes to it are worth a
few percent each, below what two runs of a benchmark on a loaded machine tell
apart.  So both versions run in one process, in turn: the base revision's
package (bindings/python/pmckpt of --base, from git, or --base-dir, a folder
holding a pmckpt package) is imported under another name, beside this tree's.
Four identical jobs (bench_train.py's GPT-2-style model, --size, one torch
thread), made in the order base, this, this, base, train in turn, step by
step, the round's order rotated by one every step; each checkpoints every step with its own
store of its own version (all through the library PMCKPT_LIBRARY names: the C
library is the same for both).  Each version has a job made first or last and
one made between: in A/A runs with two jobs, the job made second had the
shorter calls, by 1-3%.

  --kind gradlog: GradientLog(on_busy="queue", records_per_state=--k), each
      call kind (whole state, record) apart;
  --kind store: Store(on_busy="queue") with hook_optimizer, whole states.

A call is timed from the loop's state_dict() to save_async's return (the
state_dict() included, as bench_train.py's cost line counts it), for the
measured steps after --warmup.  Prints, for each kind of call, the medians of
both versions (bench:) and `ratio: call_KIND_vs_base` (this tree's median over
the base's: below 1, this tree's call is shorter); `--base HEAD` (or
--base-dir of this tree's own package) is an A/A run, which should print ~1.
What it does not compare: the jobs' training (with two jobs, one per
version, their optimizer steps differed by ~12% with the same code in both)."""
import argparse
import gc
import importlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BASE_NAME = "pmckpt_base"  # the base revision's package, imported under this name


def base_package(a, tmp):
    """A folder holding the base version's package as BASE_NAME."""
    dst = os.path.join(tmp, BASE_NAME)
    if a.base_dir:
        src = os.path.abspath(a.base_dir)
        if not os.path.isfile(os.path.join(src, "pmckpt", "__init__.py")):
            raise SystemExit(f"bench_call_ab: --base-dir {src} holds no pmckpt package "
                             "(pmckpt/__init__.py)")
        shutil.copytree(os.path.join(src, "pmckpt"), dst)
        return tmp
    top = subprocess.run(["git", "-C", HERE, "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True)
    if top.returncode:
        raise SystemExit(f"bench_call_ab: not in a git tree ({top.stderr.strip()}): give "
                         "--base-dir instead of --base")
    arc = subprocess.run(["git", "-C", top.stdout.strip(), "archive", a.base,
                          "bindings/python/pmckpt"], capture_output=True)
    if arc.returncode:
        raise SystemExit(f"bench_call_ab: git archive {a.base}: "
                         f"{arc.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(arc.stdout)) as tf:
        # (git's own archive; the filter where this Python has it: 3.11.4 on)
        tf.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    os.rename(os.path.join(tmp, "bindings", "python", "pmckpt"), dst)
    return tmp


def open_ckpt(mod, a, job, name, ramdisk):
    """The store (or GradientLog) of version module `mod` for `job`."""
    if a.kind == "gradlog":
        return mod.GradientLog(job.opt, name=name, ramdisk=ramdisk, on_busy="queue",
                               records_per_state=a.k)
    st = mod.Store(name=name, ramdisk=ramdisk, on_busy="queue")
    mod.hook_optimizer(job.opt, st)
    return st


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="HEAD", help="git revision of the base (default HEAD)")
    p.add_argument("--base-dir", help="a folder holding the base's pmckpt package "
                   "(instead of --base)")
    p.add_argument("--kind", choices=("gradlog", "store"), default="gradlog")
    p.add_argument("--k", type=int, default=1, help="GradientLog's records_per_state")
    p.add_argument("--size", default="gpt2-shape")
    p.add_argument("--steps", type=int, default=100, help="measured steps of each job")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", default="/dev/shm", help="where the stores' ramdisk folder goes")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.k < 1:
        raise SystemExit("bench_call_ab: --steps and --k must be at least 1, --warmup 0")

    import torch
    import bench_train
    import pmckpt
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="pmck-call-ab-")
    ramdisk = tempfile.mkdtemp(prefix="pmck-call-ab-", dir=a.dir)
    runs = {}
    try:
        sys.path.insert(0, base_package(a, tmp))
        base = importlib.import_module(BASE_NAME)
        size = types.SimpleNamespace(size=a.size, batch=0, seed=a.seed, tied=False)
        calls = {"base": {}, "this": {}}  # version -> kind of call -> seconds
        for i, name in enumerate(("base", "this", "this", "base")):
            job = bench_train.Job(size, torch.device("cpu"))
            mod = base if name == "base" else pmckpt
            runs[i] = (name, job, open_ckpt(mod, a, job, f"ab{i}", ramdisk))
        gc.collect()
        order = list(runs.values())
        for i in range(a.warmup + a.steps):
            # each job at each place of the round in turn, never twice in a row
            for name, job, ck in order[i % 4:] + order[:i % 4]:
                job.train_step()
                t0 = time.perf_counter()
                h = ck.save_async(job.state(), job.step)
                took = time.perf_counter() - t0
                if i >= a.warmup:
                    calls[name].setdefault(getattr(h, "kind", "state"), []).append(took)
        for _, _, ck in runs.values():
            ck.wait()
    finally:
        for _, _, ck in runs.values():
            try:
                ck.destroy()
            except Exception as e:  # noqa: BLE001 -- the run's own failure matters more
                print(f"# bench_call_ab: destroy: {e}", file=sys.stderr)
        shutil.rmtree(ramdisk, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    what = f"{a.kind}" + (f"_k{a.k}" if a.kind == "gradlog" else "")
    print(f"bench: call_ab {what}, size {a.size}, {a.steps} measured steps of each of 4 jobs "
          f"after {a.warmup}, base {a.base_dir or a.base}")
    med = statistics.median
    for kind in sorted(calls["this"]):
        this, then = calls["this"][kind], calls["base"].get(kind)
        if not then:
            continue
        print(f"bench: call_{what}_{kind}_this {med(this) * 1e3:.3f} ms (n={len(this)})")
        print(f"bench: call_{what}_{kind}_base {med(then) * 1e3:.3f} ms (n={len(then)})")
        print(f"ratio: call_{what}_{kind}_vs_base {med(this) / med(then):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
