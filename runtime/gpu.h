/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu.h -- the runtime's internal interface to CUDA (runtime/gpu.cu), or
 * to its absence (runtime/gpu_none.c when built without CUDA).
 * Every call returns 0 or -ENODEV / -EIO with a message.
 */
#ifndef PMCK_GPU_H
#define PMCK_GPU_H 1

#include <stddef.h>
#include <stdint.h>

#include "pmckpt.h"

struct pmck_gpu;

/* The CUDA runtime version the library was built against (CUDART_VERSION); 0: without CUDA. */
int pmck__gpu_build_version(void);

/*
 * Makes device `device` current for the calling thread and maps the whole
 * region into its address space (cudaHostRegister Mapped|Portable).  With
 * snapshot_bytes > 0 also reserves that much device memory (strategy G).
 */
int pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes,
		unsigned nlayers, struct pmck_gpu **out);
/* Unregisters the region and frees everything. */
void pmck__gpu_close(struct pmck_gpu **g);

/* Makes the device current on the calling thread (each writer thread calls it once). */
int pmck__gpu_bind_thread(struct pmck_gpu *g);

/*
 * Copies len bytes of device memory at src to dst inside the region,
 * through the region's device pointer, on the calling thread's stream, and
 * returns when they have left the GPU: by DMA (cudaMemcpyAsync) or by the
 * copy kernel (use_kernel), which ends with __threadfence_system.
 */
int pmck__gpu_to_region(struct pmck_gpu *g, void *dst, const void *src, size_t len,
		int use_kernel);

/* Copies len bytes of device memory to pinned host memory and waits. */
int pmck__gpu_to_host(struct pmck_gpu *g, void *host, const void *src, size_t len);

/* Pinned host buffers for strategy C. */
int pmck__gpu_host_alloc(struct pmck_gpu *g, size_t len, void **out);
void pmck__gpu_host_free(struct pmck_gpu *g, void *p);

/*
 * Strategy G: enqueues a device-to-device copy of src into the snapshot
 * buffer at offset off (on the snapshot stream) and returns the snapshot's
 * address in *snap; pmck__gpu_snapshot_mark(layer) records the layer's
 * event after its copies, pmck__gpu_snapshot_wait(layer) waits for it.
 */
int pmck__gpu_snapshot(struct pmck_gpu *g, uint64_t off, const void *src, size_t len,
		const void **snap);
int pmck__gpu_snapshot_mark(struct pmck_gpu *g, unsigned layer);
int pmck__gpu_snapshot_wait(struct pmck_gpu *g, unsigned layer);

#endif
