#!/bin/sh
# pmckpt_cli.sh -- the pmckpt tool: list, verify, export, import and clean, human
# and --json (every JSON document is parsed by Python's json module and its fields
# checked), exit status 0 / 1 (with "pmckpt: <message>" on stderr) / 2 (usage).
# A ramdisk pool with stores "model" (steps 1..3, copied out, keep 3) and "opt"
# (empty) is made by tests/copyout_helper.
B=${BUILD:-build}
PM="$B/pmckpt"
H="$B/tests/copyout_helper"
R="$(dirname "$0")/copyout_reader.py"

if ! command -v python3 >/dev/null 2>&1; then
	echo "1..0 # SKIP python3 not found"
	exit 0
fi
T=$(mktemp -d /dev/shm/pmck-h5-cli-XXXXXX) || exit 1
S=$(mktemp -d /var/tmp/pmck-h5-cli-XXXXXX) || exit 1
trap 'rm -rf "$T" "$S"' EXIT INT TERM
P="$T/pmckpt-model.pool"
D="$S/shared"
O="$T/out"
E="$T/err"

n=0
fails=0
# run CMD...: runs it, stdout in $O, stderr in $E, status in $rc.
run() {
	"$@" >"$O" 2>"$E"
	rc=$?
}
# check NAME CONDITION: one TAP test; CONDITION is shell code (eval'd).
check() {
	n=$((n + 1))
	if eval "$2" 2>"$T/cerr"; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		echo "# exit status $rc"
		sed 's/^/# check: /' "$T/cerr"
		head -c 3000 "$O" | sed 's/^/# stdout: /'
		head -c 2000 "$E" | sed 's/^/# stderr: /'
		fails=$((fails + 1))
	fi
}
# json_ok [PYTHON-EXPR]: stdout is one JSON document d, and the expression holds.
json_ok() {
	python3 -c "import json,sys; d=json.load(sys.stdin); assert (${1:-True}), d" <"$O"
}
out_has() { grep -q -- "$1" "$O"; }
err_has() { grep -q -- "$1" "$E"; }
# A failure: exit 1, nothing but "pmckpt: <message>" lines on stderr, containing $1.
failed_with() {
	test "$rc" = 1 && err_has "^pmckpt: .*$1" && ! grep -qv '^pmckpt: ' "$E"
}
usage_error() { test "$rc" = 2 && err_has "^usage: pmckpt"; }

run "$H" write "$T" model "$D" 1 3 3 0 1
check "setup: store model, steps 1..3 copied out (keep 3)" 'test $rc = 0'
run "$H" mkstore "$P" opt
check "setup: empty store opt in the same pool" 'test $rc = 0'
"$H" expect 3 >"$T/expect-3.json"
"$H" expect 50 >"$T/expect-50.json"

# ---------------------------------------------------------------- list --pool
run "$PM" list --pool "$P"
check "list --pool: both stores, model's slots sealed at steps 3 and 2, opt's empty" \
	'test $rc = 0 && out_has "^store model: 19 tensors" && out_has "^  slot 0: step 3, sealed$" &&
	 out_has "^  slot 1: step 2, sealed$" && out_has "^store opt: 2 tensors" && out_has "slot 1: empty"'
run "$PM" list --pool "$P" --json
check "list --pool --json: stores, tensors, bytes, newest step and sealed slots (not verified)" \
	"test \$rc = 0 && json_ok \"[s['name'] for s in d['stores']] == ['model', 'opt'] and
	 d['stores'][0]['ntensors'] == 19 and d['stores'][0]['newest_step'] == 3 and
	 d['stores'][0]['tensor_bytes'] == 1738501 and d['pool_bytes'] > 0 and
	 [(x['state'], x['step']) for x in d['stores'][0]['slots']] == [('sealed', 3), ('sealed', 2)] and
	 d['stores'][0]['verified'] is False and 'checkpoint' not in d['stores'][0] and
	 d['stores'][1]['newest_step'] is None and
	 [x['state'] for x in d['stores'][1]['slots']] == ['empty', 'empty']\""
