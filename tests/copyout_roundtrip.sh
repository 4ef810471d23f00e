#!/bin/sh
# copyout_roundtrip.sh -- checkpoints with deterministic contents go into a
# ramdisk store (pmck_local_open), out through pmck_copyout to a directory on
# /var/tmp, and are read back by an independent reader (tests/copyout_reader.py:
# Python, struct + json only): header fields, dtypes, shapes, data_offsets, the
# bytes themselves (recomputed in Python from the same formula) and the
# __metadata__ (step, rank, world_size, layout hash, xxh3 checksums).  The other
# way: a file written by "another tool" (Python, no pmckpt metadata) is imported.
B=${BUILD:-build}
H="$B/tests/copyout_helper"
R="$(dirname "$0")/copyout_reader.py"

if ! command -v python3 >/dev/null 2>&1; then
	echo "1..0 # SKIP python3 not found"
	exit 0
fi
T=$(mktemp -d /dev/shm/pmck-h5-rt-XXXXXX) || exit 1
S=$(mktemp -d /var/tmp/pmck-h5-rt-XXXXXX) || exit 1
trap 'rm -rf "$T" "$S"' EXIT INT TERM

n=0
fails=0
# t NAME CMD...: one TAP test; the command's output becomes diagnostics on failure.
t() {
	name=$1
	shift
	n=$((n + 1))
	if out=$("$@" 2>&1); then
		echo "ok $n - $name"
	else
		echo "not ok $n - $name"
		echo "$out" | sed 's/^/# /'
		fails=$((fails + 1))
	fi
}

t "write steps 1..3 through copy-out (keep 2)" "$H" write "$T" model "$S/shared" 1 3 2 0 1
t "only steps 2 and 3 remain, each a rank file and COMPLETE" sh -c "
	cd '$S/shared' && test \"\$(ls -A)\" = 'step-000000000002
step-000000000003' &&
	test \"\$(ls -A step-000000000002)\" = 'COMPLETE
rank-00000.safetensors' &&
	test \"\$(ls -A step-000000000003)\" = 'COMPLETE
rank-00000.safetensors'"
for s in 2 3; do
	t "expected layout and checksums of step $s" sh -c "'$H' expect $s > '$T/expect-$s.json'"
	t "step $s: header, dtypes, shapes, offsets, bytes and metadata read back by Python" \
		python3 "$R" check "$S/shared/step-00000000000$s/rank-00000.safetensors" "$T/expect-$s.json" $s 0 1
	t "step $s: COMPLETE marker says step $s, world size 1" \
		python3 "$R" marker "$S/shared/step-00000000000$s/COMPLETE" $s 1
done
t "the reader rejects another step's contents (it can fail)" sh -c "
	! python3 '$R' check '$S/shared/step-000000000003/rank-00000.safetensors' '$T/expect-2.json' 2 0 1 >/dev/null"

# Rank 3 of a world of 4: metadata carries them; this rank does not write COMPLETE.
t "rank 3 of 4 writes step 5" "$H" write "$T" ranked "$S/multi" 5 5 2 3 4
t "rank 3 of 4: rank-00003.safetensors and no COMPLETE" sh -c "
	test \"\$(ls -A '$S/multi/step-000000000005')\" = 'rank-00003.safetensors'"
t "expected layout of step 5" sh -c "'$H' expect 5 > '$T/expect-5.json'"
t "rank 3 of 4: file read back by Python, rank and world_size in its metadata" \
	python3 "$R" check "$S/multi/step-000000000005/rank-00003.safetensors" "$T/expect-5.json" 5 3 4

# The other way: a file written by another tool (no pmckpt metadata, other order).
t "expected layout of step 42" sh -c "'$H' expect 42 > '$T/expect-42.json'"
t "Python writes a safetensors file of step 42 without pmckpt metadata" \
	python3 "$R" write "$T/foreign.safetensors" "$T/expect-42.json" 42
t "pmck_safetensors_import loads it into a fresh store as step 42" sh -c "
	test \"\$('$H' import '$T' foreign '$T/foreign.safetensors' 42)\" = 42"
t "the store then holds exactly the bytes of step 42" "$H" check "$T" foreign 42
t "importing it into a store at step 3 with step argument 2 is refused" sh -c "
	! '$H' import '$T' model '$T/foreign.safetensors' 2"
t "... and with step argument 10 it is step 10, and the bytes are the file's" sh -c "
	test \"\$('$H' import '$T' model '$T/foreign.safetensors' 10)\" = 10 &&
	'$H' check '$T' model 42 2>&1 | grep -q 'holds step 10, with the contents of step 42'"
echo "1..$n"
exit $((fails > 0))
