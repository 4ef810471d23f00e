#!/bin/sh
# guest.sh PHASE -- the tests run inside the NVDIMM VM (busybox sh).
#
# Results go to the console as "PMCKPT-TAP: ok - ..." / "PMCKPT-TAP: not ok
# - ..." / "PMCKPT-TAP: # ...", which tests/vm/run.sh numbers into its TAP
# stream; "PMCKPT-LOG ..." lines are kept in the console log only.
#
# Phases (one per boot; the DIMM's backing file carries state across boots):
#   labels1     DIMM with label storage, fresh: list, provision (refused
#               without --init-labels, then done), provision again (no change),
#               open a store by name, commit checkpoints
#   labels2     same DIMM after power-off: names persisted, provision again (no
#               change), recover bit-exact, crash loop, destroy (refused while in
#               use and without --force), provision again (recreated)
#   labelless1  DIMM without label storage: list, named namespace refused,
#               namespace0.0 reconfigured to devdax by provision, again (no
#               change), store opened by region, commit
#   labelless2  same DIMM after power-off: recover by region, destroy
#   user1       an integrator's first run on a fresh labelled DIMM: provision
#               one namespace over the whole region, pmckpt create on its
#               devdax, the C demo on it, pmckpt import of a safetensors file
#   user2       same DIMM after power-off: pmckpt verify, and pmckpt export
#               gives back the imported file bit for bit; then the device is
#               granted to a group as a udev rule would (GROUP, MODE 0660), and
#               a user of that group who is not root verifies, exports and runs
#               the demo on it; without the grant that user is denied
#   probe       nothing: proves the VM boots (KVM probe)
PHASE=${1:-probe}
P=/pmckpt
PMCTL=$P/pmctl
STORE=$P/pmctl_store
PMCKPT=$P/pmckpt
DEMO=$P/pmck-demo
REF=$P/ref.safetensors  # made on the host by tests/vm/run.sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
# Sanitizer builds: a known leak inside libndctl (see lsan.supp).
export LSAN_OPTIONS=suppressions=$P/lsan.supp

ok() { echo "PMCKPT-TAP: ok - $PHASE: $*"; }
nok() { echo "PMCKPT-TAP: not ok - $PHASE: $*"; }
diag() { echo "PMCKPT-TAP: # $*"; }
log() { sed 's/^/PMCKPT-LOG /' "$@"; }

# check DESC CMD...: ok when CMD exits 0; its output is shown on failure.
check() {
	desc=$1
	shift
	if "$@" >/tmp/out 2>&1; then
		ok "$desc"
	else
		nok "$desc (exit $?)"
		sed 's/^/PMCKPT-TAP: #   /' /tmp/out
	fi
	log /tmp/out
}

# refuse DESC PATTERN CMD...: ok when CMD exits 1 and says PATTERN.
refuse() {
	desc=$1
	pat=$2
	shift 2
	"$@" >/tmp/out 2>&1
	rc=$?
	if [ "$rc" = 1 ] && grep -q -- "$pat" /tmp/out; then
		ok "$desc"
	else
		nok "$desc (exit $rc, expected 1 and '$pat')"
		sed 's/^/PMCKPT-TAP: #   /' /tmp/out
	fi
	log /tmp/out
}

# has DESC FILE PATTERN: ok when FILE contains PATTERN (grep -E).
has() {
	if grep -Eq -- "$3" "$2"; then ok "$1"; else nok "$1"; sed 's/^/PMCKPT-TAP: #   /' "$2"; fi
}
hasnt() {
	if grep -Eq -- "$3" "$2"; then nok "$1"; sed 's/^/PMCKPT-TAP: #   /' "$2"; else ok "$1"; fi
}

# tap CMD...: forwards the ok / not ok lines of a TAP program.
tap() {
	"$@" >/tmp/tap 2>&1
	rc=$?
	log /tmp/tap
	sed -nE "s/^ok [0-9]+( -)?/PMCKPT-TAP: ok - $PHASE:/p; s/^not ok [0-9]+( -)?/PMCKPT-TAP: not ok - $PHASE:/p; s/^# /PMCKPT-TAP: # /p" /tmp/tap
	if [ "$rc" != 0 ] && ! grep -q "^not ok" /tmp/tap; then
		nok "$* exited $rc"
		tail -5 /tmp/tap | sed 's/^/PMCKPT-TAP: #   /'
	fi
}