run "$PM" list --pool "$P" --verify --json
check "list --pool --verify --json: model's step 3 verified, step 2 not checked; opt has none" \
	"test \$rc = 0 && json_ok \"d['stores'][0]['checkpoint'] == {'step': 3, 'slot': 0} and
	 [x['state'] for x in d['stores'][0]['slots']] == ['verified', 'sealed'] and
	 d['stores'][1]['checkpoint'] is None and 'no complete checkpoint' in d['stores'][1]['error']\""
"$H" write "$T" dmg - 1 2 2 0 1 >/dev/null
"$H" damage "$T" dmg 1
run "$PM" list --pool "$T/pmckpt-dmg.pool" --verify
check "list --verify of a store whose newest slot is damaged: slot 1 REJECTED, step 1 verified" \
	"test \$rc = 0 && out_has \"slot 1: step 2, sealed, REJECTED: tensor 'emb'\" &&
	 out_has 'checkpoint: step 1 (slot 0, verified)'"
run "$PM" verify --pool "$T/pmckpt-dmg.pool" --store dmg --json
check "verify --json of that store: ok, step 1, rejected slot 1 (step 2, tensor emb)" \
	"test \$rc = 0 && json_ok \"d['ok'] and d['step'] == 1 and
	 d['rejected'] == {'slot': 1, 'step': 2, 'tensor': 'emb'}\""
"$H" damage "$T" dmg 0
run "$PM" list --pool "$T/pmckpt-dmg.pool" --verify --json
check "list --verify with both slots damaged: exit 1, both rejected, the error" \
	"test \$rc = 1 && json_ok \"[x['state'] for x in d['stores'][0]['slots']] == ['rejected', 'rejected']
	 and 'no checkpoint verifies' in d['stores'][0]['error']\" && err_has '^pmckpt: .*no checkpoint verifies'"
run "$PM" verify --pool "$T/pmckpt-dmg.pool" --store dmg
check "verify of that store: exit 1, \"no checkpoint verifies\"" 'failed_with "no checkpoint verifies"'
run "$PM" list --pool "$P" --store model --json
check "list --pool --store --json: one store with its 19 tensors (names, dtypes, shapes, bytes)" \
	"test \$rc = 0 && json_ok \"len(d['stores']) == 1 and len(d['stores'][0]['tensors']) == 19 and
	 sum(t['bytes'] for t in d['stores'][0]['tensors']) == d['stores'][0]['tensor_bytes'] and
	 {'name': 'ids', 'dtype': 'I32', 'shape': [2, 3, 4]}.items() <=
	 [t for t in d['stores'][0]['tensors'] if t['name'] == 'ids'][0].items()\""
run "$PM" list --pool "$P" --store model
check "list --pool --store: the tensor table" 'test $rc = 0 && out_has "^  ids  *I32  *\[2, 3, 4\]"'
run "$PM" list --pool "$P" --store nosuch
check "list --store of a missing store: exit 1, \"pmckpt: ... no store 'nosuch'\"" \
	"failed_with \"no store 'nosuch'\" && test ! -s \"\$O\""
run "$PM" list --pool "$T/missing.pool"
check "list of a missing pool file: exit 1 with the path" 'failed_with "missing.pool"'

# ----------------------------------------------------------------- list --dir
run "$PM" list --dir "$D"
check "list --dir: 3 steps, all complete, rank files with sizes" \
	'test $rc = 0 && out_has "3 steps (3 complete)" && out_has "^step 2: complete" &&
	 out_has "rank-00000.safetensors *1741013 bytes"'
run "$PM" list --dir "$D" --json
check "list --dir --json: steps 1..3 complete, rank 0 file of each, sizes" \
	"test \$rc = 0 && json_ok \"[s['step'] for s in d['steps']] == [1, 2, 3] and
	 all(s['complete'] and s['world_size'] == 1 for s in d['steps']) and
	 all([f['bytes'] for f in s['files'] if f['rank'] == 0] == [1741013] for s in d['steps']) and
	 d['bytes'] == sum(s['bytes'] for s in d['steps'])\""
