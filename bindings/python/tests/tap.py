# SPDX-License-Identifier: BSD-3-Clause
"""A small TAP producer for the binding's tests (run under prove)."""
import os
import shutil
import sys
import tempfile
import traceback


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0
        self.skipped = 0
        self.dirs = []

    def ok(self, cond, name, diag=None):
        self.n += 1
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}", flush=True)
        if not cond:
            self.failed += 1
            if diag:
                self.diag(diag)
        return cond

    def diag(self, text):
        for line in str(text).splitlines():
            print(f"# {line}", flush=True)

    def skip(self, name, reason):
        self.n += 1
        self.skipped += 1
        print(f"ok {self.n} - {name} # SKIP {reason}", flush=True)

    def run(self, name, fn, *args):
        """One test: fn returns None/True to pass, a string (diagnostic) or False to fail;
        an exception fails it with the traceback."""
        try:
            r = fn(*args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # DCP's CheckpointException among them: the next tests still run
            return self.ok(False, name, traceback.format_exc())
        if isinstance(r, str):
            return self.ok(False, name, r)
        return self.ok(r is None or r is True, name)

    def raises(self, name, exc, fn, *args, match=None):
        """fn must raise exc (and its message contain match)."""
        try:
            fn(*args)
        except exc as e:  # noqa
            if match and match not in str(e):
                return self.ok(False, name, f"message lacks {match!r}: {e}")
            self.diag(f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:400]}")
            return self.ok(True, name)
        except Exception:
            return self.ok(False, name, f"wrong exception:\n{traceback.format_exc()}")
        return self.ok(False, name, f"no {exc.__name__} raised")

    def tmpdir(self, prefix):
        base = os.environ.get("PMCK_TEST_DIR", "/dev/shm")
        d = tempfile.mkdtemp(prefix=prefix, dir=base)
        self.dirs.append(d)
        return d

    def done(self):
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        print(f"1..{self.n}", flush=True)
        sys.exit(1 if self.failed else 0)
