#!/bin/sh
# python_abi.sh -- Python binding: its ctypes structures laid out as include/pmckpt.h's
# (bindings/python/tests/test_abi.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_abi.py