run "$PM" list --dir "$T/nodir"
check "list --dir of a missing directory: exit 1" 'failed_with "nodir"'

# ---------------------------------------------------------------- verify store
run "$PM" verify --pool "$P" --store model
check "verify --pool --store: step 3 verified" 'test $rc = 0 && out_has "store model: step 3 verified"'
run "$PM" verify --pool "$P" --store model --json
check "verify --pool --store --json: ok, step 3, nothing rejected" \
	"test \$rc = 0 && json_ok \"d['ok'] and d['step'] == 3 and d['rejected'] is None\""
run "$PM" verify --pool "$P" --store opt
check "verify of an empty store: exit 1, \"holds no complete checkpoint\"" \
	'failed_with "holds no complete checkpoint"'
run "$PM" verify --pool "$P" --store opt --json
check "verify --json of an empty store: exit 1, JSON with ok false and the error" \
	"test \$rc = 1 && json_ok \"d['ok'] is False and 'no complete checkpoint' in d['error']\""

# ---------------------------------------------------------------------- export
run "$PM" export --pool "$P" --store model --out "$T/x.safetensors"
check "export: exit 0, progress with bytes and GB/s on stderr" \
	'test $rc = 0 && out_has "exported step 3" && err_has "exporting step 3 .*1738501 bytes" &&
	 err_has "wrote 1741013 bytes in .* GB/s"'
run python3 "$R" check "$T/x.safetensors" "$T/expect-3.json" 3 0 1
check "the exported file read back by Python: step 3, bit-exact" 'test $rc = 0'
run "$PM" export --pool "$P" --store model --out "$T/x2.safetensors" --rank 1 --world-size 2 --json -q
check "export --json -q: file, step, rank, bytes; nothing on stderr" \
	"test \$rc = 0 && test ! -s \"\$E\" && json_ok \"d['step'] == 3 and d['rank'] == 1 and
	 d['world_size'] == 2 and d['bytes'] == 1741013 and d['file'].endswith('x2.safetensors')\""
run "$PM" export --pool "$P" --store opt --out "$T/y.safetensors"
check "export of an empty store: exit 1, no file" \
	'failed_with "no complete checkpoint" && test ! -e "$T/y.safetensors"'
run "$PM" export --pool "$P" --store model --out "$T/nodir/y.safetensors"
check "export into a missing directory: exit 1 with the reason" 'failed_with "No such file"'

# ------------------------------------------------------------ read-only pool
# list, verify and export open the pool read-only: a 0444 copy works for a user who
# may only read it.  Root ignores file permissions, so as root this runs as nobody.
RP="$T/ro.pool"
RO="$T/ro-out"
cp "$P" "$RP" && chmod 0444 "$RP" && mkdir -m 0777 "$RO" && chmod 0711 "$T"
sum0=$(cksum <"$RP")
as_user=
who=nobody
if [ "$(id -u)" != 0 ]; then
	as_user=" "
	who=$(id -un)
elif command -v setpriv >/dev/null 2>&1; then
	as_user="setpriv --reuid=nobody --regid=nogroup --clear-groups"
elif command -v runuser >/dev/null 2>&1; then
	as_user="runuser -u nobody --"
fi
if [ -n "$as_user" ]; then
	run $as_user "$PM" list --pool "$RP" --verify
	check "read-only: list --pool --verify of a 0444 pool as $who: step 3 verified" \
		'test $rc = 0 && out_has "checkpoint: step 3 (slot 0, verified)"'
	run $as_user "$PM" verify --pool "$RP" --store model
	check "read-only: verify --pool of the 0444 pool: exit 0" 'test $rc = 0 && out_has "step 3 verified"'
	run $as_user "$PM" export --pool "$RP" --store model --out "$RO/x.safetensors" -q
	check "read-only: export of the 0444 pool: exit 0, step 3" \
		'test $rc = 0 && out_has "exported step 3" && test -s "$RO/x.safetensors"'
	run $as_user "$PM" import --pool "$RP" --store model --file "$RO/x.safetensors" --step 9
	check "read-only: import into the 0444 pool needs write access: exit 1, Permission denied" \
		'failed_with "Permission denied"'
	check "read-only: the 0444 pool is unchanged" 'test "$(cksum <"$RP")" = "$sum0"'
