# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed.checkpoint on several ranks (gloo on CPU, separate
processes, init_method file://) through pmckpt.dcp: a weight sharded by rows
as a DTensor on a CPU DeviceMesh, a replicated bias and an int.  Each rank
has Store(name=f"job-r{rank}", ramdisk=..., shared_dir=...).

  - dcp.save on 2 ranks, dcp.load on the same 2: bit-exact on every rank;
  - dcp.async_save with AsyncCheckpointerType.PROCESS (the writer pickled
    into DCP's checkpoint process, which reopens the store), then load;
  - resharding: 2 -> 1 (one process, no process group, plain tensors; from
    rank 0's store plus rank 1's copy-out file, and from the files alone),
    2 -> 4 (ranks 2 and 3 have no store);
  - zero-copy: 2 ranks, StorageWriter(staging="none") + hook_optimizer,
    async_save every step with opt.step() right after; each step bit-exact;
  - FSDP2: a small MLP, each Linear and the root under fully_shard on a
    2-rank CPU mesh, AdamW; get_state_dict -> dcp.save on 2 ranks (stores
    fsdp-rR), then dcp.load + set_state_dict into a fresh FSDP2 model and
    optimizer on the same 2 ranks, and 2 -> 1 into a plain model and AdamW
    in one process: full tensors bit-exact, and one more step afterwards
    equals an uninterrupted run;
  - data that is nowhere: a clear error naming rank, step and item;
  - Store(group=True) on 4 ranks, each loading the whole weight (the 3
    other ranks' copy-out files): bit-exact, each file's checksums checked
    by one rank for the group (each rank its own below the size worth it);
    a damaged file fails the load, named, on the ranks that did not check
    it too; a rank's store lost, its copy-out file kept: every rank loads;
    4 -> 2 ranks with a group, the metadata file checked once;
  - kill: 2 ranks with Store(group=True) async_save in a loop, one is
    killed with SIGKILL; after the restart dcp.load brings both to the same
    step, bit-exact, never older than the last global step.

Internally: test_dcp_ranks.py --worker MODE DIR RANK WORLD RDZV [ARGS]."""
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
ROWS, COLS = 8, 6


def full(step):
    """The unsharded state of `step`: weight, bias, int."""
    import torch
    g = torch.Generator().manual_seed(step)
    return (torch.randn(ROWS, COLS, generator=g), torch.randn(COLS, generator=g)
            .to(torch.bfloat16), step * 10 + 1)


def sharded(mesh, step):
    """This rank's view of `step` as DTensors, made without a collective (async_save may
    be running DCP's own collectives in its thread meanwhile)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    w, b, n = full(step)
    rank, world = mesh.get_local_rank(), mesh.size()
    rows = ROWS // world
    return {"model": {"w": DTensor.from_local(w[rank * rows:(rank + 1) * rows].clone(), mesh,
                                              [Shard(0)], run_check=False),
                      "b": DTensor.from_local(b, mesh, [Replicate()], run_check=False)},
            "n": n}


def check(state, step):
    """None if the state (DTensors or plain tensors) holds `step` bit-exactly."""
    import torch
    w, b, n = full(step)
    got_w, got_b = state["model"]["w"], state["model"]["b"]
    if hasattr(got_w, "full_tensor"):
        got_w, got_b = got_w.full_tensor(), got_b.full_tensor()
    for name, x, y in (("w", got_w, w), ("b", got_b, b)):
        if x.dtype != y.dtype or x.shape != y.shape or \
                not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            return f"{name} differs from step {step}"
    if state["n"] != n:
        return f"n = {state['n']}, step {step} saved {n}"
    return None



# ------------------------------------------------------------------ FSDP2

FSDP_STEP = 2  # training steps before the save; also the checkpoint_id


def fsdp_model(seed):
    """A small MLP (4,189 parameters; the last layer's 13 rows shard unevenly over 2
    ranks) with its own initial values, so a load visibly replaces them."""
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(),
                               torch.nn.Linear(48, 48), torch.nn.ReLU(),
                               torch.nn.Linear(48, 13))


def fsdp_train(model, opt, rank, steps, first=1):
    """AdamW steps first..steps, each rank its own batch (FSDP2 reduces the gradients)."""
    import torch
    for step in range(first, steps + 1):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(5, 24, generator=g), torch.randn(5, 13, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def fsdp_flat(model_sd, optim_sd):
    """{"model.FQN": tensor, "optim.state.FQN.KEY": tensor, "optim.param_groups": [...]}
    with every DTensor gathered into its full tensor (a collective: every rank calls it)."""
    flat = {}
    for k, v in model_sd.items():
        flat[f"model.{k}"] = v.full_tensor() if hasattr(v, "full_tensor") else v
    for fqn, st in optim_sd["state"].items():
        for k, v in st.items():
            flat[f"optim.state.{fqn}.{k}"] = v.full_tensor() if hasattr(v, "full_tensor") else v
    flat["optim.param_groups"] = [dict(g) for g in optim_sd["param_groups"]]
    return {k: (v.detach().clone() if hasattr(v, "detach") else v) for k, v in flat.items()}


def fsdp_diff(got, want):
    """None if `got` equals `want` (fsdp_flat's) bit for bit, else what differs."""
    import torch
    if sorted(got) != sorted(want):
        return f"keys {sorted(set(got) ^ set(want))}"
    for k, y in want.items():
        x = got[k]
        if isinstance(y, torch.Tensor):
            if not isinstance(x, torch.Tensor) or x.dtype != y.dtype or x.shape != y.shape or \
                    not torch.equal(x.reshape(-1).view(torch.uint8),
                                    y.reshape(-1).view(torch.uint8)):
                return f"{k} differs"
        elif x != y:
            return f"{k}: {x!r} != {y!r}"
    return None


# ------------------------------------------------------------------ ranks

def worker(mode, d, rank, world, rdzv, args):
    # DCP's checkpoint process (AsyncCheckpointerType.PROCESS) rendezvouses over TCP at
    # MASTER_ADDR, else at this host's name, which need not resolve (a chroot without
    # /etc/hosts): the loopback address always does.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    import datetime
    import logging
    import warnings
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import pmckpt
    import pmckpt.dcp

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    torch.set_num_threads(1)
    ram, shared = os.path.join(d, "ram"), os.path.join(d, "shared")
    out = lambda text: print(f"rank {rank} {text}", flush=True)  # noqa: E731

    if mode == "alone":  # 2 -> 1: one process, no process group, plain tensors
        step, name = int(args[0]), args[1]
        state = {"model": {"w": torch.zeros(ROWS, COLS), "b": torch.zeros(COLS, dtype=torch.bfloat16)},
                 "n": 0}
        with pmckpt.Store(name=name, ramdisk=ram, shared_dir=shared) as s:
            try:
                dcp.load(state, storage_reader=pmckpt.dcp.StorageReader(s), checkpoint_id=step)
            except BaseException as e:  # DCP wraps failures in CheckpointException
                out(f"error {str(e)!r}")
                return
        why = check(state, step)
        out("ok" if why is None else f"BAD {why}")
        return

    if mode == "fsdp-alone":  # FSDP2 2 -> 1: a plain model and AdamW, no process group
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        model = fsdp_model(seed=99)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        msd, osd = get_state_dict(model, opt)  # initializes AdamW's state (zeros)
        with pmckpt.Store(name=args[0], ramdisk=ram, shared_dir=shared + "-fsdp") as s:
            try:
                dcp.load({"model": msd, "optim": osd},
                         storage_reader=pmckpt.dcp.StorageReader(s), checkpoint_id=FSDP_STEP)
            except BaseException as e:
                out(f"fsdp-alone error {str(e)!r}")
                return
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
        why = fsdp_diff(fsdp_flat(*get_state_dict(model, opt)),
                        torch.load(os.path.join(d, "fsdp-full.pt")))
        out(f"fsdp-alone {'ok' if why is None else 'BAD ' + why}")
        return

    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (world,))

    def load_check(store, want, **kw):
        state = sharded(mesh, 0)
        dcp.load(state, storage_reader=pmckpt.dcp.StorageReader(store, **kw))
        return check(state, want)

    if mode == "save":
        s = pmckpt.Store(name=f"job-r{rank}", ramdisk=ram, shared_dir=shared, keep=4)
        dcp.save(sharded(mesh, 7), storage_writer=pmckpt.dcp.StorageWriter(s), checkpoint_id=7)
        s.close()  # one writer per store: the loader below, then DCP's checkpoint process
        with pmckpt.Store(name=f"job-r{rank}", ramdisk=ram, shared_dir=shared) as r:
            why = load_check(r, 7)
        out(f"same {'ok' if why is None else 'BAD ' + why}")
        fut = dcp.async_save(sharded(mesh, 8), storage_writer=pmckpt.dcp.StorageWriter(s),
                             checkpoint_id=8, async_checkpointer_type=AsyncCheckpointerType.PROCESS)
        fut.result()
        r = pmckpt.Store(name=f"job-r{rank}", ramdisk=ram, shared_dir=shared)
        why = load_check(r, 8)
        out(f"process {'ok' if why is None else 'BAD ' + why} step {r.last_recovery['step']} "
            f"pid {os.getpid()}")
        # use_collectives=False on 2 ranks: refused by name, nothing written, step 8 kept
        try:
            dcp.save(sharded(mesh, 9), storage_writer=pmckpt.dcp.StorageWriter(r),
                     checkpoint_id=9, use_collectives=False)
            why = "saved"
        except BaseException as e:  # noqa: B036 -- DCP may wrap it in CheckpointException
            why = None if "use_collectives=False" in str(e) else f"error {str(e)!r}"
        why = why or load_check(r, 8)
        out(f"nocoll {'ok' if why is None else 'BAD ' + why}")
        # DCP's plan caching on several ranks: the first save plans as usual; from the
        # second, DCP sends an empty plan, which the writer refuses by name (the replicas
        # DCP left to another rank, and the other ranks' whole plans, are unknown to it),
        # nothing written; a save without the cache then loads.
        from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
        bad = []
        with pmckpt.Store(name=f"cached-r{rank}", ramdisk=ram, shared_dir=shared + "-cached") as c:
            for step, caching in ((1, True), (2, True), (2, False)):
                try:
                    dcp.save(sharded(mesh, step), storage_writer=pmckpt.dcp.StorageWriter(c),
                             checkpoint_id=step,
                             planner=DefaultSavePlanner(enable_plan_caching=caching))
                    why = "saved" if (step, caching) == (2, True) else load_check(c, step)
                except BaseException as e:  # noqa: B036 -- DCP may wrap it (CheckpointException)
                    why = (None if (step, caching) == (2, True) and "plan caching" in str(e)
                           and load_check(c, 1) is None else f"error {str(e)[-600:]!r}")
                if why is not None:
                    bad.append(f"step {step} caching {caching}: {why}")
        out(f"cached {'ok' if not bad else 'BAD ' + '; '.join(bad)}")
    elif mode == "zerocopy":  # staging="none" + hook_optimizer, async_save every step
        s = pmckpt.Store(name=f"zc-r{rank}", ramdisk=ram, verify_sources=True, keep=2)
        w = torch.nn.Parameter(sharded(mesh, 1)["model"]["w"].to_local().clone())
        opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
        pmckpt.hook_optimizer(opt, s)
        bad = []
        for step in range(1, 6):
            w.grad = torch.full_like(w, float(step + rank))
            st = {"model": {"w": DTensor.from_local(w.detach(), mesh, [Shard(0)],
                                                    run_check=False)},
                  "optim": {"buf": opt.state[w]["momentum_buffer"] if opt.state else
                            torch.zeros_like(w)}}
            want = (w.detach().clone(), st["optim"]["buf"].clone())
            fut = dcp.async_save(st, storage_writer=pmckpt.dcp.StorageWriter(s, staging="none"),
                                 checkpoint_id=step)
            opt.step()  # at once: the hook waits until the save has begun, then for w
            fut.result()
            got = {"model": {"w": DTensor.from_local(torch.zeros_like(w.detach()), mesh,
                                                     [Shard(0)], run_check=False)},
                   "optim": {"buf": torch.zeros_like(w.detach())}}
            dcp.load(got, storage_reader=pmckpt.dcp.StorageReader(s, step=step))
            if not (torch.equal(got["model"]["w"].to_local(), want[0]) and
                    torch.equal(got["optim"]["buf"], want[1])):
                bad.append(step)
        out(f"zerocopy {'ok' if not bad else f'BAD steps {bad}'}")
        s.close()
    elif mode == "fsdp":  # FSDP2 fully_shard on 2 ranks: save, load into a fresh model
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.fsdp import fully_shard

        def build(seed):
            model = fsdp_model(seed)
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            return model, torch.optim.AdamW(model.parameters(), lr=0.01)

        model, opt = build(seed=5)
        fsdp_train(model, opt, rank, FSDP_STEP)
        msd, osd = get_state_dict(model, opt)
        sharded_ok = all(type(v).__name__ == "DTensor" for v in msd.values())
        want = fsdp_flat(msd, osd)
        if rank == 0:  # for the 2 -> 1 case
            torch.save(want, os.path.join(d, "fsdp-full.pt"))
        with pmckpt.Store(name=f"fsdp-r{rank}", ramdisk=ram, shared_dir=shared + "-fsdp") as s:
            dcp.save({"model": msd, "optim": osd}, storage_writer=pmckpt.dcp.StorageWriter(s),
                     checkpoint_id=FSDP_STEP)
        del model, opt, msd, osd
        model, opt = build(seed=6)  # other values; AdamW's state made by get_state_dict
        msd, osd = get_state_dict(model, opt)
        differs_before = fsdp_diff(fsdp_flat(msd, osd), want) is not None
        with pmckpt.Store(name=f"fsdp-r{rank}", ramdisk=ram, shared_dir=shared + "-fsdp") as s:
            dcp.load({"model": msd, "optim": osd}, storage_reader=pmckpt.dcp.StorageReader(s),
                     checkpoint_id=FSDP_STEP)
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
        why = fsdp_diff(fsdp_flat(*get_state_dict(model, opt)), want)
        if why is None and not sharded_ok:
            why = "parameters are not DTensors"
        if why is None and not differs_before:
            why = "the fresh model already held the saved values"
        if why is None:  # and it trains on: one more step on each, the same result
            fsdp_train(model, opt, rank, FSDP_STEP + 1, first=FSDP_STEP + 1)
            again = fsdp_flat(*get_state_dict(model, opt))
            model2, opt2 = build(seed=5)
            fsdp_train(model2, opt2, rank, FSDP_STEP + 1)
            why = fsdp_diff(again, fsdp_flat(*get_state_dict(model2, opt2)))
            why = None if why is None else f"after one more step: {why}"
        out(f"fsdp {'ok' if why is None else 'BAD ' + why}")
    elif mode == "share":  # Store(group=True): each rank reads the others' files, checked once
        from pmckpt import _dcp_sources
        checked, real = [], _dcp_sources.verify
        _dcp_sources.verify = lambda path: (checked.append(os.path.basename(path)), real(path))[1]
        if args[1] != "default":  # these files are tiny: below the size worth sharing
            pmckpt.dcp.StorageReader._SHARE_MIN = int(args[1])
        s = pmckpt.Store(name=args[2] if len(args) > 2 else "share", ramdisk=ram,
                         shared_dir=shared + "-share", group=True)  # this job's alone
        if args[0] == "save":
            dcp.save(sharded(mesh, 11), storage_writer=pmckpt.dcp.StorageWriter(s),
                     checkpoint_id=11)
            s.wait_copyout()
        # plain tensors: every rank reads the whole weight, a piece of every rank's
        state = {"model": {"w": torch.zeros(ROWS, COLS),
                           "b": torch.zeros(COLS, dtype=torch.bfloat16)}, "n": 0}
        try:
            dcp.load(state, storage_reader=pmckpt.dcp.StorageReader(s))
            why = check(state, 11)
        except BaseException as e:  # DCP wraps failures in CheckpointException
            why = f"error {str(e)!r}"
        out(f"checked {','.join(checked) or '-'} share {'ok' if why is None else 'BAD ' + why}")
        s.close()
    elif mode == "load":  # another number of ranks: stores job-rR where they exist
        step = int(args[0])
        s = pmckpt.Store(name=f"job-r{rank}", ramdisk=ram, shared_dir=shared)
        why = load_check(s, step, step=step)
        out("ok" if why is None else f"BAD {why}")
    elif mode in ("run", "recover"):  # Store(group=True): global steps
        s = pmckpt.Store(name="kill", ramdisk=ram, shared_dir=shared, group=True, threads=1)
        if mode == "recover":
            reader = pmckpt.dcp.StorageReader(s)
            state = sharded(mesh, 0)
            dcp.load(state, storage_reader=reader)
            why = check(state, reader.step)
            out(f"step {reader.step} {'ok' if why is None else 'BAD ' + why}")
            s.close()
        else:
            logfd = os.open(os.path.join(d, f"global.{rank}"),
                            os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            reader, first = pmckpt.dcp.StorageReader(s), 1
            try:  # a restarted job: resume after the step every rank loads
                dcp.load(sharded(mesh, 0), storage_reader=reader)
                first = reader.step + 1
            except BaseException:  # DCP wraps NoCheckpointError; the first run has nothing
                pass
            fut = None
            for step in range(first, 1 << 30):
                state = sharded(mesh, step)
                if fut is not None:
                    fut.result()
                    g = s.global_step
                    if g is not None:
                        os.write(logfd, f"{g}\n".encode())
                fut = dcp.async_save(state, storage_writer=pmckpt.dcp.StorageWriter(s),
                                     checkpoint_id=step)
                time.sleep(0.01)
    dist.destroy_process_group()


# ------------------------------------------------------------------ parent

def main():
    from tap import Tap
    T = Tap()
    seed = int(os.environ.get("PMCK_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    T.diag(f"seed {seed} (PMCK_TEST_SEED to repeat); gloo on CPU")
    d = T.tmpdir("pmck-py-dcp-ranks-")
    launches = [0]

    def launch(mode, world, *args, ranks=None):
        launches[0] += 1
        rdzv = os.path.join(d, f"rdzv.{launches[0]}")
        # each worker leads its own process group: DCP's checkpoint process and
        # multiprocessing's helpers inherit its stdout, and are ended with it
        return [subprocess.Popen([sys.executable, HERE, "--worker", mode, d, str(r), str(world),
                                  rdzv, *map(str, args)], start_new_session=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for r in (ranks if ranks is not None else range(world))]

    def end_group(p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def output(procs, timeout=150):
        """Each worker's output; a worker that outlives `timeout` (all of them together),
        or whose children hold its output open after it ended, is killed with its group."""
        text, end = "", time.monotonic() + timeout
        for p in procs:
            try:
                o, _ = p.communicate(timeout=max(1.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                end_group(p)
                try:
                    o, _ = p.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    o = b"(no output: its process group did not end)"
                o += b"\n(killed after the test's timeout)\n"
            end_group(p)  # what it left running (a checkpoint process) goes too
            text += o.decode(errors="replace")
        return text

    def oks(text, word, n):
        return sum(1 for l in text.splitlines() if l.startswith("rank ") and f" {word}" in l
                   and l.split(f" {word}", 1)[1].split()[0:1] == ["ok"]) == n

    text = output(launch("save", 2))
    T.ok(oks(text, "same", 2), "2 ranks: dcp.save then dcp.load on the same ranks, bit-exact "
         "(the bias DCP kept on one rank, the int, the shards)", text)
    procs = [l for l in text.splitlines() if " process ok step 8" in l]
    T.ok(len(procs) == 2, "2 ranks: dcp.async_save(PROCESS) reopens each store in DCP's "
         "checkpoint process; dcp.load gets step 8 bit-exact", text)

    T.ok(oks(text, "nocoll", 2), "2 ranks: dcp.save(use_collectives=False) refused by name, "
         "step 8 still loads", text)
    T.ok(oks(text, "cached", 2), "2 ranks: dcp.save with DCP's plan caching: the first save "
         "bit-exact, the second (its plans sent empty) refused by name with step 1 kept, then "
         "one without the cache bit-exact", text)

    text = output(launch("zerocopy", 2))
    T.ok(oks(text, "zerocopy", 2), "2 ranks: zero-copy dcp.async_save (staging='none') every "
         "step, opt.step() right after under hook_optimizer: every step loads bit-exact", text)

    t0 = time.time()
    text = output(launch("fsdp", 2))
    T.ok(oks(text, "fsdp", 2), "FSDP2 fully_shard on 2 ranks (gloo, CPU mesh), AdamW: "
         "get_state_dict -> dcp.save, dcp.load + set_state_dict into a fresh model and "
         "optimizer: the full tensors bit-exact (model, AdamW state, param_groups); one more "
         "step equals an uninterrupted run", text)
    T.diag(f"FSDP2 2 ranks: {time.time() - t0:.1f} s")
    t0 = time.time()
    text = output(launch("fsdp-alone", 1, "fsdp-r0"))
    T.ok(oks(text, "fsdp-alone", 1), "FSDP2 2 -> 1: a plain model and AdamW in one process "
         "(no process group): rank 0's store plus rank 1's copy-out file, bit-exact", text)
    text = output(launch("fsdp-alone", 1, "nobody"))
    T.ok(oks(text, "fsdp-alone", 1), "FSDP2 2 -> 1 from the copy-out files alone", text)
    T.diag(f"FSDP2 2 -> 1, both: {time.time() - t0:.1f} s")

    text = output(launch("alone", 1, 7, "job-r0"))
    T.ok(oks(text, "ok", 1) or "rank 0 ok" in text, "2 -> 1 (no process group, plain tensors): "
         "rank 0's store plus rank 1's copy-out file", text)
    text = output(launch("alone", 1, 8, "nobody"))
    T.ok("rank 0 ok" in text, "2 -> 1 from the copy-out files alone (no local store)", text)

    text = output(launch("load", 4, 8))
    T.ok(text.count(" ok") == 4 and "BAD" not in text, "2 -> 4: every rank bit-exact (ranks 2 "
         "and 3 without a store read the copy-out files)", text)

    # data that is nowhere: rank 1's file of step 7 removed, no local store
    os.unlink(os.path.join(d, "shared", "step-000000000007", "rank-00001.safetensors"))
    text = output(launch("alone", 1, 7, "nobody"))
    T.ok("error" in text and "rank 1" in text and "step 7" in text and "w@4" in text,
         "rank 1's data of step 7 nowhere: the error names rank, step and item", text)
    T.diag(text.strip()[:300])

    # Store(group=True), 4 ranks: each copy-out file checked by one rank for all its readers
    def checks(text):
        return sorted(f for l in text.splitlines() if l.startswith("rank ") and " checked " in l
                      for f in l.split()[3].split(",") if f != "-")
    files = [f"rank-{r:05d}.safetensors" for r in range(4)]
    text = output(launch("share", 4, "save", 0))
    T.ok(oks(text, "share", 4) and checks(text) == files,
         "Store(group=True), 4 ranks each loading the whole weight (the 3 other ranks' "
         "copy-out files): bit-exact, each file checked by one rank (4 checks, not 12)", text)
    text = output(launch("share", 4, "load", "default"))
    T.ok(oks(text, "share", 4) and checks(text) == sorted(files * 3),
         "the same with files below the size worth a collective: each rank checks the 3 it "
         "reads", text)
    from common import flip
    from pmckpt.safetensors import _header_bytes, read_header
    damaged = os.path.join(d, "shared-share", "step-000000000011", "rank-00002.safetensors")
    a, b = max((e["data_offsets"] for k, e in read_header(damaged).items()
                if k != "__metadata__"), key=lambda o: o[1] - o[0])  # its largest tensor
    os.unlink(os.path.join(d, "ram", "pmckpt-share-rank1.pool"))
    text = output(launch("share", 4, "load", 0))
    T.ok(oks(text, "share", 4),
         "Store(group=True), rank 1's store lost: the group's recovery makes it from its "
         "copy-out file, every rank bit-exact", text)
    text = output(launch("share", 2, "load", 0, "share2"))
    T.ok(oks(text, "share", 2) and checks(text) == files,
         "4 -> 2 ranks with Store(group=True) (no stores of that name): bit-exact, rank 0's "
         "file checked once for the metadata, each other file once", text)
    flip(damaged, 8 + len(_header_bytes(damaged)) + (a + b) // 2)
    text = output(launch("share", 4, "load", 0))
    errors = [l.split(" share ", 1)[1] for l in text.splitlines()
              if l.startswith("rank ") and " share BAD error" in l]
    T.ok(oks(text, "share", 0) and len(errors) == 4 and
         all("rank-00002.safetensors" in e for e in errors) and
         any("checked for this load by rank" in e for e in errors),
         "4 ranks, rank 2's file damaged: the load fails on every rank, naming the file, "
         "also where another rank checked it", text)

    # kill one rank during dcp.async_save (Store(group=True)); restart: one step, bit-exact
    from ranks import Ranks
    last_global = Ranks(HERE, d, 2).last_global  # only its log reader

    bad = 0
    trials = int(os.environ.get("PMCK_DCP_KILL_TRIALS", 2))
    for t in range(1, trials + 1):
        before = last_global()
        procs = launch("run", 2)
        deadline = time.time() + 90
        while time.time() < deadline and last_global() == before and \
                all(p.poll() is None for p in procs):
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 0.5))
        victim = rng.randrange(2)
        procs[victim].send_signal(signal.SIGKILL)
        time.sleep(rng.uniform(0, 0.2))
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        last = last_global() or 0
        text = output(launch("recover", 2))
        lines = [l.split() for l in text.splitlines() if l.startswith("rank ")]
        steps = {int(l[3]) for l in lines if len(l) == 5 and l[2] == "step" and l[4] == "ok"}
        good = sum(1 for l in lines if len(l) == 5 and l[4] == "ok")
        if good == 2 and len(steps) == 1 and min(steps) >= last:
            T.diag(f"kill {t}: rank {victim} killed; last global step {last}, "
                   f"both ranks loaded step {min(steps)}")
        else:
            bad += 1
            T.diag(f"kill {t}: rank {victim} killed; last global step {last}: FAILED\n{text}")
    T.ok(bad == 0, f"{trials} kills during dcp.async_save: both ranks load the same step, "
         "bit-exact, never older than the last global step")
    return T.done()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.path.insert(0, os.path.dirname(HERE))
        a = sys.argv
        worker(a[2], a[3], int(a[4]), int(a[5]), a[6], a[7:])
    else:
        sys.exit(main())
