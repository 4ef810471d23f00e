#!/bin/sh
# build-image.sh -- the kernel and base initramfs for the emulated-NVDIMM VM tests.
#
#   tests/vm/build-image.sh        prints KERNEL=<path> and BASE=<path> on stdout
#
# Installs what it needs itself (as root: qemu-system-x86, busybox-static, cpio,
# kmod), downloads Debian's current kernel package (the dependency of
# linux-image-amd64, `apt-get download` + `dpkg -x`), keeps its vmlinuz and the
# NVDIMM modules (libnvdimm nfit nd_btt nd_pmem dax_pmem device_dax, depmod'ed),
# and packs busybox-static and the modules into a base initramfs.  The
# project's tools and the test scripts go into a second archive that
# tests/vm/run.sh builds for every run, so only this part is cached:
#
#   $PMCKPT_VM_CACHE (default /var/tmp/pmckpt-vm)/<kernel package>-<version>/
#       vmlinuz, base-<hash>.cpio.gz
#
# keyed by the kernel package and version and a hash of busybox and of this
# script.  Building is serialised with flock and published by rename, so
# parallel runs are safe.  Exit status: 0 built or cached; 77 cannot be done
# here (not root and something is missing, no archive, ...: the reason is on
# stderr); 1 other failure.
set -eu

CACHE=${PMCKPT_VM_CACHE:-/var/tmp/pmckpt-vm}
MODULES="libnvdimm nfit nd_btt nd_pmem dax_pmem device_dax"
HERE=$(cd "$(dirname "$0")" && pwd)

skip() { echo "build-image: $*" >&2; exit 77; }
say() { echo "build-image: $*" >&2; }

# 1. Host packages.
need=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || need="$need qemu-system-x86"
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed" ||
	need="$need busybox-static"
command -v cpio >/dev/null 2>&1 || need="$need cpio"
command -v depmod >/dev/null 2>&1 || [ -x /sbin/depmod ] || need="$need kmod"
if [ -n "$need" ]; then
	[ "$(id -u)" = 0 ] || skip "needs$need (run as root, or: apt-get install$need)"
	command -v apt-get >/dev/null 2>&1 || skip "needs$need and there is no apt-get"
	say "installing$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends $need >/dev/null 2>&1 || {
		apt-get update -qq >/dev/null 2>&1 || true
		apt-get install -y -qq --no-install-recommends $need >/dev/null 2>&1 ||
			skip "apt-get install$need failed"
	}
fi
DEPMOD=$(command -v depmod || echo /sbin/depmod)

# 2. The kernel package linux-image-amd64 points at, and its version.
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
	sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1)
[ -n "$KPKG" ] || skip "apt-cache knows no linux-image-amd64 (no Debian archive configured?)"
KVER=$(apt-cache policy "$KPKG" 2>/dev/null | sed -n 's/^ *Candidate: //p')
[ -n "$KVER" ] && [ "$KVER" != "(none)" ] || skip "no installable version of $KPKG"
KDIR="$CACHE/$KPKG-$KVER"
mkdir -p "$CACHE"

exec 9>"$CACHE/.lock"
flock 9

if [ ! -f "$KDIR/vmlinuz" ]; then
	say "fetching $KPKG $KVER"
	tmp=$(mktemp -d "$CACHE/tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# _apt cannot write into a root-only temporary directory.
	chmod 755 "$tmp"
	(cd "$tmp" && apt-get download -q "$KPKG=$KVER" >/dev/null 2>&1) ||
		(cd "$tmp" && apt-get download -q "$KPKG" >/dev/null 2>&1) ||
		skip "apt-get download $KPKG failed (no network or archive?)"
	dpkg -x "$tmp"/"$KPKG"_*.deb "$tmp/x"
	kv=$(ls "$tmp/x/lib/modules")
	mkdir -p "$tmp/k/lib/modules/$kv"
	cp "$tmp"/x/boot/vmlinuz-* "$tmp/k/vmlinuz"
	for m in $MODULES; do
		f=$(find "$tmp/x/lib/modules/$kv" -name "$m.ko" -o -name "$m.ko.xz" \
			-o -name "$m.ko.zst" -o -name "$m.ko.gz" | head -1)
		[ -n "$f" ] || skip "$KPKG has no module $m"
		rel=${f#"$tmp/x/lib/modules/$kv/"}
		mkdir -p "$tmp/k/lib/modules/$kv/$(dirname "$rel")"
		case "$f" in
		*.xz) xz -dc "$f" >"$tmp/k/lib/modules/$kv/${rel%.xz}" ;;
		*.zst) zstd -qdc "$f" >"$tmp/k/lib/modules/$kv/${rel%.zst}" ;;
		*.gz) gzip -dc "$f" >"$tmp/k/lib/modules/$kv/${rel%.gz}" ;;
		*) cp "$f" "$tmp/k/lib/modules/$kv/$rel" ;;
		esac
	done
	cp "$tmp/x/lib/modules/$kv"/modules.order "$tmp/x/lib/modules/$kv"/modules.builtin* \
		"$tmp/k/lib/modules/$kv/" 2>/dev/null || true
	"$DEPMOD" -b "$tmp/k" "$kv"
	echo "$kv" >"$tmp/k/kernel-release"
	rm -rf "$KDIR"
	mv "$tmp/k" "$KDIR"
	rm -rf "$tmp"
	trap - EXIT
fi

# 3. The base initramfs: busybox and the modules.
bb=/bin/busybox
key=$( (cat "$bb" "$0"; echo "$KPKG-$KVER") | sha256sum | cut -c1-16)
BASE="$KDIR/base-$key.cpio.gz"
if [ ! -f "$BASE" ]; then
	say "packing the base initramfs"
	tmp=$(mktemp -d "$CACHE/tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	r="$tmp/root"
	mkdir -p "$r/bin" "$r/sbin" "$r/proc" "$r/sys" "$r/dev" "$r/tmp" "$r/run" "$r/etc" \
		"$r/lib" "$r/lib64" "$r/usr/bin" "$r/usr/sbin"
	cp "$bb" "$r/bin/busybox"
	cp -a "$KDIR/lib/modules" "$r/lib/"
	(cd "$r" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$tmp/base.cpio.gz"
	mv "$tmp/base.cpio.gz" "$BASE"
	rm -rf "$tmp"
	trap - EXIT
fi

echo "KERNEL=$KDIR/vmlinuz"
echo "BASE=$BASE"
