#!/bin/sh
# pmbench_short.sh -- a short pmbench run on a /dev/shm file writes a CSV and a JSON
# that describe the machine and the run, with every column filled, consistent with
# each other, repeats (min <= median <= max), latency percentiles, and an SVG of
# small multiples; and pmbench refuses bad options, a bad --out (before measuring),
# a device it cannot map (with the reason), a sparse region on a full file system
# and a region truncated under it (SIGBUS) with an error, never a signal death.
B=${BUILD:-build}
dir=$(mktemp -d /tmp/pmck-pmbench-XXXXXX) || { echo "1..0 # SKIP no temporary directory"; exit 0; }
mnt=$dir/mnt
trap 'umount "$mnt" 2>/dev/null; rm -rf "$dir"; rm -f /dev/shm/pmck-test-pmbench-$$ /dev/shm/pmck-test-pmbench-sig-$$' EXIT
[ -d /dev/shm ] || { echo "1..0 # SKIP no /dev/shm"; exit 0; }
P="$B/pmbench"
R=/dev/shm/pmck-test-pmbench-$$

"$P" --region $R --size 16M --sizes 64,4K,64K --threads 1,2 --time-ms 5 --repeat 2 \
	--lat-sizes 64,4K --gpu-sizes 256K --out "$dir/pm" >"$dir/stdout" 2>"$dir/stderr"
echo $? >"$dir/rc"

# Refusals: each "ARGS|what the message must contain".
i=0
while IFS='|' read -r args want; do
	i=$((i + 1))
	# shellcheck disable=SC2086
	timeout 20 "$P" $args --region $R --size 16M --sizes 64 --no-read --no-latency --no-gpu \
		--time-ms 1 --out "$dir/refused" >"$dir/r$i.out" 2>"$dir/r$i.err"
	echo "$? $want" >"$dir/r$i.want"
	printf '%s\n' "$args" >"$dir/r$i.args"
done <<'LIST'
--time-ms -5|expected milliseconds from 1 to 3600000
--time-ms 4294967301|expected milliseconds from 1 to 3600000
--sizes 4K,,8K|empty entry
--sizes 128M|out of range
--methods fast|valid: nt, temporal
--layouts packed|valid: separated, interleaved
--aligns -128|power of two from 8 to 4096
--aligns 96|power of two from 8 to 4096
--threads 0|from 1 to 1024
--repeat 0|from 1 to 100
--read-methods fast|valid: memcpy, checksum
--gpu-hash gpu|valid: host, device
--gpu-threads 0|from 1 to 64
LIST
nref=$i

# --out in a directory that does not exist: refused at once, nothing measured.
t0=$(date +%s%N)
"$P" --region $R --size 16M --time-ms 3000 --repeat 10 --out /nonexistent-$$/dir/x \
	>"$dir/out.out" 2>"$dir/out.err"
echo "$? $(( ($(date +%s%N) - t0) / 1000000 ))" >"$dir/out.rc"

# A character device libpmem2 cannot map: the reason is given.
"$P" --region /dev/null --out "$dir/null" >"$dir/null.out" 2>"$dir/null.err"
echo $? >"$dir/null.rc"

# Other alignments: 256, 4096 and +8 bytes.
"$P" --region $R --size 16M --sizes 4K --aligns 256,4096,+8 --methods nt --layouts separated \
	--no-read --no-latency --no-gpu --time-ms 2 --out "$dir/al" >"$dir/al.out" 2>&1
echo $? >"$dir/al.rc"

# A sparse 256 MiB region on a 32 MiB tmpfs: an error (ENOSPC), not a SIGBUS.
if mkdir -p "$mnt" && mount -t tmpfs -o size=32m tmpfs "$mnt" 2>/dev/null; then
	truncate -s 256M "$mnt/region"
	"$P" --region "$mnt/region" --sizes 64 --time-ms 1 --out "$dir/full" >"$dir/full.out" 2>&1
	echo $? >"$dir/full.rc"
	umount "$mnt"
fi

# The region truncated under the run: the SIGBUS is caught and reported with its offset.
S=/dev/shm/pmck-test-pmbench-sig-$$
truncate -s 32M $S
"$P" --region $S --sizes 1M --methods nt --layouts separated --aligns 128 --no-read --no-latency \
	--no-gpu --time-ms 300 --repeat 20 --out "$dir/sig" >"$dir/sig.out" 2>&1 &
pid=$!
sleep 1
truncate -s 0 $S
wait $pid
echo $? >"$dir/sig.rc"

