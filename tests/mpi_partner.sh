#!/bin/bash
# mpi_partner.sh -- partner copies under mpirun: 4 ranks as 2 nodes of this machine, each
# node a ramdisk directory of its own, no shared directory.  Each trial kills one node's
# ranks with SIGKILL at a random moment (then the rest): every third trial counted from the
# launch (start-up and its recovery included), the others once a new global step was logged
# (a slow machine may take seconds to start).  Then it deletes that node's directory
# (its stores and the partner copies it held), and restarts all 4 ranks: every rank must
# recover the same step, bit-exact, never older than the last step rank 0 logged as
# globally committed, the lost node's ranks from their partners.  Trials 2, 3 of every 4
# copy every 3rd step only: the survivors then come back from their own copies of the last
# copied step, and the promise is the last agreed step that was copied.
# PARTNER_TRIALS=N sets the number of trials (default 10; make soak-partner TRIALS=N).
B=${BUILD:-build}
PROG=$B/tests/mpi/mpi_partner
TRIALS=${PARTNER_TRIALS:-10}
if ! command -v mpirun >/dev/null || [ ! -x "$PROG" ]; then
	echo "1..0 # SKIP no mpirun or $PROG (build with MPI=1 and libopenmpi-dev)"
	exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
SLOW=1
if nm "$PROG" 2>/dev/null | grep -q '__asan_init\|__tsan_init'; then
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	SLOW=3
	TRIALS=${PARTNER_TRIALS:-4}
fi
MPIRUN="mpirun -np 4 --oversubscribe"
DIR=$(mktemp -d /dev/shm/pmck-partner.XXXXXX)
# Open MPI's shared-memory segments in a directory of the test's own: a rank killed with -9
# leaves its segment behind (4 MiB files in /dev/shm, hundreds a run), removed here with it
VADER=$(mktemp -d /dev/shm/pmck-partner-vader.XXXXXX)
export OMPI_MCA_btl_vader_backing_directory=$VADER
trap 'rm -rf "$DIR" "$VADER"' EXIT
touch "$DIR/global.log" # rank 0 appends each step agreed globally
echo "1..$((TRIALS + 1))"
n=0
bad=0
partner_seen=0
own_seen=0
for t in $(seq 1 "$TRIALS"); do
	rm -f "$DIR"/pid.*
	before=$(wc -l <"$DIR/global.log")
	every=1
	[ $((t % 4)) -ge 2 ] && every=3
	$MPIRUN "$PROG" run "$DIR" $every >"$DIR/run.log" 2>&1 &
	mpipid=$!
	# Every third trial: a random moment from the launch (start-up and its recovery included).
	# The others: once a new global step is logged (a slow machine may take seconds to start).
	if [ $((t % 3)) != 0 ]; then
		for _ in $(seq 1 600); do
			[ "$(wc -l <"$DIR/global.log")" -ge $((before + 2)) ] && break
			kill -0 $mpipid 2>/dev/null || break
			sleep 0.1
		done
		sleep "$(awk -v s=$RANDOM -v k=$SLOW 'BEGIN { srand(s); printf "%.3f", k * rand() * 1.2 }')"
	else
		sleep "$(awk -v s=$RANDOM -v k=$SLOW 'BEGIN { srand(s); printf "%.3f", k * (0.2 + rand() * 1.6) }')"
	fi
	lost=$((t % 2))
	kill -9 $(cat "$DIR/pid.$((2 * lost))" "$DIR/pid.$((2 * lost + 1))" 2>/dev/null) 2>/dev/null
	kill -9 $(cat "$DIR"/pid.* 2>/dev/null) $mpipid 2>/dev/null
	wait $mpipid 2>/dev/null
	pkill -9 -f "$PROG run $DIR" 2>/dev/null
	rm -rf "$DIR/node$lost"
	last=$(tail -n 1 "$DIR/global.log" 2>/dev/null)
	out=$($MPIRUN "$PROG" recover "$DIR" $every 2>&1)
	steps=$(echo "$out" | sed -n 's/^rank [0-9] step \([0-9]*\) tier [a-z]* ok$/\1/p' | sort -u)
	n=$((n + 1))
	if [ "$(echo "$out" | grep -c ' ok$')" = 4 ] && [ "$(echo "$steps" | wc -l)" = 1 ] &&
	   [ "$steps" -ge "${last:-0}" ] &&
	   [ "$(echo "$out" | grep -c "^rank [$((2 * lost))$((2 * lost + 1))] step .* tier partner ok")" = 2 ]; then
		partner_seen=$((partner_seen + 1))
		echo "$out" | grep -q ' tier own ok$' && own_seen=$((own_seen + 1))
		echo "ok $n - trial $t (copies every $every): node $lost lost; last promised step ${last:-none}, every rank recovered $steps, node $lost's ranks from their partners"
	elif [ -z "$last" ] && [ "$(echo "$out" | grep -c '^rank [0-9] none')" = 4 ]; then
		echo "ok $n - trial $t: node $lost lost before any global step; no rank recovered anything"
	else
		bad=$((bad + 1))
		echo "not ok $n - trial $t (copies every $every): node $lost lost; last promised step ${last:-none}"
		echo "$out" | sed 's/^/# /'
		sed 's/^/# run: /' "$DIR/run.log" | tail -5
	fi
done
n=$((n + 1))
echo "# $own_seen trials brought the survivors back from their own copies of the last copied step"
[ $partner_seen -gt 0 ] && echo "ok $n - $partner_seen of $TRIALS trials recovered a lost node from its partners" ||
	echo "not ok $n - no trial recovered a lost node from its partners"
exit 0
