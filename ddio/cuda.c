/* SPDX-License-Identifier: BSD-3-Clause */
/* cuda.c -- the PCI address of a CUDA device (cudaDeviceGetPCIBusId), when built with CUDA. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#ifdef PMCK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int
ddio_cuda_pci_bdf(int cuda_device, char *buf, size_t len)
{
	if (!buf || len < 16 || cuda_device < 0)
		return ddio__err(-EINVAL, "ddio_cuda_pci_bdf: bad argument");
#ifdef PMCK_HAVE_CUDA
	char id[64];
	unsigned dom, bus, dev, fn;
	cudaError_t e = cudaDeviceGetPCIBusId(id, (int)sizeof(id), cuda_device);

	if (e != cudaSuccess)
		return ddio__err(-ENODEV, "CUDA device %d: %s", cuda_device, cudaGetErrorString(e));
	/* "0000:18:00.0" or "00000000:18:00.0", possibly upper case. */
	if (sscanf(id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
		return ddio__err(-ENODEV, "CUDA device %d has an unparsable PCI bus id '%s'",
				cuda_device, id);
	snprintf(buf, len, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return 0;
#else
	return ddio__err(-ENOTSUP, "built without CUDA: cannot ask which PCI device CUDA device %d "
			"is; give its address instead (nvidia-smi --query-gpu=pci.bus_id --format=csv)",
			cuda_device);
#endif
}
