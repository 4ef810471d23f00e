#!/bin/sh
# fuzz_replay.sh -- replays every fuzz seed and every regression input
# (tests/fuzz/NAME/seeds, tests/fuzz/NAME/regress: each an input that once
# crashed or hung a harness, kept after its fix) through the harness built
# without AFL ($BUILD/tests/fuzz/NAME; under make check SANITIZE=1 with
# ASan and UBSan).  One test per harness: it fails when the harness crashes,
# aborts (a broken promise), or replays nothing.  See docs/fuzzing.md.
B=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
names=$(for f in tests/fuzz/*.c; do basename "$f" .c; done)
echo "1..$(echo "$names" | wc -w)"
i=0
for n in $names; do
	i=$((i + 1))
	bin=$B/tests/fuzz/$n
	if [ ! -x "$bin" ]; then
		echo "not ok $i - $n: $bin not built (make tests)"
		continue
	fi
	dirs=tests/fuzz/$n/seeds
	[ -d "tests/fuzz/$n/regress" ] && dirs="$dirs tests/fuzz/$n/regress"
	# shellcheck disable=SC2086
	if out=$(timeout 300 "$bin" $dirs 2>&1); then
		echo "ok $i - $n: $(echo "$out" | tail -n 1) ($dirs)"
	else
		echo "not ok $i - $n: exit status $? replaying $dirs"
		echo "$out" | tail -n 20 | sed 's/^/# /'
	fi
done
