#!/bin/sh
# python_lightning.sh -- the Lightning plug-in with the real Trainer on CPU: kill -9 and resume
# with ckpt_path="last", losses bit-exact against an uninterrupted run; top-k retention; a refused
# hyper-parameter; export (bindings/python/tests/test_lightning.py, with tools/python-env's Python).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_lightning.py