python3 - "$dir" "$nref" <<'PY'
import csv, json, os, sys, xml.etree.ElementTree as ET
d, nref = sys.argv[1], int(sys.argv[2])
n = 0
def ok(cond, what):
    global n
    n += 1
    print("%sok %d - %s" % ("" if cond else "not ", n, what))
    return cond
def rd(name):
    try:
        return open(os.path.join(d, name)).read()
    except OSError:
        return ""
print("1..%d" % (25 + nref))
rc = int(rd("rc"))
out = rd("stdout")
if not ok(rc == 0, "pmbench exits 0 (%d)" % rc):
    for l in (out + rd("stderr")).splitlines():
        print("# " + l)
cols = ("op,path,method,layout,align,size_bytes,threads,numa_node,region_kind,granularity,"
        "ddio,ddio_port,items,bytes,seconds,gbps,series,repeats,gbps_min,gbps_max").split(",")
lines = rd("pm.csv").splitlines()
comments = [l for l in lines if l.startswith("#")]
body = [l for l in lines if not l.startswith("#")]
header = body[0].split(",") if body else []
rows = list(csv.DictReader(body))
ok(header == cols, "the CSV has the documented columns after its # lines")
keys = {l[2:].split(":", 1)[0] for l in comments}
need = {"host.cpu_model", "host.microcode", "host.kernel", "versions.pmbench", "versions.libpmem2",
        "command_line", "numa.region_node", "numa.thread_nodes", "params.methods", "params.layouts",
        "params.aligns", "params.repeat", "region.path", "reference.memcpy_gbps"}
ok(need <= keys, "the CSV's # lines describe machine, versions, NUMA, command line, parameters "
   "(missing: %s)" % sorted(need - keys))
cpu = [r for r in rows if r["path"] == "cpu"]
# 3 sizes x 2 threads x (2 methods x 2 layouts x 2 alignments writes + 2 read methods)
ok(len(cpu) == 3 * 2 * (8 + 2), "%d CPU rows, expected 60" % len(cpu))
empty = [(i, c) for i, r in enumerate(rows) for c in cols if not (r.get(c) or "").strip()]
ok(rows and not empty, "every column of every row is filled %s" % (empty[:3] if empty else ""))
def numeric(r):
    return (int(r["size_bytes"]) > 0 and int(r["threads"]) >= 1 and int(r["items"]) > 0 and
            int(r["bytes"]) == int(r["items"]) * int(r["size_bytes"]) and float(r["seconds"]) > 0
            and float(r["gbps"]) > 0)
bad = [r["series"] for r in rows if not numeric(r)]
ok(rows and not bad, "numbers parse; bytes = items x size; bandwidth > 0 %s" % bad[:2])
bad = [r["series"] for r in cpu if not (int(r["repeats"]) == 2 and
       float(r["gbps_min"]) <= float(r["gbps"]) <= float(r["gbps_max"]))]
ok(cpu and not bad, "--repeat 2: every row has 2 repeats, min <= median <= max %s" % bad[:2])
ok({r["align"] for r in cpu if r["op"] == "write"} == {"align128", "align128+8"},
   "the align column names the alignment: %s" % sorted({r["align"] for r in cpu}))
ok(all(r["region_kind"] == "file" and r["granularity"] == "page" for r in cpu),
   "a /dev/shm file: region_kind file, page granularity")
try:
    j = json.load(open(os.path.join(d, "pm.json")))
except (OSError, ValueError) as e:
    j = {}
    print("# " + str(e))
res = j.get("results", [])
ok(len(res) == len(rows) and all(all(res[i].get(c) not in (None, "") for c in cols) for i in range(len(res))),
   "the JSON has the same %d results, every field filled" % len(res))
ok(all(str(res[i][c]) == rows[i][c] for i in range(len(res)) for c in cols
       if c not in ("seconds", "gbps", "gbps_min", "gbps_max")) and
   all(abs(float(res[i]["gbps"]) - float(rows[i]["gbps"])) < 1e-3 for i in range(len(res))),
   "JSON and CSV agree")
h, p = j.get("host", {}), j.get("params", {})
ok(all(h.get(k) for k in ("cpu_model", "microcode", "kernel")) and
   all(j.get("versions", {}).get(k) not in (None, "", "unknown") for k in ("pmbench", "libpmem2")) and
   "pmbench" in j.get("command_line", "") and "--repeat 2" in j.get("command_line", "") and
   "region_node" in j.get("numa", {}) and "thread_nodes" in j.get("numa", {}),
   "the JSON names CPU model, microcode, kernel, versions, command line, NUMA placement")
