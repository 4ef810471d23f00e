#!/bin/bash
# mpi_multirank.sh -- multi-rank checkpoints under mpirun (4 ranks on this machine):
# kill -9 one rank (or, every 5th trial, all of them) at random moments; after
# restart every rank must recover the same step, bit-exact against what it wrote,
# never older than the last step rank 0 reported globally committed.  Then a
# replaced node (its ramdisk store deleted), restarts with 2 and 5 ranks (refused: another world
# size) and ranks with different layouts.
# MPI_TRIALS=N sets the number of kill trials (default 50).
B=${BUILD:-build}
PROG=$B/tests/mpi/mpi_ckpt
TRIALS=${MPI_TRIALS:-50}
if ! command -v mpirun >/dev/null || [ ! -x "$PROG" ]; then
	echo "1..0 # SKIP no mpirun or $PROG (build with MPI=1 and libopenmpi-dev)"
	exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
SLOW=1
if readelf -d "$PROG" 2>/dev/null | grep -q 'libasan' || nm "$PROG" 2>/dev/null | grep -q '__asan_init'; then
	# Sanitizer build: Open MPI's own allocations are reported as leaks at exit (not ours),
	# and everything starts slower: fewer, later kills.
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	SLOW=3
	TRIALS=${MPI_TRIALS:-10}
fi
MPIRUN="mpirun -np 4 --oversubscribe"
DIR=$(mktemp -d /dev/shm/pmck-mpi.XXXXXX)
# Open MPI's shared-memory segments in a directory of the test's own: a rank killed with -9
# leaves its segment behind (4 MiB files in /dev/shm, hundreds a run), removed here with it
VADER=$(mktemp -d /dev/shm/pmck-mpi-vader.XXXXXX)
export OMPI_MCA_btl_vader_backing_directory=$VADER
trap 'rm -rf "$DIR" "$VADER"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); echo "not ok $n - $*"; }

# check_recovery MIN: runs recover; all 4 ranks the same step >= MIN, bit-exact.
check_recovery() {
	local min=$1 out steps
	out=$($MPIRUN "$PROG" recover "$DIR" 2>&1)
	steps=$(echo "$out" | sed -n 's/^rank [0-9] step \([0-9]*\) tier [a-z]* ok$/\1/p' | sort -u)
	RECOVERED=$steps
	if [ "$(echo "$out" | grep -c ' ok$')" = 4 ] && [ "$(echo "$steps" | wc -l)" = 1 ] &&
	   [ "$steps" -ge "$min" ]; then
		return 0
	fi
	if [ "$min" = 0 ] && [ "$(echo "$out" | grep -c '^rank [0-9] none')" = 4 ]; then
		RECOVERED=none
		return 0
	fi
	echo "$out" | sed 's/^/# /'
	return 1
}

bad=0
for t in $(seq 1 "$TRIALS"); do
	rm -f "$DIR"/pid.*
	$MPIRUN "$PROG" run "$DIR" >"$DIR/run.log" 2>&1 &
	mpipid=$!
	# startup takes ~0.6 s; kill somewhere in the following second
	sleep "$(awk -v s=$RANDOM -v k=$SLOW 'BEGIN { srand(s); printf "%.3f", k * (0.5 + rand() * 1.2) }')"
	if [ $((t % 5)) = 0 ]; then
		what="all ranks"
		kill -9 $(cat "$DIR"/pid.* 2>/dev/null) 2>/dev/null
	else
		r=$((RANDOM % 4))
		what="rank $r"
		[ -f "$DIR/pid.$r" ] && kill -9 "$(cat "$DIR/pid.$r")" 2>/dev/null
	fi
	kill -9 $mpipid 2>/dev/null
	wait $mpipid 2>/dev/null
	pkill -9 -f "$PROG run $DIR" 2>/dev/null
	last=$(tail -n 1 "$DIR/global.log" 2>/dev/null)
	if check_recovery "${last:-0}"; then
		echo "# trial $t: killed $what; last global step ${last:-none}, recovered $RECOVERED"
	else
		bad=$((bad + 1))
		echo "# trial $t: killed $what; last global step ${last:-none}: recovery FAILED"
	fi