# Waits (up to 20 s) for the NVDIMM bus and its regions to show up.
wait_regions() {
	i=0
	while [ $i -lt 200 ]; do
		[ -e /sys/bus/nd/devices/region0 ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

cat >/tmp/prov.conf <<'EOF'
# two devdax namespaces of 496 MiB on region0, 2 MiB aligned
namespace ckpt%d count=2 region=region0 size=496M align=2M
EOF

case "$PHASE" in
probe)
	ok "the VM boots"
	exit 0
	;;
esac

if wait_regions; then ok "NVDIMM region0 appeared"; else nok "NVDIMM region0 appeared"; fi

case "$PHASE" in
labels1)
	check "pmctl list --json" $PMCTL list --json
	cp /tmp/out /tmp/list0.json
	has "region0 is label-less until labels are initialised" /tmp/list0.json '"labels":"uninitialized"'
	has "namespace0.0 is raw" /tmp/list0.json '"mode":"raw"'
	check "pmctl list (human)" $PMCTL list
	refuse "provision without --init-labels is refused" "init-labels" \
		$PMCTL provision --config /tmp/prov.conf
	check "list unchanged after the refusal" $PMCTL list --json
	if cmp -s /tmp/out /tmp/list0.json; then ok "refusal changed nothing"; else nok "refusal changed nothing"; fi
	check "provision --dry-run" $PMCTL provision --config /tmp/prov.conf --init-labels --dry-run
	has "dry run plans init-labels and two creations" /tmp/out '3 changes planned'
	check "pmctl list --json after the dry run" $PMCTL list --json
	if cmp -s /tmp/out /tmp/list0.json; then ok "dry run changed nothing"; else nok "dry run changed nothing"; fi
	check "provision --init-labels creates ckpt0 and ckpt1" \
		$PMCTL provision --config /tmp/prov.conf --init-labels
	has "provision reports 3 changes applied" /tmp/out '3 changes applied'
	check "pmctl list --json after provisioning" $PMCTL list --json
	cp /tmp/out /tmp/list1.json
	has "region0 is labelled now" /tmp/list1.json '"labels":"active"'
	has "ckpt0 is listed" /tmp/list1.json '"name":"ckpt0"'
	has "ckpt1 is listed" /tmp/list1.json '"name":"ckpt1"'
	has "devdax with 2 MiB alignment" /tmp/list1.json '"align":2097152'
	hasnt "both are active" /tmp/list1.json '"state":"disabled"'
	check "pmctl list after provisioning (human)" $PMCTL list
	check "pmctl list --dax" $PMCTL list --dax
	has "the dax devices are listed" /tmp/out '^/dev/dax0\.1 '
	check "provision again" $PMCTL provision --config /tmp/prov.conf --init-labels
	has "the second run says nothing to do" /tmp/out 'nothing to do'
	check "provision again, JSON" $PMCTL provision --config /tmp/prov.conf --json
	has "the JSON plan has 0 changes" /tmp/out '"changes":0'
	check "pmctl list --json after the second run" $PMCTL list --json
	if cmp -s /tmp/out /tmp/list1.json; then ok "second run changed nothing"; else nok "second run changed nothing"; fi
	refuse "create of an existing name is refused" "exists" \
		$PMCTL create --name ckpt0 --size 16M
	check "pmctl path ckpt0" $PMCTL path ckpt0
	has "ckpt0 resolves to a dax device" /tmp/out '^/dev/dax[0-9]+\.[0-9]+$'
	check "pmctl path ckpt0 --numa 0" $PMCTL path ckpt0 --numa 0
	refuse "pmctl path ckpt0 on node 5 finds nothing" "no devdax namespace" \
		$PMCTL path ckpt0 --numa 5
	tap $STORE --dev ckpt0 --commit 8
	;;