else
	for i in 1 2 3 4 5; do
		n=$((n + 1))
		echo "ok $n # SKIP running as root without setpriv or runuser: cannot test as another user"
	done
fi
chmod 0700 "$T"
rm -rf "$RO" "$RP"

# One writer or several readers: a pool locked for writing (here by flock(1)) is refused,
# and the message names the holder's pid.
if command -v flock >/dev/null 2>&1; then
	# -o: only flock(1) holds the lock, not the sleep it runs.  The sleep's output goes
	# nowhere: killing flock(1) leaves it running, and prove would wait for it to close
	# the test's stdout (30 s).  It is killed too, by the pid it wrote.
	flock -o -x "$P" sh -c 'echo $$ > "$0"; exec sleep 30' "$T/flock-sleep.pid" \
		</dev/null >/dev/null 2>&1 &
	fl=$!
	for i in $(seq 1 100); do grep -q "FLOCK.* $fl " /proc/locks && break; sleep 0.1; done
	run "$PM" list --pool "$P"
	check "a pool locked for writing by pid $fl: list exits 1 naming the pid" \
		"failed_with \"held for writing by pid $fl\""
	kill "$fl" $(cat "$T/flock-sleep.pid" 2>/dev/null) 2>/dev/null
	wait "$fl" 2>/dev/null
	run "$PM" list --pool "$P"
	check "once the holder is gone, list works" 'test $rc = 0'
else
	n=$((n + 1)); echo "ok $n # SKIP flock(1) not installed"
	n=$((n + 1)); echo "ok $n # SKIP flock(1) not installed"
fi

# ----------------------------------------------------------------- verify file
run "$PM" verify --file "$T/x.safetensors"
check "verify --file: ok, checksums verified" 'test $rc = 0 && out_has "ok: step 3, rank 0 of 1, 19 tensors.*checksums verified"'
run "$PM" verify --file "$T/x2.safetensors" --json
check "verify --file --json: step, rank, world size, tensors, bytes, checksums" \
	"test \$rc = 0 && json_ok \"d['ok'] and d['step'] == 3 and d['rank'] == 1 and d['world_size'] == 2
	 and d['ntensors'] == 19 and d['data_bytes'] == 1738501 and d['checksums'] is True\""
cp "$T/x.safetensors" "$T/bad.safetensors"
printf '\377' | dd of="$T/bad.safetensors" bs=1 seek=100000 conv=notrunc 2>/dev/null
run "$PM" verify --file "$T/bad.safetensors"
check "verify --file of a damaged file: exit 1, the tensor that fails its checksum" \
	"failed_with \"tensor 'emb' fails its checksum\" && out_has FAILED"
run "$PM" verify --file "$T/bad.safetensors" --json
check "verify --file --json of a damaged file: exit 1, ok false, the error" \
	"test \$rc = 1 && json_ok \"d['ok'] is False and 'checksum' in d['error']\""
python3 "$R" write "$T/foreign.safetensors" "$T/expect-50.json" 50
run "$PM" verify --file "$T/foreign.safetensors" --json
check "verify --file of another tool's file: ok, no checksums (structure checked only)" \
	"test \$rc = 0 && json_ok \"d['ok'] and d['checksums'] is False and d['ntensors'] == 19\""

# ------------------------------------------------------------------ verify dir
run "$PM" verify --dir "$D"
check "verify --dir: 3 complete steps verified" 'test $rc = 0 && out_has "3 complete steps verified"'
run "$PM" verify --dir "$D" --json
check "verify --dir --json: ok, 3 complete steps, each file ok" \
	"test \$rc = 0 && json_ok \"d['ok'] and d['complete_steps'] == 3 and d['failed_steps'] == 0 and
	 all(s['ok'] and len(s['files']) == 1 and s['files'][0]['ok'] for s in d['steps'])\""
