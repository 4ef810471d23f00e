# SPDX-License-Identifier: BSD-3-Clause
"""CUDA tensors through libpmckpt's GPU path (device memory -> region, no
staging copy through host memory), with every GPU strategy; a training loop
on the GPU with save_async and the optimizer hook; the stream contract
(docs/gpu.md): save_async does not synchronise the device, tensors written
on a side stream are saved with their new values, work queued later on the
default stream does not hold a checkpoint up; DCP's StorageWriter with CUDA
tensors; the writers hashing on the host (PMCK_GPU_HASH=host; the GPU hashes
by default) through the same tests, and Store(gpu_hash=);
snapshots on wait (Store(gpu_snapshot_on_wait=)) under every-step training;
loads whose copies cross while the slot is verified; GradientLog's records
replayed on the GPU.
Skipped, with the reason, where torch sees no GPU or this libpmckpt cannot
use one."""
import os

import torch

import pmckpt
from pmckpt import _lib

from common import clone, flip, load_past_rejections, same, slot_address
from tap import Tap

T = Tap()
if not torch.cuda.is_available():
    print("1..0 # SKIP torch sees no CUDA device")
    raise SystemExit(0)
if not pmckpt.gpu_available(0):
    print(f"1..0 # SKIP libpmckpt cannot use the GPU: {pmckpt.gpu_unavailable_reason(0)}")
    raise SystemExit(0)
D = T.tmpdir("pmck-py-gpu-")
dev = torch.device("cuda", 0)
SUFFIX = ""  # of the stores' names: "-hh" under host_hashing, so that each test has its own
T.diag(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {pmckpt.library_path}")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                               torch.nn.Linear(2048, 512)).to(dev)


def gpu_state():
    m = model()
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(64, 512, device=dev)).square().mean().backward()
    opt.step()
    g = torch.Generator(device=dev).manual_seed(1)
    return {"model": m.state_dict(), "optim": opt.state_dict(),
            "bf16": torch.randn(33, 7, device=dev, generator=g).bfloat16(),
            "rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state(), "step": 1}


SOURCES = {"direct": _lib.SOURCE_GPU_DIRECT, "kernel": _lib.SOURCE_GPU_KERNEL,
           "staged": _lib.SOURCE_GPU_STAGED, "snapshot": _lib.SOURCE_GPU_SNAPSHOT}


def test_strategy(src):
    st = gpu_state()
    want = clone(st)
    with pmckpt.Store(name=f"gpu-{src}{SUFFIX}", ramdisk=D, gpu_source=src) as s:
        s.save(st, 1)
        if s._pipe_source[0] != SOURCES[src]:
            return f"pipeline source {s._pipe_source}, not the GPU strategy {src}"
        out = s.load()  # back where it was saved: CUDA tensors on the GPU
        r = same(want, out)
        if r:
            return r
        cpu = s.load(map_location="cpu")
        if cpu["model"]["0.weight"].device.type != "cpu":
            return "map_location ignored"
        return same(want["model"]["0.weight"].cpu(), cpu["model"]["0.weight"])


def saved_twice(name, st):
    """Store `name` holding st with its tensors zeroed at step 1, and st at step 2."""
    with pmckpt.Store(name=name, ramdisk=D) as s:
        s.save({k: (v * 0 if isinstance(v, torch.Tensor) else v) for k, v in st.items()}, 1)
        s.save(st, 2)


def test_early_load():
    """load(into=) of CUDA tensors: their copies cross PCIe into a scratch buffer
    while the CPU verifies the slot (_EarlyCopies; its failure cases are
    test_store.py's), then reach the tensors: bit-exact, in place."""
    g = torch.Generator(device=dev).manual_seed(3)
    st = {f"w{i}": torch.randn(1 << 20, device=dev, generator=g) for i in range(8)}
    st["host"] = torch.arange(10)
    st["step"] = 2
    want = clone(st)
    saved_twice("gpu-early", st)
    into = {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else v) for k, v in st.items()}
    w0 = into["w0"]
    with pmckpt.Store(name="gpu-early", ramdisk=D) as s:
        out = s.load(into=into)
        rec = s.last_recovery
    if rec.get("early_bytes", 0) < 8 * 4 << 20:
        return f"the CUDA tensors' copies did not start before verification: {rec}"
    if rec.get("copies_verified_bytes") != 8 * 4 << 20:
        return f"the copies were not verified on the GPU (pmck_gpu_hasher): {rec}"
    if out["w0"] is not w0:
        return "into='s tensor was not filled in place"
    T.diag(f"{rec['early_bytes']} bytes crossed while step {rec['step']} was verified, "
           f"{rec['copies_verified_bytes']} of them by the GPU's checksums")
    r = same(want, out)
    if r:
        return r
    # A copy whose bytes differ from the slot's (the hasher pointed at another
    # tensor's copy of the same size): its checksum rejects the newest slot.
    from pmckpt import _recovery
    cls = _recovery._CopiesChecksums
    real, swaps = cls.add, []

    def swapped(self, bufs):
        big = [b for b in bufs if b[2] == 4 << 20]
        if len(big) >= 2 and not swaps:
            swaps.append(big[0][0])
            bufs = [(big[0][0], big[1][1], big[0][2])] + [b for b in bufs if b is not big[0]]
        return real(self, bufs)
    cls.add = swapped
    try:
        out, rec = load_past_rejections(D, "gpu-early", into=into)
    finally:
        cls.add = real
    if not swaps:
        return "no piece of the copies held two tensors of 4 MiB to swap"
    if rec["step"] != 1 or "early_bytes" in rec or "copies_verified_bytes" in rec:
        return f"a copy's GPU checksum differs: loaded {rec}, wanted step 1 without the copies"
    if any(t.count_nonzero().item() for k, t in out.items() if k[0] == "w"):
        return "a copy's GPU checksum differs: step 1's tensors (zeros) not loaded"


