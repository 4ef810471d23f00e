#!/bin/sh
# run.sh -- boots Debian's kernel in QEMU with an emulated NVDIMM and runs
# tests/vm/guest.sh in it; TAP on stdout.
#
#   BUILD=build tests/vm/run.sh
#
# Six boots on three DIMMs (each a sparse 1 GiB backing file, so state
# survives power-off): two with label storage (label-size=128K), one without.
# See guest.sh for what each boot does.  Consoles are kept in $BUILD/vm/.
#
# Environment:
#   PMCKPT_VM_BUDGET  seconds for everything, image build included (default 240).
#                     When the image cannot be built, the first boot does not
#                     reach the guest's init within it, or it runs out before
#                     the last boot finishes while every check so far passed,
#                     the result is "1..0 # SKIP <reason>".  Failing checks are
#                     failures, and so is a guest hanging for a whole boot's
#                     cap (150 s).
#   PMCKPT_VM_ACCEL   tcg (default), kvm (required), or auto: KVM when a short
#                     probe boot under KVM finishes, TCG otherwise.  KVM guests
#                     were seen to hang on machines of this kind, so a probe
#                     proves it first and every boot has a timeout.
#   PMCKPT_VM_SMP     vCPUs (default 2).
set -u

B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BUDGET=${PMCKPT_VM_BUDGET:-240}
ACCEL=${PMCKPT_VM_ACCEL:-tcg}
SMP=${PMCKPT_VM_SMP:-2}
START=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - START))); }

LOGDIR="$B/vm"
mkdir -p "$LOGDIR"
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/pmckpt-vm-run.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
RESULTS="$WORK/results"
: >"$RESULTS"
n=0

skip() {
	echo "1..0 # SKIP $*"
	exit 0
}
result() { # ok|not ok, description
	n=$((n + 1))
	echo "$1 $n - $2" >>"$RESULTS"
}
finish() {
	echo "1..$n"
	cat "$RESULTS"
	echo "# VM: $ACCEL, $(($(date +%s) - START)) s in all; consoles in $LOGDIR/"
	grep -q "^not ok" "$RESULTS" && exit 1
	exit 0
}

for t in pmctl pmckpt pmck-demo tests/pmctl_store; do
	[ -x "$B/$t" ] || skip "$B/$t is not built (make BUILD=$B tests)"
done

# 1. Kernel and base initramfs (cached).
timeout "$(left)" "$HERE/build-image.sh" >"$WORK/image" 2>"$WORK/image.err"
rc=$?
case $rc in
0) ;;
77) skip "cannot build the VM image here: $(tail -1 "$WORK/image.err")" ;;
124) skip "building the VM image took more than the ${BUDGET} s budget" ;;
*)
	echo "1..1"
	echo "not ok 1 - build the VM image (tests/vm/build-image.sh exited $rc)"
	sed 's/^/# /' "$WORK/image.err"
	exit 1
	;;
esac
KERNEL=$(sed -n 's/^KERNEL=//p' "$WORK/image")
BASE=$(sed -n 's/^BASE=//p' "$WORK/image")

# 2. The project's part of the initramfs: tools, their libraries, init, tests.
root="$WORK/root"
mkdir -p "$root/pmckpt"
cp "$HERE/init" "$root/init"
cp "$HERE/guest.sh" "$HERE/lsan.supp" "$root/pmckpt/"
cp "$B/pmctl" "$B/pmckpt" "$B/pmck-demo" "$B/tests/pmctl_store" "$root/pmckpt/"
# setpriv (util-linux): the user phases run tools as an unprivileged user.
SETPRIV=$(command -v setpriv) || skip "needs setpriv (util-linux)"
cp "$SETPRIV" "$root/pmckpt/setpriv"
for bin in "$B/pmctl" "$B/pmckpt" "$B/pmck-demo" "$B/tests/pmctl_store" "$SETPRIV"; do
	ldd "$bin" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p'
done | sort -u | while read -r lib; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
# The file the user phases import: 6 MiB of seeded tensors (a plain safetensors
# file), imported into a pool here and exported, so it is in pmckpt's format.
python3 - "$WORK/plain.safetensors" <<'PYEOF' || skip "python3 cannot write the reference file"
import json, random, struct, sys
rng = random.Random(20261123)
spec = [("embed", "F32", [512, 1024]), ("block.0.w", "BF16", [1024, 1024]),
        ("block.0.b", "F32", [1024]), ("step", "I64", [])]
size = {"F32": 4, "BF16": 2, "I64": 8}
header, blobs, off = {}, [], 0
for name, dt, shape in spec:
    n = size[dt]
    for d in shape:
        n *= d
    header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
    blobs.append(rng.randbytes(n))
    off += n
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PYEOF
"$B/pmckpt" import -q --pool "$WORK/ref.pool" --size 32M --store ref --file "$WORK/plain.safetensors" \
	--step 42 >/dev/null && "$B/pmckpt" export -q --pool "$WORK/ref.pool" --store ref \
	--out "$root/pmckpt/ref.safetensors" >/dev/null || {
	echo "1..1"
	echo "not ok 1 - make the reference file with pmckpt import and export on the host"
	exit 1
}
rm -f "$WORK/ref.pool"
chmod 755 "$root/init"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$WORK/tools.cpio.gz"
cat "$BASE" "$WORK/tools.cpio.gz" >"$WORK/initrd"

