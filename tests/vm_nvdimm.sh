#!/bin/sh
# vm_nvdimm.sh -- provisioning and checkpointing on an emulated NVDIMM: boots
# Debian's kernel in QEMU (tests/vm/run.sh; what runs inside: tests/vm/guest.sh).
# Budget PMCKPT_VM_BUDGET seconds (default 240) including building the image
# on a fresh machine; when the VM cannot be built or booted within it, the
# test is skipped with the reason, never passed.  `make check-vm` runs it alone.
HERE=$(cd "$(dirname "$0")" && pwd)
exec "$HERE/vm/run.sh"