def test_early_load_many_small():
    """load(into=) and load() of many small CUDA tensors, under 16 MiB in all
    (_EARLY_MANY): their copies cross early, in a few copies, verified on the
    GPU; bit-exact."""
    g = torch.Generator(device=dev).manual_seed(7)
    st = {f"p{i}": torch.randn(64 + i % 7, 64, device=dev, generator=g) for i in range(300)}
    st["step"] = 2
    want = clone(st)
    saved_twice("gpu-early-many", st)
    for into in (clone(st), None):
        if into is not None:
            for t in into.values():
                if isinstance(t, torch.Tensor):
                    t.zero_()
        with pmckpt.Store(name="gpu-early-many", ramdisk=D) as s:
            out = s.load(into=into) if into is not None else s.load()
            rec = s.last_recovery
        what = "into=" if into is not None else "new tensors"
        nbytes = sum(t.numel() * 4 for k, t in st.items() if k != "step")
        if rec.get("early_bytes") != nbytes or rec.get("copies_verified_bytes") != nbytes:
            return f"{what}: 300 small tensors ({nbytes} bytes) not all early and verified: {rec}"
        r = same(want, out)
        if r:
            return f"{what}: {r}"


def test_early_load_made():
    """load() into new tensors of a CUDA state, and map_location="cuda" of a
    host one: the new CUDA tensors' copies cross PCIe while the CPU verifies
    the slot (_EarlyCopies made=True; test_store.py has its cases on host
    tensors), large ones straight into their tensors, small ones through a
    scratch buffer: bit-exact, each tensor its own memory; the newest slot
    damaged, the older one's values, without the early copies."""
    g = torch.Generator(device=dev).manual_seed(4)
    st = {f"w{i}": torch.randn(1 << 20, device=dev, generator=g) for i in range(8)}
    st.update({f"b{i}": torch.randn(1000, device=dev, generator=g) for i in range(8)})
    st["host"] = torch.arange(10)
    st["step"] = 2
    want = clone(st)
    saved_twice("gpu-early-made", st)
    with pmckpt.Store(name="gpu-early-made", ramdisk=D) as s:
        out = s.load()
        rec = s.last_recovery
    cuda_bytes = sum(v.numel() * 4 for k, v in st.items() if k[0] in "wb")
    if rec.get("early_bytes") != cuda_bytes:
        return f"the CUDA tensors' copies did not all start before verification: {rec}"
    if rec.get("copies_verified_bytes") != cuda_bytes:
        return f"the copies were not verified on the GPU (pmck_gpu_hasher): {rec}"
    if len({t.untyped_storage().data_ptr() for k, t in out.items() if k != "step"}) != 17:
        return "the new tensors share memory"
    r = same(want, out)
    if r:
        return r
    path, off, _ = slot_address(D, "gpu-early-made", rec["slot"], "w3")
    flip(path, off + 4)
    out, rec = load_past_rejections(D, "gpu-early-made")
    if rec["step"] != 1 or "early_bytes" in rec:
        return f"newest slot damaged: loaded {rec}, wanted step 1 without the early copies"
    if any(t.count_nonzero().item() for k, t in out.items() if k[0] in "wb"):
        return "newest slot damaged: step 1's tensors (zeros) not loaded"
    host = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in st.items()}
    with pmckpt.Store(name="gpu-early-host", ramdisk=D) as s:
        s.save(host, 1)
    with pmckpt.Store(name="gpu-early-host", ramdisk=D) as s:
        out = s.load(map_location="cuda")
        rec = s.last_recovery
    if rec.get("early_bytes", 0) != cuda_bytes + 10 * 8 or \
            rec.get("copies_verified_bytes") != cuda_bytes + 10 * 8:
        return f"map_location='cuda': the copies did not all start before verification: {rec}"
    T.diag(f"{rec['early_bytes']} bytes crossed while step {rec['step']} was verified")
    return same({k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in host.items()},
                out)