labels2)
	check "pmctl list --json after power-off" $PMCTL list --json
	cp /tmp/out /tmp/list2.json
	has "ckpt0 persisted across power-off" /tmp/list2.json '"name":"ckpt0"'
	has "ckpt1 persisted across power-off" /tmp/list2.json '"name":"ckpt1"'
	check "provision after reboot" $PMCTL provision --config /tmp/prov.conf
	has "nothing to do after reboot" /tmp/out 'nothing to do'
	tap $STORE --dev ckpt0 --recover 8
	tap $STORE --dev ckpt0 --crash 12
	$STORE --dev ckpt0 --hold >/tmp/hold 2>&1 &
	holder=$!
	i=0
	while [ $i -lt 100 ] && ! grep -q holding /tmp/hold; do sleep 0.1; i=$((i + 1)); done
	refuse "destroy of a mapped namespace is refused, even with --force" "in use" \
		$PMCTL destroy ckpt0 --force
	kill -9 $holder
	wait $holder 2>/dev/null
	refuse "destroy of a namespace holding a pool needs --force" "pmckpt pool" \
		$PMCTL destroy ckpt0
	check "destroy --force ckpt0" $PMCTL destroy ckpt0 --force
	check "destroy ckpt1 (no pool) without --force" $PMCTL destroy ckpt1
	check "pmctl list --json after destroy" $PMCTL list --json
	hasnt "ckpt0 is gone" /tmp/out '"name":"ckpt0"'
	hasnt "ckpt1 is gone" /tmp/out '"name":"ckpt1"'
	check "provision recreates both" $PMCTL provision --config /tmp/prov.conf
	has "two creations" /tmp/out '2 changes applied'
	check "provision once more" $PMCTL provision --config /tmp/prov.conf
	has "nothing to do" /tmp/out 'nothing to do'
	check "reconfigure ckpt1 as it is" $PMCTL reconfigure ckpt1
	has "nothing to do" /tmp/out 'nothing to do'
	refuse "reconfigure 496 MiB to 1 GiB alignment is refused" "not a multiple" \
		$PMCTL reconfigure ckpt1 --align 1G --force
	;;
labelless1)
	check "pmctl list --json" $PMCTL list --json
	cp /tmp/out /tmp/list0.json
	has "region0 is label-less for good" /tmp/list0.json '"labels":"none"'
	refuse "a named namespace on a label-less region is refused" "label-less" \
		$PMCTL provision --config /tmp/prov.conf --init-labels
	check "provision dev=namespace0.0 (reconfigure to devdax)" \
		$PMCTL provision --ns 'dev=namespace0.0 align=2M'
	has "one change applied" /tmp/out '1 change applied'
	check "provision dev=namespace0.0 again" $PMCTL provision --ns 'dev=namespace0.0 align=2M'
	has "nothing to do" /tmp/out 'nothing to do'
	check "pmctl list --json" $PMCTL list --json
	has "namespace0.0 is devdax" /tmp/out '"mode":"devdax"'
	check "pmctl path region0" $PMCTL path region0
	has "region0 resolves to /dev/dax0.0" /tmp/out '^/dev/dax0\.0$'
	tap $STORE --dev region0 --commit 5
	;;
labelless2)
	tap $STORE --dev region0 --recover 5
	refuse "destroy needs --force (pool)" "pmckpt pool" $PMCTL destroy namespace0.0
	check "destroy --force namespace0.0" $PMCTL destroy namespace0.0 --force
	check "pmctl list --json" $PMCTL list --json
	has "namespace0.0 is raw again" /tmp/out '"mode":"raw"'
	check "reconfigure namespace0.0 back to devdax" $PMCTL reconfigure namespace0.0
	check "reconfigure again (no change)" $PMCTL reconfigure namespace0.0
	has "nothing to do" /tmp/out 'nothing to do'
	;;
