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

static int
allgather(void *ctx, uint64_t value, uint64_t *all)
{
	return MPI_Allgather(&value, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, *(MPI_Comm *)ctx) ==
			MPI_SUCCESS ? 0 : -EIO;
}

#define PARTNER_TAG 0x504d /* pmckpt's point-to-point messages on the caller's communicator */
#define MSG_MAX ((size_t)1 << 30) /* bytes per MPI message: counts are ints */

/*
 * Both halves in pieces of at most MSG_MAX bytes, the same pieces on both
 * sides (they are cut from the lengths alone); MPI_Sendrecv pairs them and
 * never deadlocks on a ring.  MPI_PROC_NULL skips a half of length 0.
 */
static int
sendrecv(void *ctx, unsigned dst, const void *sbuf, size_t slen, unsigned src, void *rbuf,
		size_t rlen)
{
	MPI_Comm comm = *(MPI_Comm *)ctx;
	size_t off = 0, total = slen > rlen ? slen : rlen;

	do {
		size_t s = slen > off ? slen - off : 0, r = rlen > off ? rlen - off : 0;
		s = s < MSG_MAX ? s : MSG_MAX;
		r = r < MSG_MAX ? r : MSG_MAX;
		if (MPI_Sendrecv(s ? (const char *)sbuf + off : NULL, (int)s, MPI_BYTE,
				s ? (int)dst : MPI_PROC_NULL, PARTNER_TAG,
				r ? (char *)rbuf + off : NULL, (int)r, MPI_BYTE,
				r ? (int)src : MPI_PROC_NULL, PARTNER_TAG, comm,
				MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return -EIO;
		off += MSG_MAX;
	} while (off < total);
	return 0;
}

int
pmck_mpi_collectives(MPI_Comm *comm, struct pmck_collectives *out)
{
	int init = 0, rank, size, level = MPI_THREAD_SINGLE;

	MPI_Initialized(&init);
	if (!init || !comm || !out)
		return -EINVAL;
	MPI_Comm_rank(*comm, &rank);
	MPI_Comm_size(*comm, &size);
	MPI_Query_thread(&level);
	*out = (struct pmck_collectives){
		.ctx = comm, .rank = (unsigned)rank, .size = (unsigned)size,
		.allreduce_u64 = allreduce, .barrier = barrier,
		.iallreduce_u64_start = istart, .iallreduce_u64_test = itest,
		.allgather_u64 = allgather,
		/* The partner thread sends while other threads reduce: MPI must allow that. */
		.sendrecv = level == MPI_THREAD_MULTIPLE ? sendrecv : NULL,
	};
	return 0;
}

int
pmck_mpi_node(MPI_Comm comm, uint64_t *node)
{
	MPI_Comm local;
	int rank, lowest;

	if (!node || MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
		return -EINVAL;
	if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) != MPI_SUCCESS)
		return -EIO;
	int rc = MPI_Allreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, local);
	MPI_Comm_free(&local);
	if (rc != MPI_SUCCESS)
		return -EIO;
	*node = (uint64_t)lowest;
	return 0;
}
