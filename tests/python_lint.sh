#!/bin/sh
# python_lint.sh -- pylint's error checks over the Python binding, its tests and benchmarks:
# faults seen without running the code, such as those in branches that run only on a GPU
# (bindings/python/tests/test_lint.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_lint.py