def test_train_async():
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device=dev)
    m(x).square().mean().backward()
    opt.step()
    with pmckpt.Store(name="gpu-train", ramdisk=D) as s:
        pmckpt.hook_optimizer(opt, s)
        for step in range(1, 6):
            m(x).square().mean().backward()
            st = {"model": m.state_dict(), "optim": opt.state_dict(), "step": step}
            snap = clone(st)
            s.save_async(st, step)
            opt.step()  # in place on the GPU: waits (hook) for the layers it updates
            opt.zero_grad()
            r = same(snap, s.load())
            if r:
                return f"step {step}: {r}"
        T.diag(f"pipeline: {s.stats()['pipeline']}")


_CYCLES_PER_S = []


def spin(seconds):
    """A kernel spinning on the current stream for about `seconds` (calibrated once)."""
    if not _CYCLES_PER_S:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(10 ** 7)
        b.record()
        b.synchronize()
        _CYCLES_PER_S.append(10 ** 7 / (a.elapsed_time(b) / 1e3))
    torch.cuda._sleep(int(seconds * _CYCLES_PER_S[0]))


def test_side_stream(src):
    """Written by kernels on a side stream held back 0.3 s, saved at once from it."""
    st = {f"t{i}": torch.zeros(1 << 20, device=dev) for i in range(4)}
    side = torch.cuda.Stream(dev)
    with pmckpt.Store(name=f"gpu-side-{src}{SUFFIX}", ramdisk=D, gpu_source=src) as s:
        s.save(st, 1)  # the first save makes the pipeline (cudaHostRegister may synchronise)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            spin(0.3)
            for i, t in enumerate(st.values()):
                t.fill_(i + 1.5)
            done = torch.cuda.Event()
            done.record()
            h = s.save_async(st, 2)  # the current stream is `side`
            if done.query():
                return "save_async waited for the side stream (it must not synchronise)"
        h.wait()
        out = s.load()
        for i, k in enumerate(st):
            if not torch.equal(out[k], torch.full((1 << 20,), i + 1.5, device=dev)):
                return f"{k}: not the side stream's values"


