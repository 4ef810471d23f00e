#!/bin/sh
# run.sh TEST.py [ARGS] -- runs one TAP test of the Python binding (tests/python_*.sh
# call it) with the interpreter of tools/python-env, against $BUILD/libpmckpt.so.0
# and the package in this working tree.
root=$(cd "$(dirname "$0")/../../.." && pwd)
B=${BUILD:-build}
case $B in /*) ;; *) B=$root/$B ;; esac
lib=$B/libpmckpt.so.0
t=$1
shift

if [ ! -e "$lib" ]; then
	echo "Bail out! $lib is not built (make)"
	exit 1
fi
# Sanitizer builds need their runtime loaded first, which an ordinary Python
# (and torch) does not do: those runs cover the C tests only.
if readelf -d "$lib" 2>/dev/null | grep -q 'lib[at]san'; then
	echo "1..0 # SKIP $lib is a sanitizer build: it cannot be loaded into python"
	exit 0
fi
if [ "${PMCKPT_SKIP_PYTHON:-0}" = 1 ]; then
	echo "1..0 # SKIP PMCKPT_SKIP_PYTHON=1"
	exit 0
fi
if ! py=$("$root/tools/python-env"); then
	echo "Bail out! tools/python-env could not provide a Python with torch (see above)"
	exit 1
fi
PMCKPT_LIBRARY=$lib PYTHONPATH=$root/bindings/python PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
	exec "$py" "$root/bindings/python/tests/$t" "$@"
