#!/bin/sh
# python_interop.sh -- Python binding: safetensors copy-out read by safetensors.torch, import of foreign files, two-tier recovery
# (bindings/python/tests/test_interop.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_interop.py