cp "$D/step-000000000002/rank-00000.safetensors" "$T/keep2"
cp "$T/bad.safetensors" "$D/step-000000000002/rank-00000.safetensors"
run "$PM" verify --dir "$D"
check "verify --dir with a damaged file in step 2: exit 1, names it" \
	"failed_with \"step-000000000002/rank-00000.safetensors: tensor 'emb' fails its checksum\""
run "$PM" verify --dir "$D" --json
check "verify --dir --json: exit 1, step 2 failed, steps 1 and 3 ok" \
	"test \$rc = 1 && json_ok \"not d['ok'] and d['failed_steps'] == 1 and
	 [s['ok'] for s in d['steps']] == [True, False, True]\""
mv "$D/step-000000000002/rank-00000.safetensors" "$T/moved"
run "$PM" verify --dir "$D"
check "verify --dir with a complete step missing its rank file: exit 1" \
	'failed_with "step-000000000002: no file for rank 0 of 1"'
cp "$T/keep2" "$D/step-000000000002/rank-00000.safetensors"
run "$PM" verify --dir "$T"
check "verify --dir without complete steps: exit 1" 'failed_with "no complete step"'

# ---------------------------------------------------------------------- import
"$H" write "$T" fresh - 1 1 2 0 1 >/dev/null
run "$PM" import --pool "$T/pmckpt-fresh.pool" --store fresh --file "$T/x.safetensors"
check "import: exit 0, the file's own step 3" \
	'test $rc = 0 && out_has "as step 3" && err_has "importing .*1738501 bytes"'
run "$H" check "$T" fresh 3
check "the store then holds exactly the bytes of step 3" 'test $rc = 0'
run "$PM" import --pool "$T/pmckpt-fresh.pool" --store fresh --file "$T/x.safetensors"
check "importing step 3 again: exit 1, \"not after the newest checkpoint\"" \
	'failed_with "step 3 is not after the newest checkpoint"'
run "$PM" import --pool "$T/pmckpt-fresh.pool" --store fresh --file "$T/foreign.safetensors" --step 50 --json -q
check "import --step 50 --json of another tool's file: step 50, no checksums" \
	"test \$rc = 0 && json_ok \"d['step'] == 50 and d['checksums'] is False and d['bytes'] == 1738501\""
run "$H" check "$T" fresh 50
check "the store then holds exactly the bytes of step 50" 'test $rc = 0'
run "$PM" import --pool "$T/pmckpt-fresh.pool" --store fresh --file "$T/bad.safetensors" --step 60
check "import of a damaged file: exit 1, the tensor named" "failed_with \"tensor 'emb' fails its checksum\""
run "$H" check "$T" fresh 50
check "... and the store still holds step 50" 'test $rc = 0'
run "$PM" import --pool "$P" --store opt --file "$T/x.safetensors"
check "import into a store of another layout: exit 1, the missing tensor named" \
	"failed_with \"has no tensor\""

# ----------------------------------------------------------------------- clean
mkdir "$D/step-000000000007" "$D/step-000000000000"
echo partial >"$D/step-000000000007/rank-00000.safetensors.tmp"
echo partial >"$D/step-000000000000/rank-00000.safetensors"
echo partial >"$D/step-000000000003/rank-00000.safetensors.tmp"
run "$PM" clean --dir "$D" --keep 1 --dry-run
check "clean --dry-run: says what it would remove, removes nothing" \
	'test $rc = 0 && out_has "would remove step 7 (incomplete" && out_has "would remove step 1 (complete" &&
	 test -d "$D/step-000000000007" && test -d "$D/step-000000000001"'
