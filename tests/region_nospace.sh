#!/bin/sh
# region_nospace.sh -- a sparse region or pool file on a file system without room (a 256 MiB
# file made by truncate on a 32 MiB tmpfs) is refused at open with ENOSPC, by pma_region_open
# through the tools, exit status 1, never a death by SIGBUS; a fully allocated file on the
# same full file system still opens, and a read-only open of the sparse one still works.
# A new pool larger than the room left (its pages allocated by populating the mapping, on
# tmpfs) is refused the same way, and its file and pages are gone; so is a sparse file whose
# blocks, counting pages past its end, look whole.
B=${BUILD:-build}
dir=$(mktemp -d /tmp/pmck-nospace-XXXXXX) || { echo "1..0 # SKIP no temporary directory"; exit 0; }
mnt=$dir/mnt
trap 'umount "$mnt" 2>/dev/null; rm -rf "$dir"' EXIT
mkdir -p "$mnt"
mount -t tmpfs -o size=32m tmpfs "$mnt" 2>/dev/null ||
	{ echo "1..0 # SKIP cannot mount a tmpfs here (needs root)"; exit 0; }
echo "1..8"
n=0
check() { # WHAT RC WANT OUTPUT: exit status RC and WANT in OUTPUT
	n=$((n + 1))
	case "$4" in
	*"$3"*) [ "$2" = "$5" ] && { echo "ok $n - $1"; return; } ;;
	esac
	echo "not ok $n - $1 (exit $5, want $2: $(echo "$4" | head -2 | tr '\n' ' '))"
}
truncate -s 256M "$mnt/sparse"
out=$("$B/pmckpt" create --pool "$mnt/sparse" --force 2>&1); rc=$?
check "pmckpt create on the sparse file: ENOSPC at open, exit 1" 1 "No space left on device" "$out" $rc
out=$("$B/pmckpt" import --pool "$mnt/sparse" --store s --file /nonexistent.safetensors 2>&1); rc=$?
check "pmckpt import into it: ENOSPC, exit 1" 1 "No space left on device" "$out" $rc
out=$("$B/pmbench" --region "$mnt/sparse" --sizes 64 --time-ms 1 --out "$dir/pm" 2>&1); rc=$?
check "pmbench on it: ENOSPC with the reason, exit 1" 1 "mapping it would end in SIGBUS" "$out" $rc
out=$("$B/pmckpt" list --pool "$mnt/sparse" 2>&1); rc=$?
check "a read-only open of it reserves nothing: no pool there, exit 1, no signal" 1 "no pool header" "$out" $rc
rm -f "$mnt/sparse"
out=$("$B/pmckpt" create --pool "$mnt/big" --size 160M 2>&1); rc=$?
check "pmckpt create of a 160 MiB pool on the 32 MiB tmpfs (in pieces, with 2 CPUs): ENOSPC, exit 1" \
	1 "No space left on device" "$out" $rc
n=$((n + 1))
used=$(du -sk "$mnt" | cut -f1)
if [ ! -e "$mnt/big" ] && [ "$used" -lt 1024 ]; then
	echo "ok $n - the refused pool's file is gone, and its pages (${used} KiB used)"
else
	echo "not ok $n - after the refused create: $(ls -l "$mnt" | tr '\n' ' '), ${used} KiB used"
fi
# tmpfs counts pages past a file's end in its blocks: a hole before the end is still filled.
if truncate -s 8M "$mnt/past" && fallocate -n -o 8M -l 16M "$mnt/past" 2>/dev/null; then
	cat /dev/zero >"$mnt/filler" 2>/dev/null
	out=$("$B/pmckpt" create --pool "$mnt/past" --force 2>&1); rc=$?
	check "a sparse file with pages past its end (fallocate --keep-size), tmpfs full: ENOSPC, exit 1" \
		1 "No space left on device" "$out" $rc
else
	n=$((n + 1)); echo "ok $n # SKIP no fallocate(1) --keep-size here"
fi
rm -f "$mnt/past" "$mnt/filler"
"$B/pmckpt" create -q --pool "$mnt/full" --size 30M >/dev/null 2>&1
cat /dev/zero >"$mnt/filler" 2>/dev/null # fill the file system to the last block
out=$("$B/pmckpt" create --pool "$mnt/full" --force 2>&1); rc=$?
check "an allocated pool on the full file system opens for writing (create --force formats it)" \
	0 "formatted" "$out" $rc
