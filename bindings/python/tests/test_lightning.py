# SPDX-License-Identifier: BSD-3-Clause
"""The Lightning plug-in (pmckpt.lightning.PmckptCheckpointIO) with the real
Trainer, on CPU: a LightningModule (an MLP with BatchNorm, AdamW, a StepLR
stepped every step), ModelCheckpoint(every_n_train_steps=1, save_last=True).

- Kill trials: training runs in a child process with the plug-in
  (asynchronous), is killed with SIGKILL at random moments and restarted
  with trainer.fit(ckpt_path="last") until max_steps: every loss any run
  logged equals, bit for bit, that of an uninterrupted run without
  checkpoints (each step's batch is a function of the global step; one
  thread, deterministic algorithms).
- Top-k: ModelCheckpoint(monitor="train_loss", save_top_k=2): the files
  Lightning keeps are the two best and last.ckpt, removed ones are gone,
  and every kept file loads the checkpoint of its own step (those older than
  the store's two slots were written out as regular .ckpt files).
- A hyper-parameter the store cannot keep is refused with its key path;
  with pickle_hyperparameters=True it is kept and comes back.
- export(): last.ckpt written as a regular .ckpt that
  LightningModule.load_from_checkpoint loads without pmckpt.

Usage: test_lightning.py [TRIALS] (default $PMCK_LIGHTNING_TRIALS or 4).
Internally: test_lightning.py --worker MODE DIR."""
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
STEPS = 400
WIDTH = 48


class Opaque:
    """A hyper-parameter the store cannot keep as a value (module level: Lightning's
    save_hyperparameters drops what cannot be pickled)."""

    def __init__(self, v):
        self.v = v


def module_class():
    import torch
    import lightning as L

    class Net(L.LightningModule):
        def __init__(self, width=WIDTH, log_path=None, extra=None):
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(width, width),
                                           torch.nn.BatchNorm1d(width), torch.nn.ReLU(),
                                           torch.nn.Linear(width, width), torch.nn.ReLU(),
                                           torch.nn.Linear(width, 1))

        def training_step(self, batch, idx):
            g = torch.Generator().manual_seed(1000 + int(self.global_step))
            x = torch.randn(32, self.hparams.width, generator=g)
            y = torch.sin(x).sum(1, keepdim=True)
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            if self.hparams.log_path:  # one write(2) per line: a kill cannot tear it
                fd = os.open(self.hparams.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                os.write(fd, f"{int(self.global_step)} {float(loss).hex()}\n".encode())
                os.close(fd)
            time.sleep(0.01)  # the rest of a training step
            return loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=0.01)
            sch = torch.optim.lr_scheduler.StepLR(opt, 7, 0.7)
            return [opt], [{"scheduler": sch, "interval": "step"}]

        def train_dataloader(self):
            return torch.utils.data.DataLoader(range(100000), batch_size=1)

    return Net


def trainer(d, io=None, callbacks=(), steps=STEPS):
    import lightning as L
    return L.Trainer(max_steps=steps, plugins=[io] if io else None, callbacks=list(callbacks),
                     enable_checkpointing=bool(callbacks), logger=False,
                     enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                     deterministic=True, default_root_dir=d)


def worker(mode, d):
    import warnings
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from pmckpt.lightning import PmckptCheckpointIO

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    Net = module_class()
    log = os.path.join(d, f"loss.{mode}")
    if mode == "reference":
        trainer(d).fit(Net(log_path=log))
    elif mode == "run":
        io = PmckptCheckpointIO(ramdisk=os.path.join(d, "rd"))
        cb = ModelCheckpoint(dirpath=os.path.join(d, "ckpt"), every_n_train_steps=1,
                             save_last=True)
        trainer(d, io, [cb]).fit(Net(log_path=log), ckpt_path="last")
        print("finished", flush=True)


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                out.setdefault(int(parts[0]), set()).add(parts[1])
    return out


