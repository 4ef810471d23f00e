# SPDX-License-Identifier: BSD-3-Clause
"""Kill -9 and resume: train.py checkpoints every few steps (sync: save;
async: save_async with the optimizer hook); a parent kills it with SIGKILL at
random moments, several of them while a checkpoint is being written, and
restarts it each time.  Every loss any process logged, before or after a
kill, must equal, bit for bit, the loss of an uninterrupted run without
checkpoints; each restart must resume from the newest checkpoint that was
committed.  gradlog: pmckpt.GradientLog, a checkpoint every step, whole states
and gradient records in turn, a record replayed onto its whole state on
resume; gradlog3: chains of three records after each whole state, replayed in
turn; gradlog3q: the same with on_busy="queue", five checkpoints left in
flight and every commit held back 200 ms (PMCK_TEST_COMMIT_DELAY_MS), so that
saves queue behind the one in flight in their store and whole states commit
after the records that follow them (some saves must have queued).  Usage:
test_resume.py [sync|async|gradlog|gradlog3|gradlog3q ...]  (default all but
gradlog3)."""
import os
import random
import select
import signal
import subprocess
import sys
import time

from tap import Tap

T = Tap()
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, EVERY = 80, 4
seed = int(os.environ.get("PMCK_TEST_SEED", random.randrange(1 << 30)))
rng = random.Random(seed)
T.diag(f"seed {seed} (PMCK_TEST_SEED to repeat)")
D = T.tmpdir("pmck-py-resume-")


def spawn(mode, name, logpath, every=None):
    gradlog = mode.startswith("gradlog")
    if every is None:
        every = 1 if gradlog else EVERY
    chain, env = [], None
    if gradlog:  # gradlogN: chains of N records; gradlogNq: with the queue
        k = mode[len("gradlog"):].rstrip("q") or "1"
        chain = ["--records-per-state", k]
        if mode.endswith("q"):
            # Every commit held back 200 ms, several saves in flight: each store's
            # checkpoint is still in flight at its next save, which queues behind it,
            # and whole states commit after the records that follow them
            chain += ["--on-busy", "queue", "--in-flight", str(int(k) + 2)]
            env = {**os.environ, "PMCK_TEST_COMMIT_DELAY_MS": "200"}
    return subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), "--dir", D,
                             "--name", name, "--steps", str(STEPS), "--every", str(every),
                             "--mode", "gradlog" if gradlog else mode, "--log", logpath]
                            + chain, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def records(path):
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def run_to_end(p):
    out, err = p.communicate(timeout=300)
    return p.returncode, err.decode(errors="replace")


def kill_at_save(p, nth, prefix=b"B ", suffix=b""):
    """Kills p right after it announces its nth checkpoint (stdout 'B step'), or nth line
    with that prefix and suffix."""
    seen = 0
    buf = b""
    deadline = time.time() + 120
    while time.time() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 1.0)
        if not r:
            if p.poll() is not None:
                return False
            continue
        chunk = os.read(p.stdout.fileno(), 4096)
        if not chunk:
            return False
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.startswith(prefix) and line.endswith(suffix):
                seen += 1
                if seen == nth:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()
                    return True
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return True


def wait_line(p, prefix, timeout=120):
    """Reads p's stdout until a line starting with prefix; False at its end."""
    buf = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 1.0)
        if not r:
            continue
        chunk = os.read(p.stdout.fileno(), 4096)
        if not chunk:
            return False
        buf += chunk
        if any(line.startswith(prefix) for line in buf.split(b"\n")):
            return True
    return False


ref_log = os.path.join(D, "ref.log")
p = spawn("sync", "ref", ref_log, every=0)
wait_line(p, b"R ")
t0 = time.time()
rc, err = run_to_end(p)
ref_time = time.time() - t0  # training alone, without the start-up
ref = {int(r[1]): r[2] for r in records(ref_log) if r[0] == "L"}
T.ok(rc == 0 and len(ref) == STEPS, f"uninterrupted run without checkpoints: {STEPS} losses "
     f"({ref_time:.1f} s of training)", err)


