#!/bin/sh
# python_store.sh -- Python binding: Store.save/save_async/load round trips, in-place loads, layer-wise waits, bad input
# (bindings/python/tests/test_store.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_store.py
