# SPDX-License-Identifier: BSD-3-Clause
"""One rank of test_gpu.py's partner test over NCCL: 2 ranks, each on its own
CUDA device and its own "node" (a ramdisk directory), a CUDA state saved with
Store(group=True, partner=True, partner_transport="nccl").

  gpu_partner_worker.py MODE DIR RANK RDZV
  save:    steps 1..3 saved; prints "rank R saved 3 copied C"
  recover: load(); prints "rank R step S tier T ok|BAD why"
"""
import datetime
import os
import sys


def state_of(rank, step, dev):
    import torch
    g = torch.Generator(device=dev).manual_seed(rank * 7919 + step)
    return {"w": torch.randn(1 << 20, device=dev, generator=g),
            "b": torch.full((4096,), float(step), device=dev), "step": step}


def main(mode, d, rank, rdzv):
    import torch
    import torch.distributed as dist
    import pmckpt
    from common import same

    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"file://{rdzv}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    store = pmckpt.Store(ramdisk=os.path.join(d, f"node{rank}"), name="gp", group=True,
                         partner=True, node=rank, partner_transport="nccl")
    if mode == "save":
        for step in range(1, 4):
            store.save(state_of(rank, step, dev), step)
        store.close()  # waits for the last round
        print(f"rank {rank} saved 3", flush=True)
    else:
        sd = store.load()
        why = same(sd, state_of(rank, store.step, dev))
        print(f"rank {rank} step {store.step} tier {store.last_recovery['tier']} "
              f"{'ok' if why is None else 'BAD ' + why}", flush=True)
        store.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
