# SPDX-License-Identifier: BSD-3-Clause
"""The multi-process kill tests (test_dist.py, test_partner.py): on the parent's
side, `n` workers of one test script over gloo, a file rendezvous per launch;
each worker logs the global steps it sees to DIR/global.R and, in mode
"recover", prints "rank R step S tier T ok" (or something else on failure).
On the workers' side, the state a rank holds at a step and the process group."""
import os
import subprocess
import sys
import time

LAYERS = 4


def state_of(rank, step):
    """What rank `rank` holds at `step`: a function of both, a few layers of tensors."""
    import torch
    g = torch.Generator().manual_seed(rank * 1_000_003 + step)
    sd = {f"layer{i}.w": torch.randn(96, 128, generator=g) for i in range(LAYERS)}
    sd.update({f"layer{i}.b": torch.full((128,), float(step * 10 + rank)) for i in range(LAYERS)})
    sd["step"] = step
    sd["rank"] = rank
    return sd


def join_group(rdzv, rank, world_size):
    """A worker's gloo process group (file rendezvous `rdzv`, 60 s timeout), one torch thread."""
    import datetime
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=60))


class Ranks:
    def __init__(self, script, d, n):
        self.script, self.d, self.n = script, d, n
        self.launches = 0

    def launch(self, mode):
        """n worker processes: script --worker MODE DIR RANK RDZV."""
        self.launches += 1
        rdzv = os.path.join(self.d, f"rdzv.{self.launches}")
        return [subprocess.Popen([sys.executable, self.script, "--worker", mode, self.d, str(r),
                                  rdzv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for r in range(self.n)]

    def last_global(self):
        """The newest global step any rank logged, None before the first."""
        best = None
        for r in range(self.n):
            try:
                with open(os.path.join(self.d, f"global.{r}")) as f:
                    lines = f.read().split()
            except FileNotFoundError:
                continue
            if lines:
                best = max(best or 0, int(lines[-1]))
        return best

    def wait_checkpointing(self, procs, before, rng):
        """Until the ranks log a global step newer than `before` (at most 120 s), then
        a random moment of up to a second."""
        deadline = time.time() + 120
        while time.time() < deadline and self.last_global() == before and \
                all(p.poll() is None for p in procs):
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 1.0))

    @staticmethod
    def output(procs):
        """Everything the ranks printed; a rank still running after 240 s is killed (a hang)."""
        text = ""
        for p in procs:
            try:
                o, _ = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                p.kill()
                o, _ = p.communicate()
            text += o.decode(errors="replace")
        return text

    def recover(self):
        """(steps, tiers, text) of a recover launch; steps None if some rank failed."""
        text = self.output(self.launch("recover"))
        lines = [l.split() for l in text.splitlines() if l.startswith("rank ")]
        good = [l for l in lines if len(l) == 7 and l[2] == "step" and l[6] == "ok"]
        if len(good) != self.n:
            return None, None, text
        return {int(l[3]) for l in good}, {int(l[1]): l[5] for l in good}, text
