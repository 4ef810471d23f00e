#!/bin/sh
# pmbench_short.sh -- a short pmbench run on a /dev/shm file writes a CSV and a JSON
# with every column filled, consistent with each other, and an SVG plot of them.
B=${BUILD:-build}
dir=$(mktemp -d /tmp/pmck-pmbench-XXXXXX) || { echo "1..0 # SKIP no temporary directory"; exit 0; }
trap 'rm -rf "$dir"; rm -f /dev/shm/pmck-test-pmbench-$$' EXIT
[ -d /dev/shm ] || { echo "1..0 # SKIP no /dev/shm"; exit 0; }

"$B/pmbench" --region /dev/shm/pmck-test-pmbench-$$ --size 16M --sizes 64,4K,64K \
	--threads 1,2 --time-ms 5 --gpu-sizes 256K --out "$dir/pm" >"$dir/stdout" 2>"$dir/stderr"
rc=$?
python3 - "$dir" "$rc" <<'PY'
import csv, json, os, sys, xml.etree.ElementTree as ET
d, rc = sys.argv[1], int(sys.argv[2])
n = 0
def ok(cond, what):
    global n
    n += 1
    print("%sok %d - %s" % ("" if cond else "not ", n, what))
    return cond
print("1..10")
out = open(os.path.join(d, "stdout")).read()
if not ok(rc == 0, "pmbench exits 0 (%d)" % rc):
    for l in (out + open(os.path.join(d, "stderr")).read()).splitlines():
        print("# " + l)
cols = ("op,path,method,layout,align,size_bytes,threads,numa_node,region_kind,granularity,"
        "ddio,ddio_port,items,bytes,seconds,gbps,series").split(",")
try:
    rows = list(csv.DictReader(open(os.path.join(d, "pm.csv"))))
    header = open(os.path.join(d, "pm.csv")).readline().strip().split(",")
except OSError as e:
    rows, header = [], []
    print("# " + str(e))
ok(header == cols, "the CSV has the documented columns")
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
       if c not in ("seconds", "gbps")) and
   all(abs(float(res[i]["gbps"]) - float(rows[i]["gbps"])) < 1e-3 for i in range(len(res))),
   "JSON and CSV agree")
ok(all(k in j for k in ("host", "region", "params", "gpu")) and "measured" in j.get("gpu", {}),
   "the JSON describes host, region, parameters and the GPU path")
try:
    svg = ET.parse(os.path.join(d, "pm.svg")).getroot()
    lines = svg.findall(".//{http://www.w3.org/2000/svg}polyline")
except (OSError, ET.ParseError) as e:
    svg, lines = None, []
    print("# " + str(e))
series = {r["series"] for r in rows}
ok(svg is not None and svg.tag.endswith("svg") and len(lines) == len(series),
   "an SVG plot with one line per configuration (%d lines, %d series)" % (len(lines), len(series)))
PY
exit $?