# 3. Boots.  boot NAME PHASE DIMMFILE LABELS(0|1) ACCEL TIMEOUT -> console in $LOGDIR/NAME.log
boot() {
	name=$1 phase=$2 file=$3 labels=$4 accel=$5 tmo=$6
	dimm="nvdimm,id=nv0,memdev=mem0"
	[ "$labels" = 1 ] && dimm="$dimm,label-size=128K"
	cpu=max
	[ "$accel" = kvm ] && cpu=host
	(timeout --foreground -s KILL "$tmo" qemu-system-x86_64 \
		-machine "pc,nvdimm=on,accel=$accel" -cpu "$cpu" -smp "$SMP" \
		-m 1G,slots=2,maxmem=4G \
		-object "memory-backend-file,id=mem0,share=on,mem-path=$file,size=1G" \
		-device "$dimm" \
		-kernel "$KERNEL" -initrd "$WORK/initrd" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 pmckpt.phase=$phase" \
		-nodefaults -display none -serial stdio -no-reboot \
		</dev/null 2>&1) 2>/dev/null | tr -d '\r' >"$LOGDIR/$name.log"
}

# Numbers the guest's results; 0 when the guest finished, 1 otherwise.
collect() {
	name=$1 phase=$2
	log="$LOGDIR/$name.log"
	sed -n 's/^PMCKPT-TAP: //p' "$log" | while IFS= read -r line; do
		case "$line" in
		"#"*) echo "$line" ;;
		"not ok - "*) echo "N ${line#not ok - }" ;;
		"ok - "*) echo "Y ${line#ok - }" ;;
		esac
	done >"$WORK/$name.tap"
	while IFS= read -r line; do
		case "$line" in
		"#"*) echo "$line" >>"$RESULTS" ;;
		"N "*) result "not ok" "${line#N }" ;;
		"Y "*) result "ok" "${line#Y }" ;;
		esac
	done <"$WORK/$name.tap"
	if grep -q "^PMCKPT-DONE $phase" "$log"; then
		result "ok" "$name: the guest finished and powered off"
		return 0
	fi
	result "not ok" "$name: the guest finished and powered off"
	tail -15 "$log" | sed 's/^/#   /' >>"$RESULTS"
	return 1
}

if [ "$ACCEL" = auto ]; then
	ACCEL=tcg
	if [ -w /dev/kvm ]; then
		truncate -s 1G "$WORK/probe.img"
		boot probe probe "$WORK/probe.img" 0 kvm 15
		grep -q "^PMCKPT-DONE probe" "$LOGDIR/probe.log" && ACCEL=kvm
		rm -f "$WORK/probe.img"
	fi
fi

truncate -s 1G "$WORK/labels.img" "$WORK/labelless.img" "$WORK/user.img"
CAP=150 # seconds one boot may take at most; a guest that takes longer hangs
first=1
budget_out=""
for spec in "labels1 labels.img 1" "labels2 labels.img 1" \
		"labelless1 labelless.img 0" "labelless2 labelless.img 0" \
		"user1 user.img 1" "user2 user.img 1"; do
	set -- $spec
	t=$(left)
	[ "$t" -gt "$CAP" ] && t=$CAP
	if [ "$t" -lt 5 ]; then
		[ "$first" = 1 ] && skip "no time left in the ${BUDGET} s budget to boot the VM"
		budget_out=$1
		break
	fi
	boot "$1" "$1" "$WORK/$2" "$3" "$ACCEL" "$t"
	if [ "$first" = 1 ] && ! grep -q "^PMCKPT-INIT" "$LOGDIR/$1.log"; then
		last=$(grep -v '^[[:space:]]*$' "$LOGDIR/$1.log" | tail -1 | cut -c1-160)
		skip "the VM did not reach its init within $t s ($ACCEL)${last:+; last console line: $last}; see $LOGDIR/$1.log"
	fi
	first=0
	# A boot cut short by the budget (not by the per-boot cap) is the machine's
	# slowness, not a result: it ends the run, reported below.
	if [ "$t" -lt "$CAP" ] && ! grep -q "^PMCKPT-DONE $1" "$LOGDIR/$1.log"; then
		budget_out=$1
		break
	fi
	collect "$1" "$1"
done
if [ -n "$budget_out" ]; then
	if grep -q "^not ok" "$RESULTS"; then
		result "not ok" "the ${BUDGET} s budget ran out at boot $budget_out"
		finish
	fi
	skip "the ${BUDGET} s budget ran out at boot $budget_out (machine too slow or busy;" \
		"the $n checks before it passed; make check-vm allows 600 s)"
fi
finish
