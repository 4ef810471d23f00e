/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmckpt_mpi.h -- pmckpt's collectives over MPI (libpmckpt_mpi), so the
 * core library never links MPI.
 *
 *   MPI_Init_thread(...);
 *   static MPI_Comm world;   (outlives the collectives: they point to it)
 *   world = MPI_COMM_WORLD;
 *   struct pmck_collectives coll;
 *   pmck_mpi_collectives(&world, &coll);
 *   pmck_global_new(store, &coll, &g);
 *
 * The agreement uses MPI_Iallreduce (started at commit) and MPI_Test/Wait
 * (at the next begin), both from the thread that calls pmck_global_*, so
 * MPI_THREAD_FUNNELED is enough; a global pipeline (pmck_pipeline_opts.
 * global) starts it on its writer thread, which needs
 * MPI_THREAD_SERIALIZED (pmckpt makes one MPI call at a time).
 * Partner copies need MPI_THREAD_MULTIPLE (below).
 */
#ifndef PMCKPT_MPI_H
#define PMCKPT_MPI_H 1

#include <mpi.h>

#include "pmckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * pmck_mpi_collectives -- fills *out for the communicator *comm; out keeps
 * the pointer, so *comm must stay valid while *out is used.  Errors:
 * -EINVAL (MPI not initialised, NULL arguments).
 */
int pmck_mpi_collectives(MPI_Comm *comm, struct pmck_collectives *out);

/*
 * Partner copies (pmck_partner_new) need the collectives' sendrecv, which
 * pmck_mpi_collectives fills in only when MPI runs with
 * MPI_THREAD_MULTIPLE: the partner thread sends and receives while the
 * training and writer threads run the agreement.  allgather_u64 is
 * MPI_Allgather.
 *
 * pmck_mpi_node -- which node this rank is on, for pmck_partner_opts.node:
 * the lowest rank of comm that shares its memory (MPI_Comm_split_type,
 * MPI_COMM_TYPE_SHARED).  Collective over comm.  Errors: -EINVAL, -EIO.
 */
int pmck_mpi_node(MPI_Comm comm, uint64_t *node);

#ifdef __cplusplus
}
#endif
#endif