run "$PM" clean --dir "$D" --keep 2 --json
check "clean --keep 2 --json: keeps steps 3, 2; removes incomplete 7, 0, complete 1 and a *.tmp in 3" \
	"test \$rc = 0 && json_ok \"d['kept'] == [3, 2] and [s['step'] for s in d['removed']] == [7, 1, 0]
	 and [s['complete'] for s in d['removed']] == [False, True, False] and d['freed_bytes'] > 1741013
	 and [f['file'].split('/')[-2:] for f in d['removed_files']] ==
	     [['step-000000000003', 'rank-00000.safetensors.tmp']]\""
check "clean: step 3 holds COMPLETE and its rank file only" \
	'test "$(ls -A "$D/step-000000000003")" = "COMPLETE
rank-00000.safetensors"'
check "clean: only step-000000000002 and step-000000000003 remain" \
	'test "$(ls "$D")" = "step-000000000002
step-000000000003"'
run "$PM" verify --dir "$D"
check "the kept steps still verify" 'test $rc = 0'
run "$PM" clean --dir "$D" --keep 1
check "clean --keep 1: removes step 2, keeps 3" \
	'test $rc = 0 && out_has "removed step 2" && out_has "kept step 3" && test "$(ls "$D")" = step-000000000003'

# A restarted run (issue #22): an old run of layout aa at steps 1337..1339, a new run
# of layout bb at 1..3, and a step whose marker is unreadable; markers by hand.
D2="$S/runs"
mkstep() { # STEP LAYOUT GENERATION
	d="$D2/$(printf 'step-%012d' "$1")"
	mkdir -p "$d" && echo data >"$d/rank-00000.safetensors" &&
	printf '{"step": %d, "world_size": 1, "layout_hash": "%s", "generation": %d}\n' \
		"$1" "$2" "$3" >"$d/COMPLETE"
}
for s in 1337 1338 1339; do mkstep $s 00000000000000aa 1; done
for s in 1 2 3; do mkstep $s 00000000000000bb 1; done
mkstep 5 00000000000000bb 1 && echo '{"step": 5,' >"$D2/step-000000000005/COMPLETE"
run "$PM" list --dir "$D2" --json
check "list --dir --json: layout hash, generation and lineage of each step; unreadable marker" \
	"test \$rc = 0 && json_ok \"[s['lineage'] for s in d['steps']] == ['00000000000000bb/1'] * 3 +
	 [None] + ['00000000000000aa/1'] * 3 and d['steps'][3]['marker_ok'] is False and
	 all(s['generation'] == 1 for s in d['steps'] if s['step'] != 5)\""
run "$PM" clean --dir "$D2" --keep 2 --dry-run
check "clean --dry-run of a restarted run: per lineage, the unreadable step left alone" \
	'test $rc = 0 && out_has "would remove step 1 (complete, beyond --keep 2 of lineage 00000000000000bb/1" &&
	 out_has "would remove step 1337 (complete" && out_has "left step 5 (unreadable" &&
	 out_has "kept step 3 " && test -d "$D2/step-000000000001" && test -d "$D2/step-000000001337"'
run "$PM" clean --dir "$D2" --keep 2 --json
check "clean --keep 2 --json: keeps 2 of each lineage (the new run's 3, 2 too), leaves 5" \
	"test \$rc = 0 && json_ok \"d['kept'] == [1339, 1338, 3, 2] and
	 [(s['step'], s['lineage']) for s in d['removed']] ==
	     [(1337, '00000000000000aa/1'), (1, '00000000000000bb/1')] and
	 [s['step'] for s in d['left']] == [5]\""
check "clean: the new run's steps 2 and 3 are still there" \
	'test "$(ls "$D2" | tr "\n" " ")" = "step-000000000002 step-000000000003 step-000000000005 step-000000001338 step-000000001339 "'

