#!/bin/sh
# python_dist.sh -- Python binding: multi-rank checkpoints over torch.distributed (gloo, several processes):
# kill -9 one or all ranks, all recover one step; a replaced node; different layouts
# (bindings/python/tests/test_dist.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_dist.py
