#!/bin/sh
# exports.sh -- each shared library exports its public API and nothing else
# (issue #21).  For build/libpmalloc.so.0, libpmalloc_ns.so.0, libpmckpt.so.0
# and libddio.so.0:
#   - no exported symbol contains "__" (an internal: pma__*, pmck__*, ddio__*),
#     except those named in PRIVATE below;
#   - every function declared in the library's public headers is exported (a
#     name forgotten in the .sym file fails here);
#   - every exported function is declared in those headers.
# And libpmalloc.so.0, which only allocates, links no libndctl, libdaxctl or
# json-c (readelf -d: NEEDED): provisioning is libpmalloc_ns.
# Declarations are found as one line each: `^[a-z].* \*?(pma|pmck|ddio)_name(`.
B=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
if ! command -v nm >/dev/null; then
	echo "1..0 # SKIP nm not found"
	exit 0
fi
if [ ! -f "$B/libpmalloc.so.0" ]; then
	echo "1..0 # SKIP $B has no shared libraries (make first)"
	exit 0
fi

# The library, its headers (the part of include/ it implements).
LIBS="libpmalloc.so.0:include/pmalloc.h
libpmalloc_ns.so.0:include/pmalloc_ns.h
libpmckpt.so.0:include/pmckpt.h
libddio.so.0:include/ddio.h"
# Internals a library may export to its sibling, as name@@NODE: none (libpmckpt
# reports into libpmalloc's message buffer through pma_errormsg(), common/errmsg.h).
PRIVATE=""

T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
echo "1..13"
n=0
# result NAME FILE: ok if FILE is empty, else not ok with FILE's lines as comments.
result() {
	n=$((n + 1))
	if [ -s "$2" ]; then
		echo "not ok $n - $1"
		sed 's/^/# /' "$2"
	else
		echo "ok $n - $1"
	fi
}

echo "$LIBS" | while IFS=: read -r lib headers; do
	# Exported functions and objects, name@@NODE (version nodes themselves are A).
	nm -D --defined-only "$B/$lib" | awk '$2 != "A" { print $3 }' | sort > "$T/exp"
	sed 's/@.*//' "$T/exp" | sort -u > "$T/names"
	hdrs=$(echo "$headers" | tr ',' ' ')
	# shellcheck disable=SC2086 # $hdrs: several file names
	grep -hoE '^[a-z].* \*?(pma|pmck|ddio)_[a-z0-9_]+\(' $hdrs |
		grep -oE '(pma|pmck|ddio)_[a-z0-9_]+\($' | tr -d '(' | sort -u > "$T/decl"

	grep -F '__' "$T/exp" | while read -r s; do
		case " $PRIVATE " in
		*" $s "*) ;;
		*) echo "$s: an internal is exported (list the public names in the .sym file)" ;;
		esac
	done > "$T/out"
	result "$lib exports no internal (__) symbol" "$T/out"

	comm -23 "$T/decl" "$T/names" | sed "s|\$|: declared in $hdrs but not exported (add it to the .sym file)|" > "$T/out"
	[ -s "$T/decl" ] || echo "no declaration found in $hdrs" > "$T/out"
	result "$lib exports every function of $hdrs ($(wc -l < "$T/decl"))" "$T/out"

	grep -v '__' "$T/names" | comm -23 - "$T/decl" | sed 's/$/: exported but declared in no public header/' > "$T/out"
	result "$lib exports nothing its headers do not declare" "$T/out"
done

# The loop above ran in a subshell (a pipeline's), its n lost: 3 tests a library.
n=12
if command -v readelf >/dev/null; then
	readelf -d "$B/libpmalloc.so.0" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
		grep -E '^lib(ndctl|daxctl|json-c)\.' |
		sed 's/$/: NEEDED by libpmalloc.so.0 (provisioning belongs to libpmalloc_ns)/' > "$T/out"
	result "libpmalloc.so.0 links no libndctl, libdaxctl, json-c" "$T/out"
else
	echo "ok 13 # SKIP readelf not found"
fi
