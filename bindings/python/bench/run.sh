#!/bin/sh
# run.sh [ARGS] -- the Python binding's benchmark (bench_dcp.py, or the one
# named by $BENCH, e.g. BENCH=bench_train.py) with the interpreter of
# tools/python-env, against $BUILD/libpmckpt.so.0 and the package in this
# working tree.  `make bench` runs it after the C benchmarks.
root=$(cd "$(dirname "$0")/../../.." && pwd)
B=${BUILD:-build}
case $B in /*) ;; *) B=$root/$B ;; esac
lib=$B/libpmckpt.so.0
if [ ! -e "$lib" ]; then
	echo "${BENCH:-bench_dcp.py}: $lib is not built (make)" >&2
	exit 1
fi
if readelf -d "$lib" 2>/dev/null | grep -q 'lib[at]san'; then
	echo "bench: python binding skipped: $lib is a sanitizer build"
	exit 0
fi
py=$("$root/tools/python-env") || exit 1
PMCKPT_LIBRARY=$lib PYTHONPATH=$root/bindings/python PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
	exec "$py" "$root/bindings/python/bench/${BENCH:-bench_dcp.py}" "$@"
