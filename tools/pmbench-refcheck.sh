#!/bin/sh
# pmbench-refcheck.sh -- pmbench against an independent reference in the same run
# (make bench): pmbench's nt write of 1 MiB items on one thread (each item and its
# record made durable) and pmbench-ref's plain streaming-store loop of 1 MiB blocks
# (tools/pmbench-ref.c, no code shared with pmbench), on /dev/shm files of the same
# size.  Prints both as bench: lines and ratio: pmbench_1MiB_vs_reference (pmbench
# over the reference; about 1 when pmbench measures what the stores reach).
set -eu
B=${BUILD:-build}
TIME_MS=${TIME_MS:-200}
REPEAT=${REPEAT:-5}
dir=$(mktemp -d /tmp/pmbench-refcheck-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$B/pmbench" --size 64M --sizes 1M --methods nt --layouts separated --aligns 128 --threads 1 \
	--no-read --no-latency --no-gpu --time-ms "$TIME_MS" --repeat "$REPEAT" --quiet \
	--out "$dir/pm" >/dev/null
pm=$(awk -F, '!/^#/ && $1 == "write" { print $16 }' "$dir/pm.csv")
"$B/pmbench-ref" --size 64M --block 1M --time-ms "$TIME_MS" --repeat "$REPEAT" >"$dir/ref"
ref=$(awk '$2 == "reference_ntstore_1048576B" { print $3 }' "$dir/ref")
cat "$dir/ref"
echo "bench: pmbench_nt_1MiB $pm GB/s"
awk -v a="$pm" -v b="$ref" 'BEGIN { printf "ratio: pmbench_1MiB_vs_reference %.3f\n", a / b }'