done
[ $bad = 0 ] && ok "$TRIALS kill trials: every rank recovered the same step, bit-exact, never older than the last global commit" ||
	notok "$bad of $TRIALS kill trials failed"

# A replaced node: rank 2's ramdisk store is gone; its data comes from the shared directory.
# First run until a few more steps are global (and so copied out), however slow the build.
before=$(tail -n 1 "$DIR/global.log" 2>/dev/null)
$MPIRUN "$PROG" run "$DIR" >"$DIR/run.log" 2>&1 &
mpipid=$!
for i in $(seq 1 600); do
	now=$(tail -n 1 "$DIR/global.log" 2>/dev/null)
	[ -n "$now" ] && [ "$now" -ge $((${before:-0} + 8)) ] && break
	sleep 0.1
done
kill -9 $(cat "$DIR"/pid.* 2>/dev/null) $mpipid 2>/dev/null
wait $mpipid 2>/dev/null
pkill -9 -f "$PROG run $DIR" 2>/dev/null
rm -f "$DIR"/ramdisk/pmckpt-rank2.pool
out=$($MPIRUN "$PROG" recover "$DIR" 2>&1)
if echo "$out" | grep -q '^rank 2 step [0-9]* tier shared ok$' &&
   [ "$(echo "$out" | sed -n 's/^rank [0-9] step \([0-9]*\) .* ok$/\1/p' | sort -u | wc -l)" = 1 ] &&
   [ "$(echo "$out" | grep -c ' ok$')" = 4 ]; then
	ok "replaced node: rank 2 loads from the shared directory, all ranks on one step ($(echo "$out" | sed -n 's/^rank 2 step \([0-9]*\).*/\1/p'))"
else
	notok "replaced node"
	echo "$out" | sed 's/^/# /'
fi

# Another world size (issue #24): 4 -> 2 and 4 -> 5 are refused on every rank, naming both
# sizes, and nothing in the shared directory changes; then 4 ranks recover the same step as before.
# Shared files by name, size and time; ramdisk pools by name and size (a writable mapping's
# page faults touch a pool's mtime without changing a byte).
snap() {
	(cd "$DIR" && find shared -type f | sort | xargs -r stat -c '%n %s %Y' &&
		find ramdisk -type f | sort | xargs -r stat -c '%n %s') 2>/dev/null
}
was=$(echo "$out" | sed -n 's/^rank 0 step \([0-9]*\) .*/\1/p')
before=$(snap)
for np in 2 5; do
	out=$(timeout 120 mpirun -np $np --oversubscribe "$PROG" recover "$DIR" 2>&1)
	if [ "$(echo "$out" | grep -c "none: the newest checkpoint was written by 4 ranks, this job has $np")" = $np ] &&
	   [ "$(snap)" = "$before" ]; then
		ok "4 -> $np ranks: every rank refuses with both sizes named; shared and ramdisk files unchanged (no new rank's pool left)"
	else
		notok "4 -> $np ranks"
		echo "$out" | sed 's/^/# /'
	fi
done
out=$($MPIRUN "$PROG" recover "$DIR" 2>&1)
if [ "$(echo "$out" | grep -c "^rank [0-9] step $was tier local ok$")" = 4 ]; then
	ok "4 ranks again: all recover step $was from their local slots (nothing was discarded)"
else
	notok "4 ranks again after the refused restarts (expected step $was)"
	echo "$out" | sed 's/^/# /'
fi

# Different layouts: a clear error on every rank, no hang (timeout guards it).
out=$(timeout 60 $MPIRUN "$PROG" mismatch "$DIR" 2>&1)
if [ "$(echo "$out" | grep -c 'mismatch ok: ranks were started with different layouts')" = 4 ]; then
	ok "different layouts: every rank gets a clear error"
else
	notok "different layouts"
	echo "$out" | sed 's/^/# /'
fi
echo "1..$n"
