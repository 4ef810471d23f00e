#!/bin/sh
# mpibench.sh -- blocking time per checkpoint with 4 ranks against 1 rank of the
# same per-rank size, measured in one run; prints bench:/ratio: lines.
B=${BUILD:-build}
MIB=${MPIBENCH_MIB:-16}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
echo "# multi-rank: $MIB MiB per rank, a checkpoint every 100 ms of compute, $(nproc) CPUs for 4 ranks; medians of 20"
# mode NAME: one run with 1 rank and one with 4; bench lines and the ratio named NAME.
mode() {
	one=$(mpirun -np 1 "$B/pmck-mpibench" "$MIB" 20 100 "$1") || exit 1
	four=$(mpirun -np 4 --oversubscribe "$B/pmck-mpibench" "$MIB" 20 100 "$1") || exit 1
	s1=$(echo "$one" | awk '/^stall/ { print $2 }'); b1=$(echo "$one" | awk '/^stall/ { print $4 }')
	s4=$(echo "$four" | awk '/^stall/ { print $2 }'); b4=$(echo "$four" | awk '/^stall/ { print $4 }')
	echo "bench: single_rank_$2 $s1 s"
	echo "bench: multirank_$2 $s4 s"
	echo "bench: single_rank_$2_begin $b1 s"
	echo "bench: multirank_$2_begin $b4 s"
	awk -v a="$s4" -v b="$s1" -v n="$3" 'BEGIN { printf "ratio: %s %.4f\n", n, a / b }'
}
# What training waits for with the asynchronous pipeline: begin (completing the
# previous step's agreement) and queueing the layers.
mode pipeline stall multirank_stall_vs_single
# A synchronous checkpoint: the write itself, 4 ranks sharing the CPUs.
mode sync sync_stall multirank_sync_stall_vs_single
echo "# goal: multirank_stall_vs_single <= 1.2 (begin = completing the agreement of the previous step)"
