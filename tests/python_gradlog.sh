#!/bin/sh
# python_gradlog.sh -- Python binding: GradientLog (whole states and gradient records in turn), replayed bit-exact; fallbacks; damaged and foreign records
# (bindings/python/tests/test_gradlog.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_gradlog.py