def test_default_stream_busy(src):
    """A kernel queued on the default stream right after save_async does not hold it up."""
    st = {f"t{i}": torch.randn(1 << 20, device=dev) for i in range(4)}
    want = clone(st)
    with pmckpt.Store(name=f"gpu-busy-{src}", ramdisk=D, gpu_source=src) as s:
        s.save(st, 1)  # the first save makes the pipeline (cudaHostRegister may synchronise)
        h = s.save_async(st, 2)
        spin(2.0)
        busy = torch.cuda.Event()
        busy.record()
        h.wait()
        if busy.query():
            return "the checkpoint committed only after the default stream's 2 s kernel"
        torch.cuda.synchronize(dev)
        return same(want, s.load())


def test_train_every_step(on_busy="wait", src="direct", snapshot_on_wait=False):
    """12 steps, a checkpoint of each, the optimizer's update waiting stream-ordered; the
    two newest checkpoints (both slots) equal the states they were taken from.
    on_busy='queue': each save after the first begins in the store's thread, its copies
    on the store's stream ordered after the event of its call.  snapshot_on_wait
    (Store(gpu_snapshot_on_wait=)): one writer, so that the hook finds pieces untaken
    and snapshots them; it must have snapshotted some."""
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device=dev)
    m(x).square().mean().backward()
    opt.step()  # the optimizer's state exists from the first checkpoint on (one layout)
    snaps = {}
    queued = 0
    extra = {"gpu_snapshot_on_wait": snapshot_on_wait, "threads": 1} if snapshot_on_wait else {}
    with pmckpt.Store(name=f"gpu-every-{on_busy}-{src}-{int(snapshot_on_wait)}{SUFFIX}",
                      ramdisk=D, on_busy=on_busy, gpu_source=src, **extra) as s:
        pmckpt.hook_optimizer(opt, s)
        for step in range(1, 13):
            m(x).square().mean().backward()
            st = {"model": m.state_dict(), "optim": opt.state_dict(), "step": step}
            snaps[step] = clone(st)
            queued += s.save_async(st, step)._queued is not None
            opt.step()
            opt.zero_grad()
        s.wait()
        if on_busy == "queue" and queued < 6:
            return f"only {queued} of 12 saves were queued behind one in flight"
        snapped = s.stats()["pipeline"]["snapshot_on_wait_pieces"]
        T.diag(f"{src}, on_busy={on_busy}: {snapped} pieces snapshotted on wait")
        if snapshot_on_wait and not snapped:
            return "the hook's waits snapshotted nothing, with one writer behind"
        for step in (11, 12):
            r = same(snaps[step], s.load(step=step))
            if r:
                return f"step {step}: {r}"


def test_gradlog(src="direct", on_busy="wait", side=False, k=1):
    """pmckpt.GradientLog every step on the GPU (whole states and gradient records in
    turn; k: records_per_state), nothing synchronised, on the default stream or a side
    stream: the state after 11 steps (a whole state) and after 12 (a record replayed with
    CUDA's AdamW onto the whole state of step 11) load bit-exact into a new model and
    optimizer; with k = 3 after 9 (a whole state) and 12 (three records replayed onto
    the whole state of step 9)."""
    def build():
        m = model()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=True)
        return m, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (1 + k))

    for n in ((11, 12) if k == 1 else (9, 12)):
        name = f"gpu-gradlog-{src}-{on_busy}-{int(side)}-{k}-{n}{SUFFIX}"
        m, opt, sched = build()
        stream = torch.cuda.Stream(dev) if side else torch.cuda.current_stream(dev)
        kinds = []
        with pmckpt.GradientLog(opt, name=name, ramdisk=D, gpu_source=src, on_busy=on_busy,
                                records_per_state=k) as log, torch.cuda.stream(stream):
            x = torch.randn(256, 512, device=dev)
            for step in range(1, n + 1):
                m(x * step).square().mean().backward()
                opt.step()
                sched.step()
                st = {"model": m.state_dict(), "optim": opt.state_dict(),
                      "sched": sched.state_dict(), "step": step}
                want = clone(st)  # on the current stream, ordered after the step
                kinds.append(log.save_async(st, step).kind)
                opt.zero_grad()
            log.wait()
        if kinds != ((["state"] + ["record"] * k) * n)[:n]:
            return f"kinds {kinds}"
        m2, opt2, _ = build()
        with pmckpt.GradientLog(opt2, name=name, ramdisk=D, gpu_source=src,
                                records_per_state=k) as log:
            got = log.load()
            rec = log.last_recovery
        replayed = (n - 1) % (k + 1)
        if rec["step"] != n or rec["records_replayed"] != replayed:
            return f"{n} steps: last_recovery {rec}"
        r = same(want, got)
        if r:
            return f"{n} steps: {r}"
        if replayed and not all(p.is_cuda for p in got["model"].values()):
            return "the replayed parameters are not on the GPU"


