# SPDX-License-Identifier: BSD-3-Clause
"""The training-loop example of docs/python.md (examples/train_loop.py) runs
in each mode (gradlog: a checkpoint every step, step 40 a record), and a second run resumes where the first stopped, with the
losses of one run straight through."""
import os
import re
import subprocess
import sys

from tap import Tap

T = Tap()
D = T.tmpdir("pmck-py-example-")
EX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "train_loop.py")


def run(mode, steps, name_dir):
    r = subprocess.run([sys.executable, EX, mode, "--steps", str(steps), "--every", "20",
                        "--dir", name_dir], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def losses(out):
    return dict(re.findall(r"step (\d+): loss (\S+),", out))


ref_dir = os.path.join(D, "ref")
os.makedirs(ref_dir)
rc, out, err = run("sync", 80, ref_dir)
ref = losses(out)
T.ok(rc == 0 and len(ref) == 4, "the example runs 80 steps in one go", err)
for mode in ("sync", "async", "dcp", "gradlog"):
    d = os.path.join(D, mode)
    os.makedirs(d)
    rc1, out1, err1 = run(mode, 40, d)
    rc2, out2, err2 = run(mode, 80, d)
    T.ok(rc1 == 0 and rc2 == 0 and "resumed at step 40" in out2,
         f"{mode}: the example resumes at step 40", err1 + err2 + out2)
    if mode == "gradlog":  # step 40 is a record (whole states at odd steps): replayed
        T.ok("'replayed': True" in out2, "gradlog: step 40 replayed onto step 39's whole state",
             out2[:2000])
    both = {**losses(out1), **losses(out2)}
    T.ok(both == ref, f"{mode}: losses across the restart equal those of one run",
         f"{both}\n{ref}")
T.done()
