#!/bin/sh
# python_partner.sh -- Python binding: partner copies over torch.distributed (gloo), 4 processes
# as 2 nodes: a node's ranks killed and its directory deleted, every rank back on the newest
# global step from the partners, no shared directory; a rank and its holder lost together
# (bindings/python/tests/test_partner.py, run with the interpreter of tools/python-env).
exec "$(dirname "$0")/../bindings/python/tests/run.sh" test_partner.py
