#!/bin/sh
# python_copyout_fail.sh -- Python binding: a copy-out onto a full file system raises
# CopyoutError (ENOSPC, path, sizes) at the next save()/save_async(), wait_copyout()
# and close() (bindings/python/tests/test_copyout_fail.py).  The shared directory is
# an 8 MiB tmpfs mounted here (needs root, else SKIP), unmounted whatever happens.
dir=$(mktemp -d /var/tmp/pmck-py-cofail-XXXXXX) || exit 1
if ! mount -t tmpfs -o size=8M,mode=0700 tmpfs "$dir" 2>/dev/null; then
	rmdir "$dir"
	echo "1..0 # SKIP mount -t tmpfs -o size=8M is not permitted here (needs root)"
	exit 0
fi
trap 'umount "$dir" || umount -l "$dir"; rmdir "$dir"' EXIT
trap 'exit 1' INT TERM HUP
"$(dirname "$0")/../bindings/python/tests/run.sh" test_copyout_fail.py "$dir"
