#!/bin/sh
# python_example.sh -- Python binding: the training-loop example of docs/python.md runs and
# resumes in each mode (bindings/python/tests/test_example.py, interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_example.py
