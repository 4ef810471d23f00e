#!/bin/sh
# python_resume.sh -- Python binding: SIGKILL at random moments (inside saves too), resume: losses bit-exact (sync, async, GradientLog)
# (bindings/python/tests/test_resume.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_resume.py
