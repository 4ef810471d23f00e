#!/bin/sh
# python_private.sh -- Python binding: planted files, links and directories of user nobody
# refused (UnsafePathError) and left unchanged; the modes of a save and a copy-out, private and
# with sharing="group" (bindings/python/tests/test_private.py; needs root, else SKIP).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_private.py