ok(p.get("methods") == ["nt", "temporal"] and p.get("layouts") == ["separated", "interleaved"] and
   p.get("aligns") == ["align128", "align128+8"] and p.get("read_methods") == ["memcpy", "checksum"]
   and p.get("repeat") == 2 and p.get("time_ms") == 5 and p.get("sizes") == [64, 4096, 65536]
   and p.get("gpu_hash") == ["host", "device"] and p.get("gpu_threads") == 0
   and "gpu_hash_env" in p,
   "the JSON lists every parameter and the methods, layouts, aligns and GPU hashings run")
ok(all(k in j for k in ("host", "region", "params", "gpu")) and "measured" in j.get("gpu", {}),
   "the JSON describes host, region, parameters and the GPU path")
ref = j.get("reference", {})
ok(ref.get("memcpy_gbps", 0) > 0 and ref.get("nt_store_gbps", 0) > 0,
   "a memcpy and an nt-store reference measured in the run (%s)" % ref)
lat = j.get("latency", [])
ok(len(lat) == 4 and all(0 < l["min_ns"] <= l["p50_ns"] <= l["p99_ns"] <= l["p999_ns"] <= l["max_ns"]
   and l["ops"] > 0 for l in lat),
   "persist latency for 2 methods x 2 sizes: min <= p50 <= p99 <= p99.9 <= max")
ok(all(("bench: pmbench_persist_p%s_%s_%sB " % (q, l["method"], l["size_bytes"])) in out
       for l in lat for q in ("50", "99", "999")), "the percentiles as bench: lines")
try:
    svg = ET.parse(os.path.join(d, "pm.svg")).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    panels = [g for g in svg.iter(ns + "g") if g.get("class") == "panel"]
except (OSError, ET.ParseError) as e:
    svg, panels = None, []
    print("# " + str(e))
by = sorted((g.get("data-op"), g.get("data-by")) for g in panels)
ok(by == sorted([("write", "method"), ("write", "layout"), ("write", "alignment"), ("write", "threads"),
                 ("read", "method"), ("read", "threads")]),
   "one SVG panel per varying dimension: %s" % by)
def cls(g, c):
    return [e for e in g.iter() if e.get("class") == c]
ok(panels and all(1 <= len(cls(g, "series")) <= 10 and
                  len({e.get("stroke") for e in cls(g, "series")}) == len(cls(g, "series")) and
                  len(cls(g, "legend")) >= len(cls(g, "series")) for g in panels),
   "each panel: 1..10 lines of distinct colours, each in the legend")
ok(all(len(cls(g, "reference")) == 2 for g in panels if g.get("data-op") == "write") and
   all(cls(g, "errorbar") for g in panels),
   "write panels draw the two reference lines; every panel has error bars")

for i in range(1, nref + 1):
    rc, want = rd("r%d.want" % i).strip().split(" ", 1)
    err = rd("r%d.err" % i).strip()
    ok(rc == "1" and want in err and "pmbench: write" not in rd("r%d.out" % i),
       "%s refused: %s" % (rd("r%d.args" % i).strip(), err))
rc, ms = rd("out.rc").split()
ok(rc == "1" and int(ms) < 2000 and "cannot write /nonexistent" in rd("out.err") and
   "pmbench: write" not in rd("out.out") and "region prepared" not in rd("out.out"),
   "--out in a missing directory refused before measuring (%s ms): %s" % (ms, rd("out.err").strip()))
e = rd("null.err").strip()
ok(rd("null.rc").strip() == "1" and e.split("cannot map /dev/null:")[-1].strip() != "",
   "/dev/null refused with a reason: %s" % e)
al = [r for r in csv.DictReader(l for l in rd("al.csv").splitlines() if not l.startswith("#"))]
ok(rd("al.rc").strip() == "0" and [r["align"] for r in al] == ["align256", "align4096", "align128+8"],
   "--aligns 256,4096,+8 runs and names them: %s" % [r["align"] for r in al])
if rd("full.rc"):
    ok(rd("full.rc").strip() == "1" and "No space left" in rd("full.out"),
       "a sparse region on a full tmpfs: exit 1, %s" % rd("full.out").strip().splitlines()[-1:])
else:
    ok(True, "# SKIP cannot mount a tmpfs here (tests/region_nospace.sh tests more of it)")
s = rd("sig.out")
ok(rd("sig.rc").strip() == "1" and "SIGBUS" in s and "at offset" in s,
   "a region truncated under the run: SIGBUS reported with its offset, exit %s: %s" %
   (rd("sig.rc").strip(), [l for l in s.splitlines() if "SIGBUS" in l][:1]))
PY
exit $?
