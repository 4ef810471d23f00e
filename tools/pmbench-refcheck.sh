#!/bin/sh
# pmbench-refcheck.sh -- pmbench against an independent reference in the same run
# (make bench): pmbench's nt write of 1 MiB items on one thread (each item and its
# record made durable) and pmbench-ref's plain streaming-store loop of 1 MiB blocks
# (tools/pmbench-ref.c, no code shared with pmbench), on /dev/shm files of the same
# size; where pmbench's region has page granularity (not PM: libpmem2 persists with
# msync), pmbench-ref msyncs each block too (--msync), so both pay for persistence alike.
# Five rounds, the two alternating so that a neighbour's load hits both; each
# a median of REPEAT measurements.  Prints the medians over the rounds as bench: lines
# and ratio: pmbench_1MiB_vs_reference (pmbench over the reference; about 1 when
# pmbench measures what the stores reach).
set -eu
B=${BUILD:-build}
TIME_MS=${TIME_MS:-200}
REPEAT=${REPEAT:-5}
ROUNDS=${ROUNDS:-5}
dir=$(mktemp -d /tmp/pmbench-refcheck-XXXXXX)
trap 'rm -rf "$dir"' EXIT
: >"$dir/pm.all"
: >"$dir/ref.all"
: >"$dir/mc.all"
i=0
while [ $i -lt "$ROUNDS" ]; do
	i=$((i + 1))
	"$B/pmbench" --size 64M --sizes 1M --methods nt --layouts separated --aligns 128 --threads 1 \
		--no-read --no-latency --no-gpu --time-ms "$TIME_MS" --repeat "$REPEAT" --quiet \
		--out "$dir/pm" >/dev/null
	awk -F, '!/^#/ && $1 == "write" { print $16 }' "$dir/pm.csv" >>"$dir/pm.all"
	persist=
	grep -q '^# region.granularity: page$' "$dir/pm.csv" && persist=--msync
	"$B/pmbench-ref" --size 64M --block 1M --time-ms "$TIME_MS" --repeat "$REPEAT" $persist >"$dir/ref"
	awk '$2 == "reference_ntstore_1048576B" { print $3 }' "$dir/ref" >>"$dir/ref.all"
	awk '$2 == "reference_memcpy_1048576B" { print $3 }' "$dir/ref" >>"$dir/mc.all"
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
pm=$(median "$dir/pm.all")
ref=$(median "$dir/ref.all")
echo "bench: reference_memcpy_1MiB${persist:+_msync} $(median "$dir/mc.all") GB/s"
echo "bench: reference_ntstore_1MiB${persist:+_msync} $ref GB/s"
echo "bench: pmbench_nt_1MiB $pm GB/s"
awk -v a="$pm" -v b="$ref" 'BEGIN { printf "ratio: pmbench_1MiB_vs_reference %.3f\n", a / b }'