def trial_series(mode):
    name = f"job-{mode}"
    logs, during, kills = [], 0, 0
    plan = ["save"] * 2 + ["time"] * 2
    gradlog = mode.startswith("gradlog")
    if gradlog:  # a checkpoint every step: later kills, and some after a record
        plan += ["record"] * 2
    saves, steps = (4, 12) if gradlog else (2, 6)
    rng.shuffle(plan)
    plan.insert(0, "first")  # the first process dies in its first save: the store's creation
    extra = 3  # more attempts at a kill inside a save, if the first ones land outside
    i = 0
    while i < len(plan):
        kind = plan[i]
        i += 1
        path = os.path.join(D, f"{mode}-{len(logs)}.log")
        logs.append(path)
        p = spawn(mode, name, path)
        if kind in ("save", "first"):
            killed = kill_at_save(p, 1 if kind == "first" else rng.randint(1, saves))
        elif kind == "record":  # right after a record is committed (and its whole state)
            killed = kill_at_save(p, rng.randint(1, 3) if mode != "gradlog" else 1,
                                  prefix=b"D ", suffix=b" record")
        else:
            # after a random number of training steps: tied to progress, not to a clock that
            # a loaded machine stretches (a process must not finish before its kill)
            killed = kill_at_save(p, rng.randint(1, steps), prefix=b"L ")
        recs = records(path)
        if not killed or (recs and recs[-1][0] == "F"):
            if p.returncode not in (0, -signal.SIGKILL):
                T.ok(False, f"{mode}: process {len(logs)} failed by itself (exit {p.returncode})",
                     p.stderr.read().decode(errors="replace"))
            else:
                T.diag(f"{mode}: process {len(logs)} finished before its kill")
            break
        kills += 1
        # where did it die?  sync: after B s, before E s: inside a save
        # (async: right after queuing it, before the next step: its write was in flight)
        inside = bool(recs) and recs[-1][0] in (("B",) if mode == "sync" else ("B", "E"))
        during += inside
        T.diag(f"{mode}: kill {kills} ({kind}) after {len(recs)} records, last "
               f"{' '.join(recs[-1]) if recs else '-'}{' (inside a checkpoint)' if inside else ''}")
        if kind == "save" and not inside and extra:
            plan.append("save")
            extra -= 1
    path = os.path.join(D, f"{mode}-{len(logs)}.log")
    logs.append(path)
    rc, err = run_to_end(spawn(mode, name, path))
    T.ok(rc == 0 and records(path)[-1][0] == "F", f"{mode}: the last restart runs to the end", err)
    if mode.endswith("q"):
        q = sum(1 for p in logs for r in records(p) if r[0] == "Q")
        T.ok(q > 0, f"{mode}: {q} saves queued behind one in flight")
    T.ok(kills >= 4, f"{mode}: {kills} processes killed with SIGKILL")
    T.ok(during >= 1, f"{mode}: {during} of the kills landed inside a checkpoint")

    # every logged loss equals the reference; each restart resumes from the newest commit
    bad, covered, resume_bad = [], set(), []
    committed = 0  # newest step known committed before the current process
    maybe = 0      # newest step that may have committed (async: queued, not yet seen done)
    for path in logs:
        recs = records(path)
        if not recs or recs[0][0] != "R":
            if recs:
                bad.append(f"{path}: starts with {recs[0]}")
            continue
        resumed = int(recs[0][1])
        if not (committed <= resumed <= max(committed, maybe)):
            resume_bad.append(f"{os.path.basename(path)} resumed at {resumed}, committed "
                              f"{committed}..{maybe}")
        for r in recs:
            if r[0] == "L":
                covered.add(int(r[1]))
                if ref.get(int(r[1])) != r[2]:
                    bad.append(f"{os.path.basename(path)} step {r[1]}: {r[2]} vs {ref.get(int(r[1]))}")
            elif r[0] == "E":
                maybe = max(maybe, int(r[1]))
                if mode == "sync":
                    committed = max(committed, int(r[1]))
            elif r[0] == "D":
                committed = max(committed, int(r[1]))
            elif r[0] == "B":
                maybe = max(maybe, int(r[1]))
        committed = max(committed, resumed)
    T.ok(not bad and covered == set(range(STEPS)),
         f"{mode}: all {sum(1 for p in logs for r in records(p) if r[0] == 'L')} logged losses "
         "equal the uninterrupted run's, bit for bit", "\n".join(bad[:10]) or
         f"steps missing: {sorted(set(range(STEPS)) - covered)}")
    T.ok(not resume_bad, f"{mode}: every restart resumed from the newest committed checkpoint",
         "\n".join(resume_bad))
    if gradlog:
        replays = [int(r[2]) for p in logs for r in records(p) if r[0] == "Y"]
        T.ok(replays, f"{mode}: {len(replays)} of {len(logs) - 1} restarts resumed from "
             f"records replayed onto their whole state ({replays} records)")


# gradlog3 (chains without the queue) on request: gradlog3q covers chains, within
# make check's time
for mode in (sys.argv[1:] or ["sync", "async", "gradlog", "gradlog3q"]):
    trial_series(mode)
T.done()
