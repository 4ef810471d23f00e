#!/bin/sh
# installed.sh WHEEL -- the wheel of `make wheel` installed as a user of a GPU node would:
# into a fresh venv, `pip install --no-deps`, with torch, safetensors and numpy from PyPI
# (the pins of bindings/python/requirements.txt), without PMCKPT_LIBRARY and away from the
# source tree.  Then, against the installed package (TAP):
#   - python -m pmckpt --version: the wheel's own libpmckpt and its build;
#   - ldd of every shared object and program in the package: each library resolves inside the
#     wheel or is one the manylinux policy promises;
#   - the console scripts pmckpt and pmbench run the bundled programs;
#   - the binding's store tests and its kill/resume test (copies of bindings/python/tests).
# Meant for a fresh Debian 12 with python3 and python3-venv only (make check-wheel runs it here;
# docs/python.md says where it ran).  PMCKPT_WHEEL_VENV=DIR keeps the venv there.
set -u
whl=$(cd "$(dirname "${1:?usage: installed.sh WHEEL}")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/pmckpt-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
venv=${PMCKPT_WHEEL_VENV:-$work/venv}
pins=$(grep -E '^(torch|safetensors|numpy)==' "$root/bindings/python/requirements.txt")
n=0
bad=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else bad=$((bad + 1)); echo "not ok $n - $2"; fi; }

echo "1..7"
python3 -m venv "$venv" && "$venv/bin/pip" install --disable-pip-version-check -q --no-deps --force-reinstall "$whl"
ok $? "pip install --no-deps $(basename "$whl") into a fresh venv"
# shellcheck disable=SC2086
"$venv/bin/pip" install --disable-pip-version-check -q $pins
ok $? "torch, safetensors, numpy from PyPI ($(echo $pins))"
py=$venv/bin/python
cd "$work" || exit 1
unset PMCKPT_LIBRARY PYTHONPATH

out=$("$py" -m pmckpt --version 2>&1)
echo "$out" | sed 's/^/# /'
pkg=$("$py" -c 'import os, pmckpt; print(os.path.dirname(pmckpt.__file__))' 2>/dev/null)
echo "$out" | grep -q "^library: $pkg/_native/libpmckpt.so.0$" && echo "$out" | grep -q '^build: libpmckpt'
ok $? "python -m pmckpt --version: the wheel's own library ($pkg/_native) and its build"

# The manylinux policy's libraries (PEP 600, auditwheel's policy list for x86_64).
policy='linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libgcc_s.so.1 libstdc++.so.6 libnsl.so.1 libutil.so.1 libresolv.so.2 libz.so.1 libexpat.so.1 libX11.so.6 libXext.so.6 libXrender.so.1 libICE.so.6 libSM.so.6 libGL.so.1 libgobject-2.0.so.0 libgthread-2.0.so.0 libglib-2.0.so.0'
stray=
for f in "$pkg"/_native/* "$pkg"/../pmckpt.libs/*; do
	ldd "$f" >"$work/ldd" 2>&1 || { stray="$stray $f:(ldd failed)"; continue; }
	while read -r lib arrow path _; do
		case $path in "$pkg"/*|"$(dirname "$pkg")"/pmckpt.libs/*) continue ;; esac
		[ "$arrow" = "=>" ] && [ "$path" = "not" ] && { stray="$stray $(basename "$f"):$lib(not found)"; continue; }
		case " $policy " in *" ${lib##*/} "*) ;; *) stray="$stray $(basename "$f"):$lib" ;; esac
	done <"$work/ldd"
done
[ -z "$stray" ]
ok $? "ldd: every library of the package resolves inside the wheel or the manylinux set${stray:+ (outside:$stray)}"

"$venv/bin/pmckpt" --help >"$work/help" 2>&1; grep -q '^usage: pmckpt' "$work/help" &&
	"$venv/bin/pmbench" --help 2>&1 | grep -qi 'usage'
ok $? "the console scripts pmckpt and pmbench run the bundled programs"

cp -R "$root/bindings/python/tests" "$work/tests"
"$py" "$work/tests/test_store.py" >"$work/store.tap" 2>&1
r=$?; grep -E '^(not ok|# SKIP|ok .*# SKIP)' "$work/store.tap" | sed 's/^/# /'
ok $r "the binding's store tests against the installed package ($(grep -c '^ok' "$work/store.tap") passed)"
"$py" "$work/tests/test_resume.py" >"$work/resume.tap" 2>&1
r=$?; grep -E '^not ok' "$work/resume.tap" | sed 's/^/# /'
ok $r "kill -9 and resume against the installed package ($(grep -c '^ok' "$work/resume.tap") passed)"
exit $((bad > 0))
