#!/bin/sh
# mpibench.sh -- blocking time per checkpoint with 4 ranks against 1 rank of the
# same per-rank size, measured in one run; prints bench:/ratio: lines.
B=${BUILD:-build}
MIB=${MPIBENCH_MIB:-16}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
one=$(mpirun -np 1 "$B/pmck-mpibench" "$MIB" 20 100) || exit 1
four=$(mpirun -np 4 --oversubscribe "$B/pmck-mpibench" "$MIB" 20 100) || exit 1
s1=$(echo "$one" | awk '/^stall/ { print $2 }'); b1=$(echo "$one" | awk '/^stall/ { print $4 }')
s4=$(echo "$four" | awk '/^stall/ { print $2 }'); b4=$(echo "$four" | awk '/^stall/ { print $4 }')
echo "# multi-rank: $MIB MiB per rank, sync checkpoint every 100 ms of compute, $(nproc) CPUs for 4 ranks; medians of 20"
echo "bench: single_rank_stall $s1 s"
echo "bench: multirank_stall $s4 s"
echo "bench: single_rank_begin $b1 s"
echo "bench: multirank_begin $b4 s"
awk -v a="$s4" -v b="$s1" 'BEGIN { printf "ratio: multirank_stall_vs_single %.4f\n", a / b }'
echo "# goal: multirank_stall_vs_single <= 1.2 (begin = completing the agreement of the previous step)"
