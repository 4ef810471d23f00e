#!/bin/sh
# run.sh [ARGS] -- the Python binding's benchmarks with the interpreter of
# tools/python-env, against $BUILD/libpmckpt.so.0 and the package in this
# working tree: bench_dcp.py [ARGS], then bench_dcp_ranks.py (DCP on 4
# ranks), bench_partner.py (partner copies on 4 ranks) and bench_lightning.py
# (the Lightning plug-in); or only the one named by $BENCH (e.g.
# BENCH=bench_train.py).
# `make bench` runs it after the C benchmarks.
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
export PMCKPT_LIBRARY=$lib PYTHONPATH=$root/bindings/python PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
if [ -n "${BENCH:-}" ]; then
	exec "$py" "$root/bindings/python/bench/$BENCH" "$@"
fi
"$py" "$root/bindings/python/bench/bench_dcp.py" "$@" || exit 1
# DCP on 4 ranks (gloo), pmckpt.dcp against FileSystemWriter/Reader
"$py" "$root/bindings/python/bench/bench_dcp_ranks.py" || exit 1
# partner copies on 4 ranks as 2 nodes (gloo): bytes/s against gloo alone, a lost node's restart against DCP
"$py" "$root/bindings/python/bench/bench_partner.py" || exit 1
# the Lightning plug-in: a Trainer checkpointing every step, against none and AsyncCheckpointIO
exec "$py" "$root/bindings/python/bench/bench_lightning.py"
