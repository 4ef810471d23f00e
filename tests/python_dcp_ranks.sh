#!/bin/sh
# python_dcp_ranks.sh -- Python binding: torch.distributed.checkpoint on 1, 2 and 4 ranks (gloo): same-rank
# load, resharding 2->1, 2->4 and 4->2, copy-out files checked once per group, a lost store
# in a group, async_save in a process, kill during async_save, FSDP2
# fully_shard (2 ranks: same-rank load into a fresh model + AdamW, and 2->1 into a plain one)
# (bindings/python/tests/test_dcp_ranks.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_dcp_ranks.py
