# SPDX-License-Identifier: BSD-3-Clause
"""The parent side of the multi-process kill tests (test_dist.py, test_partner.py):
`n` workers of one test script over gloo, a file rendezvous per launch.  Each
worker logs the global steps it sees to DIR/global.R and, in mode "recover",
prints "rank R step S tier T ok" (or something else on failure)."""
import os
import subprocess
import sys
import time


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