def main():
    from tap import Tap
    T = Tap()
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PMCK_LIGHTNING_TRIALS", 4))
    seed = int(os.environ.get("PMCK_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    T.diag(f"seed {seed} (PMCK_TEST_SEED to repeat); {trials} kill trials, {STEPS} steps")
    d = T.tmpdir("pmck-py-lightning-")

    def run(mode):
        return subprocess.Popen([sys.executable, HERE, "--worker", mode, d],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    p = run("reference")
    out, _ = p.communicate(timeout=600)
    T.ok(p.returncode == 0, "an uninterrupted run without checkpoints", out.decode()[-3000:])
    ref = losses(os.path.join(d, "loss.reference"))

    # Kill trials, then runs until one finishes.
    log = os.path.join(d, "loss.run")
    kills, finished, text = 0, False, ""
    for attempt in range(trials + 6):
        p = run("run")
        if kills < trials:
            before = os.path.getsize(log) if os.path.exists(log) else 0
            deadline = time.time() + 120
            while time.time() < deadline and p.poll() is None and \
                    (os.path.getsize(log) if os.path.exists(log) else 0) == before:
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 1.0))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                kills += 1
        out, _ = p.communicate(timeout=600)
        text = out.decode(errors="replace")
        if p.returncode == 0 and "finished" in text:
            finished = True
            break
    got = losses(log)
    steps_seen = sorted(got)
    bad = [s for s in steps_seen if got[s] != ref.get(s)]
    T.ok(finished and kills == trials, f"{kills} runs killed with SIGKILL at random moments, "
         "each resumed with ckpt_path=\"last\", the last one to the end", text[-3000:])
    T.ok(steps_seen == list(range(STEPS)) and not bad,
         f"every logged loss of every run equals the uninterrupted run's, bit for bit "
         f"({len(steps_seen)} steps, {sum(len(v) for v in got.values())} distinct values)",
         f"differing steps: {bad[:5]}: {[(s, got[s], ref.get(s)) for s in bad[:3]]}")
    replayed = sum(1 for _ in open(log)) - len(steps_seen)
    T.diag(f"{replayed} steps were trained again after a kill (the steps after the last "
           "committed checkpoint)")

    in_process(T, d, ref)
    return T.done()


def in_process(T, d, ref):
    """Top-k retention, a refused hyper-parameter, the pickle opt-in, export."""
    import warnings
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    import pmckpt
    from pmckpt.lightning import PmckptCheckpointIO, export, is_pointer
    from common import same

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    Net = module_class()

    # Top-k: the two best steps by train_loss, and last.ckpt.
    steps = 30
    topk = os.path.join(d, "topk")
    torch.manual_seed(0)
    io = PmckptCheckpointIO(ramdisk=os.path.join(d, "rd-topk"))
    cb = ModelCheckpoint(dirpath=topk, every_n_train_steps=1, save_last=True,
                         monitor="train_loss", save_top_k=2, filename="{step}")
    model = Net()
    trainer(d, io, [cb], steps=steps).fit(model)
    kept = sorted(os.listdir(topk))
    best = sorted(range(1, steps + 1), key=lambda s: float.fromhex(ref[s - 1].copy().pop()))[:2]
    want = sorted([f"step={s}.ckpt" for s in best] + ["last.ckpt"])
    T.ok(kept == want, f"top-k: Lightning keeps the two best steps and last.ckpt ({kept}), the "
         f"others were removed", f"want {want}")
    regular = [f for f in kept if not is_pointer(os.path.join(topk, f))]
    loads = []
    for f in kept:
        ck = io.load_checkpoint(os.path.join(topk, f))
        want_step = steps if f == "last.ckpt" else int(f[5:-5])
        loads.append(ck["global_step"] == want_step)
    T.ok(all(loads), f"every kept file loads the checkpoint of its own step ({len(kept)} files, "
         f"{len(regular)} of them written out as regular .ckpt files before their slot was "
         f"reused: {regular})")
    last = io.load_checkpoint(os.path.join(topk, "last.ckpt"))
    why = same(last["state_dict"], model.state_dict())
    T.ok(why is None, "last.ckpt holds the trained model's weights, bit-exact", why)
    T.ok(type(last["optimizer_states"][0]["state"][0]["step"]) is torch.Tensor and
         last["lr_schedulers"][0]["last_epoch"] == steps and "loops" in last and
         any(k.startswith("ModelCheckpoint") for k in last["callbacks"]),
         "and the optimizer's state, the scheduler's, the loops' and the callbacks' "
         "(Lightning's dict as it is)")

    # Export: a regular .ckpt that Lightning loads without pmckpt.
    out = os.path.join(d, "exported.ckpt")
    export(os.path.join(topk, "last.ckpt"), out, io)
    m2 = Net.load_from_checkpoint(out)
    why = same(m2.state_dict(), model.state_dict())
    T.ok(not is_pointer(out) and why is None and m2.hparams.width == WIDTH,
         "export(): last.ckpt as a regular .ckpt, LightningModule.load_from_checkpoint gives "
         "the same weights and hyper-parameters", why)

    # Resuming from a named file: the written-out best step, and the pointer last.ckpt.
    for f in (f"step={best[0]}.ckpt", "last.ckpt"):
        start = best[0] if f != "last.ckpt" else steps
        t = trainer(d, io, [ModelCheckpoint(dirpath=os.path.join(d, "resume"),
                                            every_n_train_steps=1)], steps=start + 2)
        t.fit(Net(), ckpt_path=os.path.join(topk, f))
        T.ok(t.global_step == start + 2, f"trainer.fit(ckpt_path={f!r}) resumes at step "
             f"{start} and trains to {start + 2} (global_step {t.global_step})")
    io.close()

    # The command line, from another process (nothing holds the store now).
    names = sorted(f for f in os.listdir(os.path.join(d, "resume")) if f.endswith(".ckpt"))
    pointer = os.path.join(d, "resume", names[-1])
    out2 = os.path.join(d, "exported-cli.ckpt")
    r = subprocess.run([sys.executable, "-m", "pmckpt.lightning", "export", pointer, out2],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ok = r.returncode == 0 and torch.load(out2, weights_only=False)["global_step"] == \
        io.load_checkpoint(pointer)["global_step"]
    T.ok(ok and is_pointer(pointer), f"python -m pmckpt.lightning export {names[-1]} writes "
         "the same checkpoint as a regular file", r.stdout.decode(errors="replace")[-2000:])
    io.close()
    r = subprocess.run([sys.executable, "-m", "pmckpt.lightning", "export",
                        os.path.join(d, "missing.ckpt"), out2], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    T.ok(r.returncode == 1 and b"missing.ckpt" in r.stdout, "a missing file: exit 1 and a "
         "message naming it", r.stdout.decode(errors="replace"))

    # A hyper-parameter the store cannot keep: refused with its key path; the opt-in pickles it.
    for pickled in (False, True):
        io = PmckptCheckpointIO(ramdisk=os.path.join(d, f"rd-hp{int(pickled)}"),
                                pickle_hyperparameters=pickled)
        cb = ModelCheckpoint(dirpath=os.path.join(d, f"hp{int(pickled)}"),
                             every_n_train_steps=1, save_last=True)
        model = Net(extra=Opaque(7))
        try:
            trainer(d, io, [cb], steps=2).fit(model)
            err = None
        except pmckpt.UnsupportedObjectError as e:
            err = str(e)
        if not pickled:
            T.ok(err is not None and "hyper_parameters/extra" in err and
                 "pickle_hyperparameters=True" in err,
                 "a hyper-parameter the store cannot keep is refused, naming its key path and "
                 "the opt-in", err)
        else:
            ck = io.load_checkpoint(os.path.join(d, "hp1", "last.ckpt")) if err is None else {}
            extra = ck.get("hyper_parameters", {}).get("extra")
            T.ok(err is None and type(extra).__name__ == "Opaque" and extra.v == 7,
                 "pickle_hyperparameters=True: it is saved pickled and comes back", err)
        io.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.path.insert(0, os.path.dirname(HERE))
        worker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
