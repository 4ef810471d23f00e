/* SPDX-License-Identifier: BSD-3-Clause */
/* collectives.c -- struct pmck_collectives over an MPI communicator. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "pmckpt_mpi.h"

struct request {
	MPI_Request req;
	uint64_t value, result;
};

static MPI_Op
mpi_op(enum pmck_reduce_op op)
{
	return op == PMCK_REDUCE_MAX ? MPI_MAX : MPI_MIN;
}

static int
allreduce(void *ctx, uint64_t *value, enum pmck_reduce_op op)
{
	uint64_t in = *value;
	int rc = MPI_Allreduce(&in, value, 1, MPI_UINT64_T, mpi_op(op), *(MPI_Comm *)ctx);
	return rc == MPI_SUCCESS ? 0 : -EIO;
}

static int
barrier(void *ctx)
{
	return MPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -EIO;
}

static int
istart(void *ctx, uint64_t value, enum pmck_reduce_op op, void **out)
{
	struct request *r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->value = value;
	if (MPI_Iallreduce(&r->value, &r->result, 1, MPI_UINT64_T, mpi_op(op), *(MPI_Comm *)ctx,
			&r->req) != MPI_SUCCESS) {
		free(r);
		return -EIO;
	}
	*out = r;
	return 0;
}

static int
itest(void *ctx, void *req, int wait, int *done, uint64_t *result)
{
	struct request *r = req;
	int rc, flag = 0;

	(void)ctx;
	if (wait) {
		rc = MPI_Wait(&r->req, MPI_STATUS_IGNORE);
		flag = 1;
	} else {
		rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
	}
	if (rc != MPI_SUCCESS)
		return -EIO;
	*done = flag;
	if (flag) {
		*result = r->result;
		free(r);
	}
	return 0;
}

int
pmck_mpi_collectives(MPI_Comm *comm, struct pmck_collectives *out)
{
	int init = 0, rank, size;

	MPI_Initialized(&init);
	if (!init || !comm || !out)
		return -EINVAL;
	MPI_Comm_rank(*comm, &rank);
	MPI_Comm_size(*comm, &size);
	*out = (struct pmck_collectives){
		.ctx = comm, .rank = (unsigned)rank, .size = (unsigned)size,
		.allreduce_u64 = allreduce, .barrier = barrier,
		.iallreduce_u64_start = istart, .iallreduce_u64_test = itest,
	};
	return 0;
}
