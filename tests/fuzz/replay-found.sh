#!/bin/sh
# replay-found.sh -- replays what AFL++ kept for each named harness
# ($FUZZ_DIR/out/NAME and out-asan/NAME: every instance's queue, crashes and
# hangs) through the replay driver built with ASan and UBSan
# (build/asan/tests/fuzz/NAME; make fuzz-replay builds it), and prints
#
#   fuzz-replay: NAME inputs=N failed=F
#
# afl-clang-fast's build stops on a crash or a broken promise only; this run
# also stops on a memory error or undefined behaviour that did not crash.
# Each failing input is named, with the first lines of its report, so it can
# become a regression input (docs/fuzzing.md, "A finding").  Exits 1 when an
# input fails, 2 when a harness or its findings are missing.
set -u
cd "$(dirname "$0")/../.." || exit 1
: "${FUZZ_DIR:=build-fuzz}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
for n in "$@"; do
	bin=build/asan/tests/fuzz/$n
	if [ ! -x "$bin" ]; then
		echo "fuzz-replay: $n: no $bin (make fuzz-replay builds it)" >&2
		status=2
		continue
	fi
	files=$(find "$FUZZ_DIR/out/$n" "$FUZZ_DIR/out-asan/$n" -mindepth 3 -maxdepth 3 -type f \
		\( -path '*/queue/*' -o -path '*/crashes/*' -o -path '*/hangs/*' \) \
		! -name README.txt ! -name '.*' 2>/dev/null | sort)
	if [ -z "$files" ]; then
		echo "fuzz-replay: $n: nothing kept under $FUZZ_DIR/out/$n (run make fuzz first)" >&2
		status=2
		continue
	fi
	inputs=0 failed=0
	# One input per run, so that a failure names its input and the rest go on.
	for f in $files; do
		inputs=$((inputs + 1))
		if ! out=$(timeout 60 "$bin" "$f" 2>&1); then
			failed=$((failed + 1))
			echo "fuzz-replay: $n: $f fails:" >&2
			echo "$out" | grep -v 'inputs replayed$' | head -n 8 | sed 's/^/    /' >&2
		fi
	done
	echo "fuzz-replay: $n inputs=$inputs failed=$failed"
	[ "$failed" -gt 0 ] && status=1
done
exit $status