# ---------------------------------------------------------------------- usage
run "$PM"
check "no command: exit 2, usage" usage_error
run "$PM" frobnicate
check "unknown command: exit 2" 'usage_error && err_has "unknown command"'
run "$PM" list
check "list without --pool or --dir: exit 2" usage_error
run "$PM" list --pool "$P" --dir "$D"
check "list with --pool and --dir: exit 2" usage_error
run "$PM" list --pool "$P" --nope
check "unknown option: exit 2" 'usage_error && err_has "unknown option"'
run "$PM" list --pool
check "option without its value: exit 2" 'usage_error && err_has "needs a value"'
run "$PM" list --pool "$P" extra
check "extra argument: exit 2" 'usage_error && err_has "unexpected argument"'
run "$PM" verify --pool "$P"
check "verify --pool without --store: exit 2" usage_error
run "$PM" export --pool "$P" --store model
check "export without --out: exit 2" usage_error
run "$PM" import --pool "$P" --store model --file "$T/x.safetensors" --step -1
check "import --step -1: exit 2" usage_error
run "$PM" clean --dir "$D"
check "clean without --keep: exit 2" usage_error
run "$PM" clean --dir "$D" --keep 0
check "clean --keep 0: exit 2 (would delete every step)" usage_error
run "$PM" clean --dir "$D" --keep x
check "clean --keep x: exit 2" usage_error
run "$PM" export --pool "$P" --store model --out "$T/z" --rank 2 --world-size 2
check "export --rank 2 --world-size 2: exit 2" usage_error
# create: a pool where there is none, never over something else unless --force.
C="$T/created.pool"
run "$PM" create --pool "$C"
check "create of a missing file without --size: exit 2" 'usage_error && err_has "size"'
run "$PM" create --pool "$C" --size 1.5x
check "create --size 1.5x: exit 2" 'usage_error && err_has "512M"'
run "$PM" create --pool "$C" --size 40M --json
check "create --size 40M --json: a 40 MiB file pool" \
	'test $rc = 0 && json_ok "d[\"size\"] == 40 << 20 and d[\"new_file\"] and d[\"kind\"] == \"file\""'
run "$PM" create --pool "$C"
check "create over a pool: refused, names it" 'failed_with "already holds a pmalloc pool with 0 stores"'
run "$PM" create --pool "$C" --size 41M
check "create --size on an existing file of another size: exit 2" usage_error
run "$PM" create --pool "$P"
check "create over the pool holding model and opt: refused" 'failed_with "2 stores"'
run "$PM" list --pool "$P" --json
check "and the stores are still there" 'test $rc = 0 && json_ok "len(d[\"stores\"]) == 2"'
head -c 3000000 /dev/urandom >"$T/junk"
cp "$T/junk" "$T/junk.orig"
run "$PM" create --pool "$T/junk"
check "create over other data: refused" 'failed_with "holds other data"'
check "and the data is untouched" 'cmp -s "$T/junk" "$T/junk.orig"'
run "$PM" create --pool "$T/junk" --force
check "create --force formats it, saying what was there" \
	'test $rc = 0 && err_has "formatted over what was there (.*holds other data"'
run "$PM" import --pool "$T/new.pool" --store m --file "$D/step-000000000003/rank-00000.safetensors"
check "import into a missing pool without --size: refused, pointing at --size" 'failed_with "--size"'
run "$PM" import --pool "$T/new.pool" --size 64M --store m \
	--file "$D/step-000000000003/rank-00000.safetensors"
check "import --size 64M creates pool and store" 'test $rc = 0 && err_has "created store .m."'
run "$PM" export --pool "$T/new.pool" --store m --out "$T/back.safetensors"
check "export of the imported store is bit-exact to the file" \
	'test $rc = 0 && cmp -s "$T/back.safetensors" "$D/step-000000000003/rank-00000.safetensors"'
run "$PM" import --pool "$T/junk.orig" --store m --file "$D/step-000000000003/rank-00000.safetensors"
check "import into a file holding other data: refused" 'failed_with "refusing to format"'
check "and the file is untouched" 'test "$(head -c 3000000 "$T/junk" | wc -c)" = 3000000'

run "$PM" --help
check "--help: exit 0, usage on stdout" 'test $rc = 0 && out_has "^usage: pmckpt" && test ! -s "$E"'

echo "1..$n"
exit $((fails > 0))
