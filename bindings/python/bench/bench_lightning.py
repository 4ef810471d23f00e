# SPDX-License-Identifier: BSD-3-Clause
"""bench_lightning.py -- the Lightning plug-in: one Trainer, checkpointing every
step (ModelCheckpoint(every_n_train_steps=1, save_last=True)), training
throughput in steps per second, each configuration in a fresh process:

  none:  enable_checkpointing=False;
  async: Lightning's own AsyncCheckpointIO over TorchCheckpointIO, its files
         in --disk-dir (a local disk);
  ours:  PmckptCheckpointIO (asynchronous, the store in --ramdisk, the
         pointer files that ModelCheckpoint names in --disk-dir).

  ratio lightning_tput_every_step_vs_none: ours over none;
  ratio lightning_tput_every_step_vs_async_checkpointio: ours over async.

The model: an MLP of --width x --width layers (--layers), AdamW, a batch of
--batch rows per step; a checkpoint holds the weights and AdamW's two
moments.  Throughput is counted over the steps after the first --warmup
(the first checkpoint creates and prefaults the store).  One run each, on
the machine's CPUs: expect noise."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def worker(args, mode):
    import warnings
    import torch
    import lightning as L
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    warnings.simplefilter("ignore")
    torch.manual_seed(0)

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            layers = []
            for _ in range(args.layers):
                layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
            self.net = torch.nn.Sequential(*layers)

        def training_step(self, batch, idx):
            x = torch.randn(args.batch, args.width)
            return self.net(x).square().mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(range(1 << 20), batch_size=1)

    class Clock(Callback):
        def __init__(self):
            self.times = []

        def on_train_batch_end(self, *a):
            self.times.append(time.perf_counter())

    clock = Clock()
    callbacks = [clock]
    plugins = None
    ckpt_dir = os.path.join(args.disk_dir, mode)
    if mode != "none":
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=1,
                                         save_last=True))
    if mode == "async":
        from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO
        plugins = [AsyncCheckpointIO(TorchCheckpointIO())]
    elif mode == "ours":
        from pmckpt.lightning import PmckptCheckpointIO
        plugins = [PmckptCheckpointIO(ramdisk=args.ramdisk)]
    trainer = L.Trainer(max_steps=args.warmup + args.steps, plugins=plugins, callbacks=callbacks,
                        enable_checkpointing=mode != "none", logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu")
    model = Net()
    trainer.fit(model)
    t = clock.times
    # ModelCheckpoint's own save for a step runs in on_train_batch_end after Clock's:
    # the next step's time includes it.
    tput = args.steps / (t[-1] - t[args.warmup - 1])
    nbytes = 3 * sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"result {mode} {tput:.6f} {nbytes}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ramdisk", default=None)
    ap.add_argument("--disk-dir", default=None)
    ap.add_argument("--worker", default=None)
    args = ap.parse_args()
    if args.worker:
        worker(args, args.worker)
        return 0
    made = []
    if args.ramdisk is None:
        args.ramdisk = tempfile.mkdtemp(prefix="pmck-ltbench.", dir="/dev/shm")
        made.append(args.ramdisk)
    if args.disk_dir is None:
        args.disk_dir = tempfile.mkdtemp(prefix="pmck-ltbench.", dir="/var/tmp")
        made.append(args.disk_dir)
    res = {}
    try:
        for mode in ("none", "async", "ours"):
            cmd = [sys.executable, HERE, "--worker", mode, "--ramdisk", args.ramdisk,
                   "--disk-dir", args.disk_dir] + \
                  [f"--{k}={getattr(args, k)}" for k in ("width", "layers", "batch", "steps",
                                                         "warmup")]
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 timeout=1200).stdout.decode(errors="replace")
            line = [l.split() for l in out.splitlines() if l.startswith("result ")]
            if not line:
                sys.exit(f"bench_lightning: {mode} failed:\n{out[-3000:]}")
            res[mode] = float(line[0][2])
            nbytes = int(line[0][3])
    finally:
        for m in made:
            shutil.rmtree(m, ignore_errors=True)
    print(f"bench: lightning_checkpoint_size {nbytes / 1e6:.1f} MB")
    for mode, name in (("none", "no_checkpoints"), ("async", "async_checkpointio_every_step"),
                       ("ours", "pmckpt_every_step")):
        print(f"bench: lightning_tput_{name} {res[mode]:.3f} steps/s")
    print(f"ratio: lightning_tput_every_step_vs_none {res['ours'] / res['none']:.4f}")
    print(f"ratio: lightning_tput_every_step_vs_async_checkpointio "
          f"{res['ours'] / res['async']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
