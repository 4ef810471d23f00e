#!/bin/sh
# python_bench_gpu.sh -- bench_gpu.py as far as a machine without a GPU runs it: its CUDA
# branch up to the library's check, a dry run on host tensors printing every ratio line,
# and bench_train.py with the next GPU session's configurations, two steps each
# (bindings/python/tests/test_bench_gpu.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_bench_gpu.py