user1)
	check "provision ckpt0 over the whole region" \
		$PMCTL provision --ns "ckpt0 size=all align=2M" --init-labels
	check "provision again" $PMCTL provision --ns "ckpt0 size=all align=2M" --init-labels
	has "the second run says nothing to do" /tmp/out 'nothing to do'
	check "pmctl path ckpt0" $PMCTL path ckpt0
	dev=$(cat /tmp/out)
	has "ckpt0 resolves to a dax device" /tmp/out '^/dev/dax[0-9]+\.[0-9]+$'
	refuse "before pmckpt create, pmckpt list finds no pool on the device" \
		"no pool header" $PMCKPT list --pool "$dev"
	check "pmck-demo on the blank device" $DEMO --path "$dev" --vocab 1000 --layers 0 \
		--steps 5 --every 5 --threads 2
	has "the demo formatted the blank device" /tmp/out '^formatted a pool on the blank device'
	has "and recovered bit-exact" /tmp/out '^PASS: '
	refuse "pmckpt create refuses the pool the demo left" "already holds a pmalloc pool with 0" \
		$PMCKPT create --pool "$dev"
	check "pmckpt create --force formats it" $PMCKPT create --pool "$dev" --force --json
	has "a devdax pool" /tmp/out '"kind": "devdax"'
	refuse "pmckpt create again is refused (already a pool)" "already holds" \
		$PMCKPT create --pool "$dev"
	check "pmck-demo on the device" $DEMO --path "$dev" --vocab 1000 --layers 1 --steps 10 \
		--every 5 --threads 2
	has "the demo recovered bit-exact" /tmp/out '^PASS: '
	has "the demo used the devdax pool" /tmp/out 'devdax'
	check "pmckpt import of a safetensors file" $PMCKPT import --pool "$dev" --store imported \
		--file $REF
	has "the import created the store from the file's layout" /tmp/out 'created store'
	check "pmckpt list --pool" $PMCKPT list --pool "$dev" --json
	has "the imported store is listed" /tmp/out '"imported"'
	hasnt "the demo's store was removed" /tmp/out '"demo"'
	;;
user2)
	check "pmctl path ckpt0 after power-off" $PMCTL path ckpt0
	dev=$(cat /tmp/out)
	check "pmckpt verify after power-off" $PMCKPT verify --pool "$dev" --store imported
	check "pmckpt export" $PMCKPT export --pool "$dev" --store imported --out /tmp/back.safetensors
	if cmp /tmp/back.safetensors $REF >/tmp/out 2>&1; then
		ok "the export is bit-exact to the imported file"
	else
		nok "the export is bit-exact to the imported file"
		sed 's/^/PMCKPT-TAP: #   /' /tmp/out
	fi
	# A devdax device granted to a user who is not root (docs/provisioning.md): what a
	# udev rule GROUP="pmem", MODE="0660" does, with gid 65534 standing in for pmem.
	user() { $P/setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
	mm=$(stat -c '%t %T' "$dev") # major and minor, hex
	readlink -f "/sys/dev/char/$(printf '%d:%d' "0x${mm% *}" "0x${mm#* }")/subsystem" \
		>/tmp/out 2>&1
	has "the device's udev SUBSYSTEM is dax (what the rule in docs/provisioning.md matches)" \
		/tmp/out '/dax$'
	mkdir -p /tmp/u && chown 65534:65534 /tmp/u
	refuse "uid 65534 without the grant: pmckpt list is denied" "Permission denied" \
		user $PMCKPT list --pool "$dev"
	chgrp 65534 "$dev" && chmod 0660 "$dev"
	check "uid 65534 in the device's group: pmckpt verify" user $PMCKPT verify --pool "$dev" \
		--store imported
	check "uid 65534: pmckpt export" user $PMCKPT export --pool "$dev" --store imported \
		--out /tmp/u/back.safetensors
	if cmp /tmp/u/back.safetensors $REF >/tmp/out 2>&1 &&
	   [ "$(stat -c %a /tmp/u/back.safetensors)" = 600 ]; then
		ok "uid 65534's export is bit-exact, its file 0600"
	else
		echo "mode $(stat -c %a /tmp/u/back.safetensors)" >>/tmp/out
		nok "uid 65534's export is bit-exact, its file 0600"
		sed 's/^/PMCKPT-TAP: #   /' /tmp/out
	fi
	check "uid 65534: pmck-demo on the device" user $DEMO --path "$dev" --vocab 1000 \
		--layers 0 --steps 5 --every 5 --threads 2
	has "uid 65534's demo recovered bit-exact" /tmp/out '^PASS: '
	chgrp 0 "$dev" && chmod 0600 "$dev"
	refuse "pmckpt create on the device holding the pool is refused" "already holds" \
		$PMCKPT create --pool "$dev"
	;;
*)
	nok "unknown phase '$PHASE'"
	;;
esac
