#!/bin/sh
# partnerbench.sh -- partner copies: the training stall with them against without, the
# restart of a lost node from the partners against from the copy-out, and the bytes the
# rounds move per second (with nothing else running) against plain MPI_Sendrecv; 4 ranks as
# 2 nodes of this machine.  Also the stall with a copy every 4th step only.
B=${BUILD:-build}
MIB=${PARTNERBENCH_MIB:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
RAM=$(mktemp -d /dev/shm/pmck-partnerbench.XXXXXX)
# The copy-out goes to the disk, as it would to a shared file system.  The restart from it
# reads the files cold (dropped from the page cache, as on a replacement node), then warm.
DISK=$(mktemp -d "${PARTNERBENCH_SHARED:-/var/tmp}/pmck-partnerbench.XXXXXX")
trap 'rm -rf "$RAM" "$DISK"' EXIT
echo "# partner copies: $MIB MiB per rank, 4 ranks as 2 nodes on $(nproc) CPUs, a checkpoint every 200 ms of compute; medians of 15"
out=$(mpirun -np 4 --oversubscribe "$B/pmck-partnerbench" "$MIB" 15 200 "$RAM" "$DISK/shared") || exit 1
echo "$out" | awk '
/^stall /    { none = $2; printf "bench: partner_stall_none %s s\nbench: partner_stall_with %s s\nratio: partner_stall_vs_none %.4f\n", $2, $3, $3 / $2 }
/^stall_idle/ { printf "bench: partner_stall_idle_host_none %s s\nbench: partner_stall_idle_host_with %s s\nratio: partner_stall_idle_host_vs_none %.4f\n", $2, $3, $3 / $2 }
/^stall4/    { printf "bench: partner_stall_with_every4 %s s\nratio: partner_stall_every4_vs_none %.4f\n", $2, $2 / none }
/^recovery/  { printf "bench: lost_node_recovery_partner %s s\nbench: lost_node_recovery_shared_cold %s s\nbench: lost_node_recovery_shared_warm %s s\nratio: partner_recovery_time_vs_shared_fs %.4f\nratio: partner_recovery_time_vs_shared_fs_warm %.4f\n", $2, $3, $4, $2 / $3, $2 / $4 }
/^bytes/     { p = $2 }
/^transport/ { printf "bench: partner_bytes_per_s %.0f B/s\nbench: mpi_sendrecv_bytes_per_s %.0f B/s\nratio: partner_tput_vs_mpi_sendrecv %.4f\n", p, $2, p / $2 }'
echo "# goals: partner_stall_vs_none <= 1.05, partner_recovery_time_vs_shared_fs <= 0.2, partner_tput_vs_mpi_sendrecv >= 0.8"
