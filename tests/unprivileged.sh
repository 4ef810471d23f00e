#!/bin/sh
# unprivileged.sh -- a part of the suite as a user who is not root (nobody):
# the demo in its default, private directory; the pmckpt CLI's create, list,
# verify and export on that user's own pool, and the modes of what they make;
# pmbench on its own region file, pmctl list, ddioctl on a simulated platform;
# the Python binding's store tests and a Store() in the default directory.
# What needs root (provisioning namespaces, changing DDIO on a real root port)
# is not here: pmctl and ddioctl say so themselves.
#
# Run as root, it stages the tools, libraries and the binding in a directory
# that nobody can read (the clone may sit where nobody cannot, under /root),
# and runs in a mount namespace of its own whose /dev/shm is a fresh tmpfs, so
# that no real /dev/shm/pmckpt-UID is touched.  As another user the whole
# suite already runs unprivileged: this test then skips.
B=${BUILD:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
case $B in /*) ;; *) B=$root/$B ;; esac

if [ "$(id -u)" != 0 ]; then
	echo "1..0 # SKIP not root: every test of the suite already runs as this unprivileged user"
	exit 0
fi
# Private mounts first, so that nothing mounted here propagates out of the namespace: the
# whole tree (PMCK_ROOT_PRIVATE), or in a chroot, whose root is no mount point, the /dev/shm
# mount the new tmpfs is stacked on (hence --propagation unchanged: unshare's own default,
# making / private, fails there).
NS='if mount --make-rprivate / 2>/dev/null; then export PMCK_ROOT_PRIVATE=1; fi
{ [ -n "${PMCK_ROOT_PRIVATE:-}" ] || mount --make-private /dev/shm; } &&
mount -t tmpfs -o mode=1777 tmpfs /dev/shm'
if [ -z "${PMCK_UNPRIV_NS:-}" ]; then
	unshare -m --propagation unchanged sh -c "$NS" 2>/dev/null ||
		{ echo "1..0 # SKIP needs a mount namespace of its own (unshare -m, mount)"; exit 0; }
	PMCK_UNPRIV_NS=1 exec unshare -m --propagation unchanged sh -c "$NS && exec \"\$0\"" "$0"
fi

T=$(mktemp -d /var/tmp/pmck-unpriv-XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
chmod 755 "$T"
mkdir -p "$T/bin" "$T/home"
cp "$B/pmck-demo" "$B/pmckpt" "$B/pmbench" "$B/pmctl" "$B/ddioctl" "$B/libpmckpt.so.0" \
	"$B/libpmalloc.so.0" "$B/libpmalloc_ns.so.0" "$T/bin/" || exit 1
cp -r "$root/bindings/python" "$T/python" || exit 1
chown -R nobody "$T/home"
chmod -R a+rX "$T"

n=0
fails=0
ok() { # ok COND-EXIT-CODE NAME
	n=$((n + 1))
	if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi
}
as_nobody() {
	setpriv --reuid=nobody --regid=nogroup --clear-groups --reset-env env HOME="$T/home" \
		PATH=/usr/bin:/bin "$@"
}
mode() { stat -c %a "$1" 2>/dev/null; }
# reach PATH: lets nobody pass the directories on the way to PATH, in this mount
# namespace alone.  The interpreter may lie where nobody cannot pass (pyenv under
# /root, 0700): the first such directory is covered by a tmpfs (0755) that holds
# only the way on (a bind of its next component); only where the whole tree is
# private to this namespace, so that no mount reaches the host.  Fails if that is
# not enough.
reach() {
	[ "${PMCK_ROOT_PRIVATE:-}" = 1 ] || { as_nobody test -r "$1"; return; }
	dir=
	for c in $(echo "${1#/}" | tr / ' '); do
		if ! as_nobody test -x "$dir/" 2>/dev/null; then
			mkdir "$T/way" && mount --bind "$dir/$c" "$T/way" &&
				mount -t tmpfs -o mode=755 tmpfs "$dir" && mkdir "$dir/$c" &&
				mount --move "$T/way" "$dir/$c" || return 1
			echo "# made $dir passable for nobody (this test's mount namespace only)"
			break
		fi
		dir=$dir/$c
	done
	as_nobody test -r "$1"
}
owner() { stat -c %U "$1" 2>/dev/null; }

D=/dev/shm/pmckpt-$(id -u nobody)
as_nobody "$T/bin/pmck-demo" --steps 10 --every 5 --layers 1 --vocab 2000 --keep > "$T/demo.log" 2>&1
rc=$?
ok $rc "nobody runs pmck-demo (exit $rc)"
[ $rc = 0 ] || sed 's/^/# /' "$T/demo.log"
grep -q "kept $D/pmck-demo.pool" "$T/demo.log"
ok $? "its pool is in nobody's default directory, $D"
[ "$(mode $D)" = 700 ] && [ "$(owner $D)" = nobody ]
ok $? "$D is nobody's, 0700 ($(mode $D))"
P=$D/pmck-demo.pool
[ "$(mode $P)" = 600 ] && [ "$(owner $P)" = nobody ]
ok $? "its pool file is nobody's, 0600 ($(mode $P))"

as_nobody "$T/bin/pmckpt" list --pool "$P" --verify > "$T/list.log" 2>&1
ok $? "pmckpt list --verify as nobody"
grep -q gpt2-medium "$T/list.log"
ok $? "lists the demo's store"
as_nobody "$T/bin/pmckpt" verify --pool "$P" --store gpt2-medium > "$T/verify.log" 2>&1
ok $? "pmckpt verify as nobody"
as_nobody "$T/bin/pmckpt" export --pool "$P" --store gpt2-medium --out "$D/demo.safetensors" \
	> "$T/export.log" 2>&1
ok $? "pmckpt export as nobody"
[ "$(mode $D/demo.safetensors)" = 600 ]
ok $? "the exported file is 0600 ($(mode $D/demo.safetensors))"
as_nobody "$T/bin/pmckpt" create --pool "$D/new.pool" --size 64M > "$T/create.log" 2>&1
ok $? "pmckpt create as nobody"
[ "$(mode $D/new.pool)" = 600 ]
ok $? "the pool file it creates is 0600 ($(mode $D/new.pool))"
# root's pool is not nobody's to write, nor to read.
mkdir -m 700 /dev/shm/pmckpt-0 && cp "$P" /dev/shm/pmckpt-0/root.pool
as_nobody "$T/bin/pmckpt" list --pool /dev/shm/pmckpt-0/root.pool > "$T/denied.log" 2>&1
[ $? != 0 ] && grep -q "Permission denied" "$T/denied.log"
ok $? "root's pool in root's directory: nobody is denied ($(head -c 120 "$T/denied.log"))"

# The other tools: pmbench on nobody's own region file; pmctl list as root sees it;
# ddioctl on a simulated platform (changing DDIO on a real root port needs root).
as_nobody "$T/bin/pmbench" --region "$D/bench" --size 16M --sizes 64,4K --threads 1 \
	--time-ms 5 --no-gpu --no-latency --out "$T/home/pm" > "$T/pmbench.log" 2>&1
ok $? "pmbench as nobody"
[ -s "$T/home/pm.csv" ] && [ -s "$T/home/pm.json" ]
ok $? "its CSV and JSON written"
"$T/bin/pmctl" list > "$T/pmctl.root" 2>&1
rc_root=$?
as_nobody "$T/bin/pmctl" list > "$T/pmctl.nobody" 2>&1
rc=$?
[ $rc = $rc_root ] && cmp -s "$T/pmctl.root" "$T/pmctl.nobody"
ok $? "pmctl list as nobody says what it says as root (exit $rc)"
as_nobody "$T/bin/ddioctl" --simulate "$T/home/sim" --platform skylake-sp > "$T/sim.log" 2>&1 &&
	as_nobody "$T/bin/ddioctl" status --sysfs "$T/home/sim/sys" --dev "$T/home/sim/dev" --json \
	> "$T/ddio.log" 2>&1
ok $? "ddioctl --simulate and status as nobody"

if ! py=$("$root/tools/python-env"); then
	echo "Bail out! tools/python-env could not provide a Python with torch"
	exit 1
fi
if readelf -d "$B/libpmckpt.so.0" 2>/dev/null | grep -q 'lib[at]san'; then
	echo "ok $((n + 1)) # SKIP $B/libpmckpt.so.0 is a sanitizer build: it cannot be loaded into python"
	echo "ok $((n + 2)) # SKIP the same"
	n=$((n + 2))
elif ! reach "$(readlink -f "$py")" || ! as_nobody "$py" -c 'import torch' 2>/dev/null; then
	echo "ok $((n + 1)) # SKIP nobody cannot run $py (its environment is not readable)"
	echo "ok $((n + 2)) # SKIP the same"
	n=$((n + 2))
else
	pyrun() {
		as_nobody PMCKPT_LIBRARY="$T/bin/libpmckpt.so.0" PYTHONPATH="$T/python" \
			PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 "$py" "$@"
	}
	pyrun "$T/python/tests/test_store.py" > "$T/store.log" 2>&1
	rc=$?
	ok $rc "the binding's store tests as nobody ($(grep -c '^ok' "$T/store.log") passed)"
	[ $rc = 0 ] || grep -v '^ok' "$T/store.log" | sed 's/^/# /'
	pyrun -c '
import pmckpt, torch
sd = {"w": torch.arange(1000, dtype=torch.float32)}
with pmckpt.Store(name="u") as s:
    s.save(sd, 3)
    print(s.region_path)
with pmckpt.Store(name="u") as s:
    got = s.load()
    assert torch.equal(got["w"], sd["w"]), "not bit-exact"
' > "$T/default.log" 2>&1
	rc=$?
	[ $rc = 0 ] && grep -q "^$D/pmckpt-u.pool$" "$T/default.log" && [ "$(mode $D/pmckpt-u.pool)" = 600 ]
	ok $? "Store() as nobody: saved and loaded in $D, pool 0600"
	[ $rc = 0 ] || sed 's/^/# /' "$T/default.log"
fi
echo "1..$n"
[ $fails = 0 ]
