#!/bin/sh
# python_gpu.sh -- Python binding: CUDA tensors through the GPU path (skipped without a GPU)
# (bindings/python/tests/test_gpu.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_gpu.py
