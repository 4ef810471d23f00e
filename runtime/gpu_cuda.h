/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu_cuda.h -- what the runtime's CUDA files (gpu.cu, the pipeline's GPU
 * path; gpu_checksum.cu, checksums of device memory) share: error reports,
 * the device scope, and the hash kernel's launch.  C++ (nvcc) only.
 */
#ifndef PMCK_GPU_CUDA_H
#define PMCK_GPU_CUDA_H 1

#include <cuda_runtime.h>
#include <errno.h>

extern "C" {
#include "pmckpt.h"
#include "errmsg.h"
}

/*
 * Reports a failed runtime call.  It also consumes the thread's last error,
 * which the call set: otherwise the next launch's cudaGetLastError on this
 * thread (a writer's next checkpoint, say) would report it again as its own.
 * A sticky error (the context is lost) stays for every later call anyway.
 */
static inline int
cuda_fail(cudaError_t e, const char *what)
{
	(void)cudaGetLastError();
	int code = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
			e == cudaErrorInvalidDevice || e == cudaErrorInitializationError ?
			-ENODEV : e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
	return pmck__err(code, "GPU path: %s failed: %s (%s)", what, cudaGetErrorName(e),
			cudaGetErrorString(e));
}

#define CUDA_TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return cuda_fail(e_, #call); } while (0)

/*
 * A kernel launch reports its own failure only through cudaGetLastError, which
 * returns any earlier unconsumed error of the thread too (one that a cleanup
 * call ignored): cleared before each launch, so what is read after it is the
 * launch's.  cudart is linked statically, so that error state is this
 * library's own: the framework's errors are not in it.
 */
#define LAUNCH(kernel, grid, block, stream, ...) do { (void)cudaGetLastError(); \
	kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__); \
	cudaError_t e_ = cudaGetLastError(); \
	if (e_ != cudaSuccess) return cuda_fail(e_, #kernel " launch"); } while (0)

/*
 * Makes `device` current for a scope and restores the caller's device at
 * its end: calls made on the caller's thread (put_layer, its waits) must
 * not change which device the framework's next call lands on.
 */
struct device_scope {
	int prev = -1;
	bool changed = false;
	cudaError_t err;
	explicit device_scope(int device)
	{
		err = cudaGetDevice(&prev);
		if (err == cudaSuccess && prev != device) {
			err = cudaSetDevice(device);
			changed = err == cudaSuccess;
		}
	}
	~device_scope()
	{
		if (changed)
			cudaSetDevice(prev);
	}
};

#define DEVICE_SCOPE(g) device_scope scope_((g)->device); CUDA_TRY(scope_.err)

static inline cudaStream_t
caller_stream(void *stream)
{
	return stream ? (cudaStream_t)stream : cudaStreamLegacy;
}

/*
 * The hash kernel (gpu_checksum.cu): XXH3-64 of each chunk of a list, a
 * warp per chunk, into *out.  A chunk is read in place (device memory, or
 * mapped pinned memory); one that takes XXH3's long path (more than 240
 * bytes) must start 8-aligned, a short one may start anywhere.
 */
struct pmck_hash_chunk {
	const uint64_t *src;
	uint64_t len;
	uint64_t *out;
};

/*
 * Launches the hash kernel on `stream` over n chunks of list (an address
 * the device reads), in at most max_blocks blocks (0: two per SM of the
 * current device).  The current device must be the stream's.
 */
int pmck__gpu_hash_launch(const struct pmck_hash_chunk *list, size_t n, unsigned max_blocks,
		cudaStream_t stream);

/* The hash kernel's function, for preloading it (gpu.cu: preload_kernels). */
const void *pmck__gpu_hash_kernel(void);

#endif
