#!/bin/sh
# python_dcp.sh -- Python binding: torch.distributed.checkpoint save/async_save/load against a pmckpt store
# (bindings/python/tests/test_dcp.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_dcp.py
