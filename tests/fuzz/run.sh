#!/bin/sh
# run.sh -- runs AFL++ on each named harness for FUZZ_S seconds, one after
# the other (make fuzz; docs/fuzzing.md), and prints per harness
#
#   fuzz: NAME execs=E crashes=C hangs=H paths=P seconds=S
#
# from afl-fuzz's fuzzer_stats, summed over its instances.  Environment
# (the Makefile sets it): FUZZ_BUILD (the afl-clang-fast build, harnesses in
# $FUZZ_BUILD/tests/fuzz), FUZZ_DIR (findings go to $FUZZ_DIR/out[-asan]/NAME),
# FUZZ_S, FUZZ_JOBS (instances per harness: one main, the rest secondaries),
# FUZZ_ASAN=1 (the ASan build).
#
# A harness's earlier findings are resumed (AFL_AUTORESUME); if afl-fuzz
# cannot start on them, they are moved to NAME.old-<time> and the run starts
# afresh from the seeds.  Every afl-fuzz is bounded by `timeout`, so a stuck
# fuzzer cannot hang the run.  Exits 1 when a harness has crashes (listed).
set -u
cd "$(dirname "$0")/../.." || exit 1
: "${FUZZ_BUILD:=build-fuzz/build}" "${FUZZ_DIR:=build-fuzz}" "${FUZZ_S:=60}" "${FUZZ_JOBS:=1}"
: "${FUZZ_ASAN:=}"
suffix=; [ "$FUZZ_ASAN" = 1 ] && suffix=-asan
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 \
	AFL_NO_AFFINITY=1 AFL_AUTORESUME=1
# ASan's own settings for AFL (it needs abort_on_error to see the crash).
export ASAN_OPTIONS=abort_on_error=1:symbolize=0:detect_leaks=0:allocator_may_return_null=1
if ! command -v afl-fuzz >/dev/null; then
	echo "fuzz: afl-fuzz not found (tools/install-deps --fuzz installs AFL++)" >&2
	exit 2
fi

# The value of `key` in a fuzzer_stats file (the first of several names), or 0.
stat_of() {
	for k in $2; do
		v=$(sed -n "s/^$k *: *\([0-9]*\).*/\1/p" "$1")
		[ -n "$v" ] && { echo "$v"; return; }
	done
	echo 0
}

# Removes the tmpfs scratch directories of harness $1 whose process is gone.
clean_scratch() {
	for d in /dev/shm/pmck-fuzz-"$1"-*; do
		[ -d "$d" ] || continue
		kill -0 "${d##*-}" 2>/dev/null || rm -rf "$d"
	done
}

# afl-fuzz for harness $1, instance $2 (0: main), output $3.
afl() {
	n=$1; i=$2; out=$3
	role="-M main"; [ "$i" -gt 0 ] && role="-S s$i"
	dict=; [ -f "tests/fuzz/$n.dict" ] && dict="-x tests/fuzz/$n.dict"
	# shellcheck disable=SC2086
	timeout -k 10 $((FUZZ_S + 120)) afl-fuzz -i "tests/fuzz/$n/seeds" -o "$out" $role $dict \
		-m none -t 2000 -V "$FUZZ_S" -- "$FUZZ_BUILD/tests/fuzz/$n" \
		>"$out.log.$i" 2>&1
}

status=0
for n in "$@"; do
	bin=$FUZZ_BUILD/tests/fuzz/$n
	if [ ! -x "$bin" ] || [ ! -d "tests/fuzz/$n/seeds" ]; then
		echo "fuzz: $n: no harness $bin or no seeds tests/fuzz/$n/seeds" >&2
		status=1
		continue
	fi
	out=$FUZZ_DIR/out$suffix/$n
	mkdir -p "$out"
	clean_scratch "$n"
	start=$(date +%s)
	tries=0
	while :; do
		i=0; pids=
		while [ "$i" -lt "$FUZZ_JOBS" ]; do
			afl "$n" "$i" "$out" & pids="$pids $!"
			i=$((i + 1))
		done
		rc=0
		for p in $pids; do wait "$p" || rc=$?; done
		[ -f "$out/main/fuzzer_stats" ] && [ $rc = 0 ] && break
		tries=$((tries + 1))
		if [ $tries -ge 2 ]; then
			echo "fuzz: $n: afl-fuzz failed (exit $rc); its log:" >&2
			tail -n 20 "$out.log.0" >&2
			status=1
			break
		fi
		# Could not resume: keep the old findings aside, start from the seeds.
		old=$out.old-$(date +%Y%m%dT%H%M%S)
		echo "fuzz: $n: afl-fuzz exit $rc, restarting afresh (old findings in $old)" >&2
		mv "$out" "$old" && mkdir -p "$out"
	done
	execs=0 crashes=0 hangs=0 paths=0
	for st in "$out"/*/fuzzer_stats; do
		[ -f "$st" ] || continue
		execs=$((execs + $(stat_of "$st" execs_done)))
		crashes=$((crashes + $(stat_of "$st" "saved_crashes unique_crashes")))
		hangs=$((hangs + $(stat_of "$st" "saved_hangs unique_hangs")))
		p=$(stat_of "$st" "corpus_count paths_total")
		[ "$p" -gt "$paths" ] && paths=$p
	done
	echo "fuzz: $n execs=$execs crashes=$crashes hangs=$hangs paths=$paths seconds=$(( $(date +%s) - start ))"
	if [ "$crashes" -gt 0 ]; then
		status=1
		echo "fuzz: $n: crashing inputs in $out/*/crashes/ (replay: build/tests/fuzz/$n FILE)" >&2
	fi
done
# The last fuzzed processes may still be exiting when afl-fuzz returns: wait a few seconds.
for try in 1 2 3 4 5; do
	left=0
	for n in "$@"; do
		clean_scratch "$n"
		for d in /dev/shm/pmck-fuzz-"$n"-*; do [ -d "$d" ] && left=1; done
	done
	[ $left = 0 ] && break
	sleep 1
done
exit $status
