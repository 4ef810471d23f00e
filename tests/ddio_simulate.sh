#!/bin/sh
# ddio_simulate.sh -- `ddioctl --simulate DIR --platform NAME` builds a fake sysfs tree
# that ddioctl (and evaluation scripts) can run on; with --json every path prints one
# JSON document, errors included ({"error": ..., "code": N}); on an AMD platform the
# hints say DDIO does not apply instead of suggesting Intel's msr module.
B=${BUILD:-build}
D="$B/ddioctl"
dir=$(mktemp -d /tmp/pmck-ddiosim-XXXXXX) || { echo "1..0 # SKIP no temporary directory"; exit 0; }
trap 'rm -rf "$dir"' EXIT
for p in skylake-sp icelake-sp amd-epyc qemu mixed; do
	"$D" --simulate "$dir/$p" --platform $p >"$dir/$p.sim" 2>&1
	echo $? >"$dir/$p.simrc"
	"$D" status --json --sysfs "$dir/$p/sys" --dev "$dir/$p/dev" >"$dir/$p.json" 2>"$dir/$p.err"
	echo $? >"$dir/$p.rc"
	"$D" status --sysfs "$dir/$p/sys" --dev "$dir/$p/dev" >"$dir/$p.txt" 2>&1
done
run() { # NAME ARGS...: stdout, stderr and status of ddioctl ARGS
	n=$1; shift
	"$D" "$@" >"$dir/$n.out" 2>"$dir/$n.err"
	echo $? >"$dir/$n.rc"
}
S="--sysfs $dir/skylake-sp/sys --dev $dir/skylake-sp/dev"
# shellcheck disable=SC2086
run nodev status --device 0000:99:00.0 --json $S
# shellcheck disable=SC2086
run baddax disable --dax /dev/dax9.9 --json $S --state-file "$dir/state"
run badcmd --json frobnicate
run nodevice disable --json
run badcuda status --cuda x --json
run badopt status --bogus --json
run badplat --simulate "$dir/x" --platform vax --json
run again --simulate "$dir/skylake-sp" --platform skylake-sp --json
run simjson --simulate "$dir/j" --platform qemu --json
# shellcheck disable=SC2086
run dryrun disable --device 0000:00:01.0 --dry-run --json $S --state-file "$dir/state"

python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
n = 0
def ok(c, what):
    global n
    n += 1
    print("%sok %d - %s" % ("" if c else "not ", n, what))
def rd(f):
    try:
        return open(os.path.join(d, f)).read()
    except OSError:
        return ""
def js(f):
    try:
        return json.loads(rd(f))
    except ValueError:
        return None
print("1..20")
plats = ["skylake-sp", "icelake-sp", "amd-epyc", "qemu", "mixed"]
for p in plats:
    j = js(p + ".json")
    ok(rd(p + ".simrc").strip() == "0" and rd(p + ".rc").strip() == "0" and j is not None and
       os.path.isdir(os.path.join(d, p, "sys/bus/pci/devices")),
       "--platform %s: a tree ddioctl status reads (%d root ports)" % (p, len((j or {}).get("root_ports", []))))
sk = js("skylake-sp.json") or {}
ports = {r["root_port"]: r for r in sk.get("root_ports", [])}
ok(ports.get("0000:00:01.0", {}).get("ddio") == "on" and ports.get("0000:00:02.0", {}).get("ddio") == "partial"
   and sk.get("cpu_vendor") == "intel" and "0000:40:01.1" not in ports,
   "skylake-sp: its Intel ports (DDIO on, partial) and no other platform's")
ok(any(w.get("ways") == 2 for w in sk.get("iio_llc_ways", [])) and "modprobe msr" in rd("skylake-sp.txt"),
   "skylake-sp: MSR 0xc8b read on package 0; Intel's hint for the missing msr device")
amd = js("amd-epyc.json") or {}
ok(amd.get("cpu_vendor") == "amd" and "Intel" in amd.get("note", "") and
   [r["root_port"] for r in amd.get("root_ports", [])] == ["0000:40:01.1"],
   "amd-epyc: an AMD root port, and a note that DDIO is Intel's")
ok("modprobe" not in rd("amd-epyc.txt") + rd("amd-epyc.json") and
   all("not applicable" in w.get("error", "") for w in amd.get("iio_llc_ways", [{}])),
   "amd-epyc: no modprobe msr hint; the MSR is 'not applicable'")
mx = js("mixed.json") or {}
ok(len(mx.get("root_ports", [])) == len(sk.get("root_ports", [])) + 3,
   "mixed: every platform's root ports (%d)" % len(mx.get("root_ports", [])))
for name, rc, want in (("nodev", "1", "no PCI device"), ("baddax", "1", "dax9.9"),
                       ("badcmd", "2", "unknown command"), ("nodevice", "2", "name a device"),
                       ("badcuda", "2", "--cuda"), ("badopt", "2", "unknown option"),
                       ("badplat", "2", "platforms: skylake-sp"), ("again", "1", "already holds")):
    j = js(name + ".out")
    ok(rd(name + ".rc").strip() == rc and isinstance(j, dict) and want in j.get("error", "") and
       isinstance(j.get("code"), int) and j["code"] != 0,
       "%s --json: exit %s and one JSON error document: %s" % (name, rc, rd(name + ".out").strip().replace("\n", " ")))
j = js("simjson.out") or {}
ok(rd("simjson.rc").strip() == "0" and j.get("platform") == "qemu" and os.path.isdir(j.get("sysfs", "/nonexistent")),
   "--simulate --json names the tree it built")
j = js("dryrun.out") or {}
c = (j.get("changes") or [{}])[0]
ok(rd("dryrun.rc").strip() == "0" and c.get("dry_run") is True and c.get("written") is False and
   c.get("ddio_before") == "on" and c.get("ddio_after") == "off",
   "disable --dry-run on the simulated Skylake-SP: planned on -> off, nothing written")
PY