def test_dcp(staging):
    import torch.distributed.checkpoint as dcp
    import pmckpt.dcp
    g = torch.Generator(device=dev).manual_seed(3)
    st = {"model": model().state_dict(),
          "extra": {"bf16": torch.randn(33, 7, device=dev, generator=g).bfloat16()}}
    want = clone(st)
    with pmckpt.Store(name=f"gpu-dcp-{staging}", ramdisk=D) as s:
        w = pmckpt.dcp.StorageWriter(s, staging=staging)
        if staging == "none":
            dcp.async_save(st, storage_writer=w, checkpoint_id=3).result()
        else:
            dcp.save(st, storage_writer=w, checkpoint_id=3)
    back = clone(st)
    for d in (back["model"], back["extra"]):
        for t in d.values():
            t.zero_()
    with pmckpt.Store(name=f"gpu-dcp-{staging}", ramdisk=D) as s:
        dcp.load(back, storage_reader=pmckpt.dcp.StorageReader(s))
    if back["model"]["0.weight"].device != dev:
        return f"loaded onto {back['model']['0.weight'].device}"
    return same(want, back)


def test_partner_nccl():
    """Partner copies over NCCL (partner_transport="nccl"): 2 ranks, each on its own
    device and "node"; 3 steps saved; node 1 lost: both back on step 3, rank 1 from
    its partner, bit-exact (gpu_partner_worker.py)."""
    import os
    import shutil
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.join(D, "partner-nccl")
    os.makedirs(d, exist_ok=True)

    def launch(mode, n):
        rdzv = os.path.join(d, f"rdzv.{n}")
        procs = [subprocess.Popen([sys.executable, os.path.join(here, "gpu_partner_worker.py"),
                                   mode, d, str(r), rdzv], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for r in range(2)]
        return "".join(p.communicate(timeout=300)[0] for p in procs)

    text = launch("save", 1)
    if any(f"rank {r} saved 3" not in text for r in range(2)):
        return f"saving failed:\n{text}"
    shutil.rmtree(os.path.join(d, "node1"))
    text = launch("recover", 2)
    if "rank 0 step 3 tier local ok" not in text or "rank 1 step 3 tier partner ok" not in text:
        return f"recovery of node 1 from its partner failed:\n{text}"


def host_hashing(fn, *args):
    """fn(*args) with PMCK_GPU_HASH=host: the pipelines its stores make (at their
    first save) have the writers hash what lands, 12 of them, as before the GPU's
    hashing became the default (docs/gpu.md)."""
    global SUFFIX
    before = os.environ.get("PMCK_GPU_HASH")
    os.environ["PMCK_GPU_HASH"] = "host"
    SUFFIX = "-hh"
    try:
        return fn(*args)
    finally:
        SUFFIX = ""
        if before is None:
            del os.environ["PMCK_GPU_HASH"]
        else:
            os.environ["PMCK_GPU_HASH"] = before


def test_gpu_hash_option():
    """Store(gpu_hash=): "device" (the default) has the GPU hash (the writers wait for
    its hashes: writer_hash_wait_ns), with 4 writers; "host" the writers, 12 of them;
    either way bit-exact, under $PMCK_GPU_HASH unset."""
    if os.environ.get("PMCK_GPU_HASH"):
        return "PMCK_GPU_HASH is set: it would decide instead of gpu_hash"
    st = gpu_state()
    want = clone(st)
    cpus = pmckpt.store.usable_cpus()
    for where, writers in ((None, 4), ("device", 4), ("host", 12)):
        kw = {"gpu_hash": where} if where else {}
        with pmckpt.Store(name=f"gpu-hash-{where}", ramdisk=D, **kw) as s:
            s.save(st, 1)
            s.save(st, 2)
            waited = s.stats()["pipeline"]["writer_hash_wait_ns"]
            if (waited > 0) != (where != "host"):
                return f"gpu_hash={where!r}: the writers waited {waited} ns for the GPU's hashes"
            if s._gpu_threads != min(writers, cpus):
                return f"gpu_hash={where!r}: {s._gpu_threads} writers, not min({writers}, {cpus})"
            r = same(want, s.load())
            if r:
                return f"gpu_hash={where!r}: {r}"


def test_early_load_memory():
    """The early copies' free-memory check (_recovery.cuda_memory_free made to
    say how much is free): load(into=) of part of a state counts, beside its
    scratch buffer, the tensors the load then makes on the device (none early
    where they do not fit: 48 MiB seen free for 32 + 32 MiB); with room for
    both, early.  load() into new tensors with too little room for the scratch
    buffer: the large tensors still cross early, the small ones after the
    verification.  Every result bit-exact."""
    from pmckpt import _recovery
    g = torch.Generator(device=dev).manual_seed(5)
    st = {f"w{i}": torch.randn(1 << 20, device=dev, generator=g) for i in range(8)}
    st.update({f"o{i}": torch.randn(1 << 20, device=dev, generator=g) for i in range(8)})
    st.update({f"b{i}": torch.randn(1000, device=dev, generator=g) for i in range(8)})
    st["step"] = 2
    want = clone(st)
    saved_twice("gpu-early-mem", st)
    real = _recovery.cuda_memory_free
    mib = 1 << 20
    try:
        for seen_free, early in ((48 * mib * 8 // 7, False), (66 * mib * 8 // 7, True)):
            _recovery.cuda_memory_free = lambda d, f=seen_free: (f, 0)
            into = {k: torch.zeros_like(v) for k, v in st.items() if k[0] == "w"}
            with pmckpt.Store(name="gpu-early-mem", ramdisk=D) as s:
                out = s.load(into=into)
                rec = s.last_recovery
            if bool(rec.get("early_bytes")) != early:
                return (f"into= of 32 MiB, 32 MiB more made, {seen_free >> 20} MiB seen free: "
                        f"early copies {'wanted' if early else 'not wanted'}: {rec}")
            r = same(want, out)
            if r:
                return r
        _recovery.cuda_memory_free = lambda d: (0, 0)
        with pmckpt.Store(name="gpu-early-mem", ramdisk=D) as s:
            out = s.load()
            rec = s.last_recovery
        large = 16 * 4 * mib
        if rec.get("early_bytes") != large:
            return f"new tensors, no room for the scratch buffer: {rec}, wanted {large} early"
        return same(want, out)
    finally:
        _recovery.cuda_memory_free = real


def test_early_load_side_stream():
    """load(into=) and load() into new tensors with a side stream current (the
    copies go on it, the load waits for it): bit-exact, early copies taken."""
    g = torch.Generator(device=dev).manual_seed(6)
    st = {f"w{i}": torch.randn(1 << 20, device=dev, generator=g) for i in range(8)}
    st.update({f"b{i}": torch.randn(1000, device=dev, generator=g) for i in range(8)})
    st["step"] = 2
    want = clone(st)
    saved_twice("gpu-early-side", st)
    side = torch.cuda.Stream(dev)
    for into in (clone(st), None):
        if into is not None:
            for t in into.values():
                if isinstance(t, torch.Tensor):
                    t.zero_()
        torch.cuda.synchronize()
        with pmckpt.Store(name="gpu-early-side", ramdisk=D) as s, torch.cuda.stream(side):
            out = s.load(into=into) if into is not None else s.load()
            rec = s.last_recovery
        if not rec.get("early_bytes") or not rec.get("copies_verified_bytes"):
            return f"{'into=' if into is not None else 'new tensors'}: no early copies, or " \
                f"none verified on the GPU: {rec}"
        r = same(want, out)
        if r:
            return f"{'into=' if into is not None else 'new tensors'}: {r}"


for src in SOURCES:
    T.run(f"CUDA state_dict through the GPU path ({src}): saved, loaded on the GPU and on the CPU",
          test_strategy, src)
for src in ("direct", "kernel", "snapshot"):
    T.run(f"host hashing, {src}: a CUDA state_dict saved, loaded on the GPU and on the CPU",
          host_hashing, test_strategy, src)
    T.run(f"host hashing, {src}: tensors written on a side stream, saved at once: the new "
          "values", host_hashing, test_side_stream, src)
T.run("Store(gpu_hash=): by default and with 'device' hashed on the GPU, 4 writers; with "
      "'host' by the 12 writers; bit-exact", test_gpu_hash_option)
T.run("load(into=) CUDA tensors: copies overlapped with verification, bit-exact", test_early_load)
T.run("load() into new CUDA tensors: copies overlapped with verification, bit-exact",
      test_early_load_made)
T.run("load(into=) and load() of 300 small CUDA tensors: early, verified on the GPU, bit-exact",
      test_early_load_many_small)
T.run("early copies and free device memory: what the load makes beside the scratch buffer "
      "counted; too little room, the small new tensors after verification; bit-exact",
      test_early_load_memory)
T.run("load(into=) and load() of CUDA tensors with a side stream current: bit-exact",
      test_early_load_side_stream)
T.run("training on the GPU with save_async + hook_optimizer: each checkpoint equals its state",
      test_train_async)
for src in SOURCES:
    T.run(f"{src}: tensors written on a side stream, saved at once from it without a "
          "synchronisation: the new values", test_side_stream, src)
    T.run(f"{src}: a 2 s kernel queued on the default stream after save_async does not hold "
          "the checkpoint up", test_default_stream_busy, src)
T.run("every step with hook_optimizer (stream-ordered waits): the newest checkpoints bit-exact",
      test_train_every_step)
for src in ("direct", "snapshot"):
    T.run(f"on_busy='queue', {src}: every step with hook_optimizer, saves begun by the "
          "store's thread: the newest checkpoints bit-exact", test_train_every_step, "queue", src)
T.run("host hashing: every step with hook_optimizer: the newest checkpoints bit-exact",
      host_hashing, test_train_every_step)
for src, room in (("direct", True), ("direct", 5 << 20), ("kernel", True), ("staged", True)):
    T.run(f"snapshots on wait, {src}, {'room for all' if room is True else '5 MiB'}: every "
          "step with hook_optimizer, the hook snapshotting what one writer has not reached: "
          "the newest checkpoints bit-exact", test_train_every_step, "wait", src, room)
T.run("snapshots on wait with host hashing and on_busy='queue': every step bit-exact",
      host_hashing, test_train_every_step, "queue", "direct", True)
for src, on_busy, side in (("direct", "wait", False), ("snapshot", "queue", False),
                           ("direct", "wait", True)):
    T.run(f"GradientLog every step, {src}, on_busy='{on_busy}'"
          f"{', on a side stream' if side else ''}: a whole state and a record replayed "
          "with CUDA's AdamW load bit-exact", test_gradlog, src, on_busy, side)
T.run("GradientLog every step, chains of three records, snapshot, on_busy='queue': a whole "
      "state and three records replayed with CUDA's AdamW load bit-exact", test_gradlog,
      "snapshot", "queue", False, 3)
for staging in ("default", "none"):
    T.run(f"DCP StorageWriter(staging='{staging}') with CUDA tensors: saved and loaded "
          "bit-exact", test_dcp, staging)
NCCL_PARTNER = "partner copies over NCCL, node 1 lost: both ranks back on step 3, bit-exact"
if torch.cuda.device_count() < 2:
    T.skip(NCCL_PARTNER, f"needs 2 CUDA devices ({torch.cuda.device_count()} here): NCCL "
           "does not put two ranks on one")
else:
    T.run(NCCL_PARTNER, test_partner_nccl)
T.done()
