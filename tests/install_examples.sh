#!/bin/bash
# install_examples.sh -- what a framework author does: `make install PREFIX=<tmp>`
# (with the BUILD the tests run with, nothing rebuilt: REBUILD=0), every installed
# .pc parses and gives clean --cflags (no private package's -I, e.g. json-c) and a
# complete --static link line (CUDA's runtime when built with CUDA); pmalloc.pc
# and pmckpt.pc pull no libndctl/libdaxctl (provisioning is pmalloc_ns.pc, whose
# library a small pma_ns_* program links shared and static); examples/ built
# with pkg-config alone, shared (our libraries resolved from the prefix) and static
# (a SHARED=0 prefix: no .so to fall back on), and run: train_single (pipeline,
# copy-out keep 3, restart from the local then the shared tier), train_devdax (a
# blank file standing in for a device, reopened, other data refused), train_mpi
# under mpirun -np 2 (skipped without mpicc/mpirun).
B=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
if [ ! -f "$B/flags.stamp" ]; then
	echo "1..0 # SKIP $B is not built (make first)"
	exit 0
fi
if ! command -v pkg-config >/dev/null; then
	echo "1..0 # SKIP pkg-config not found"
	exit 0
fi
T=$(mktemp -d /var/tmp/pmck-install-XXXXXX) || exit 1
R=$(mktemp -d /dev/shm/pmck-install-XXXXXX) || exit 1
trap 'rm -rf "$T" "$R"' EXIT INT TERM
P="$T/prefix"     # shared and static libraries
S="$T/static"     # static libraries only (make install SHARED=0)
O="$T/out"
unset LD_LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
# Sanitizer builds: the examples need the same runtime as the libraries.
SAN=$(grep -o -- '-fsanitize=[a-z,]*' "$B/flags.stamp" | sort -u | tr '\n' ' ')
[ -n "$SAN" ] && export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
EX_CFLAGS="-O1 -g $SAN"

n=0
fails=0
# check NAME CONDITION: one TAP test; CONDITION is shell code (eval'd).
check() {
	n=$((n + 1))
	if eval "$2" 2>"$T/cerr"; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		fails=$((fails + 1))
		sed 's/^/# /' "$T/cerr"
		[ -f "$O" ] && head -c 3000 "$O" | sed 's/^/# output: /'
	fi
}
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
# run CMD...: output (stdout and stderr) in $O, status in $rc.
run() { "$@" >"$O" 2>&1; rc=$?; }
has() { grep -qF -- "$1" "$O"; }
# install PREFIX [VAR=...]: the repository's make install, refusing to rebuild.
install_to() {
	local pfx=$1
	shift
	make -s -j1 install BUILD="$B" PREFIX="$pfx" REBUILD=0 "$@" >"$O" 2>&1
}

if ! install_to "$P"; then
	if grep -q 'REBUILD=0 forbids' "$O"; then
		echo "1..0 # SKIP $B was built with other make variables (run through make check)"
		exit 0
	fi
	check "make install PREFIX=$P" false
	echo "1..$n"
	exit 1
fi
check "make install PREFIX=<tmp> with BUILD=$B, nothing rebuilt" true
PC="$P/lib/pkgconfig"
pcs="pmalloc pmalloc_ns pmckpt ddio"
[ -f "$PC/pmckpt_mpi.pc" ] && pcs="$pcs pmckpt_mpi"
check "installed pmalloc.pc pmalloc_ns.pc pmckpt.pc ddio.pc (and pmckpt_mpi.pc with MPI)" \
	'for p in pmalloc pmalloc_ns pmckpt ddio; do [ -f "$PC/$p.pc" ]; done &&
	 { ! ls "$B"/libpmckpt_mpi.a >/dev/null 2>&1 || [ -f "$PC/pmckpt_mpi.pc" ]; }'
check "every .pc names the temporary prefix (regenerated after a make with another PREFIX)" \
	'for p in $pcs; do grep -qx "prefix=$P" "$PC/$p.pc"; done'
export PKG_CONFIG_PATH="$PC"
check "every .pc validates and gives --cflags --libs and --static --libs ($pcs)" \
	'for p in $pcs; do pkg-config --validate $p && pkg-config --cflags --libs $p >/dev/null &&
	 pkg-config --static --libs $p >/dev/null || exit 1; done'
check "--cflags of pmalloc, pmalloc_ns, pmckpt, ddio is -I<prefix>/include alone (no json-c, no private -I)" \
	'for p in pmalloc pmalloc_ns pmckpt ddio; do [ "$(echo $(pkg-config --cflags $p))" = "-I$P/include" ] ||
	 { echo "$p: $(pkg-config --cflags $p)"; exit 1; }; done'
check "--libs pmckpt is -L<prefix>/lib -lpmckpt -lpmalloc" \
	'[ "$(echo $(pkg-config --libs pmckpt))" = "-L$P/lib -lpmckpt -lpmalloc" ]'
check "--libs pmalloc_ns is -L<prefix>/lib -lpmalloc_ns -lpmalloc" \
	'[ "$(echo $(pkg-config --libs pmalloc_ns))" = "-L$P/lib -lpmalloc_ns -lpmalloc" ]'
# libpmalloc only allocates: provisioning (libndctl, libdaxctl, JSON) is libpmalloc_ns.
check "pkg-config --libs and --static --libs of pmalloc and pmckpt pull no -lndctl -ldaxctl, pmalloc no -ljson-c" \
	'for a in "" --static; do for p in pmalloc pmckpt; do l=" $(pkg-config $a --libs $p) ";
	 for x in -lndctl -ldaxctl $([ $p = pmalloc ] && echo -ljson-c); do
	 case $l in *" $x "*) echo "pkg-config $a --libs $p: $l"; exit 1 ;; esac; done; done; done'
check "--static --libs pmalloc_ns carries -lpmalloc_ns -lpmalloc -ljson-c -lndctl -ldaxctl -lpmem2" \
	'l=" $(pkg-config --static --libs pmalloc_ns) "; for x in -lpmalloc_ns -lpmalloc -ljson-c -lndctl -ldaxctl -lpmem2; do
	 case $l in *" $x "*) ;; *) echo "$l: no $x"; exit 1 ;; esac; done'
static_libs=$(pkg-config --static --libs pmckpt)
if grep -q -- '-DPMCK_HAVE_CUDA' "$B/flags.stamp"; then
	check "CUDA build: --static --libs pmckpt carries -L<cuda>/lib64 -lcudart_static -ldl -lrt -lstdc++" \
		'echo "$static_libs" | grep -q -- "-L[^ ]*/lib64 -lcudart_static -ldl -lrt -lstdc++"'
else
	check "build without CUDA: --static --libs pmckpt names no CUDA runtime" \
		'! echo "$static_libs" | grep -q cudart'
fi
cat > "$T/ddio.c" <<'C'
#include <stdio.h>
#include <ddio.h>
int main(void) { return puts(ddio_support_name(DDIO_SUPPORT_VERIFIED)) < 0; }
C
cat > "$T/ns.c" <<'C'
#include <stdio.h>
#include <pmalloc_ns.h>
int main(void) { char b[32]; return puts(pma_ns_size_format(3ull << 30, b, sizeof(b))) < 0; }
C
check "--static --libs pmckpt carries the private packages (-lpmem2 -lxxhash -lnuma -ljson-c)" \
	'for l in -lpmem2 -lxxhash -lnuma -ljson-c; do echo " $static_libs " | grep -q -- " $l "; done'
check "shared libraries installed: libpmalloc.so.0 libpmalloc_ns.so.0 libpmckpt.so.0 libddio.so.0" \
	'for l in pmalloc pmalloc_ns pmckpt ddio; do [ -f "$P/lib/lib$l.so.0" ] && [ -L "$P/lib/lib$l.so" ]; done'
check "installed libpmalloc.so.0 NEEDs no libndctl, libdaxctl, json-c; libpmalloc_ns.so.0 NEEDs them and libpmalloc" \
	'! readelf -d "$P/lib/libpmalloc.so.0" | grep NEEDED | grep -E "lib(ndctl|daxctl|json-c)\." &&
	 readelf -d "$P/lib/libpmalloc_ns.so.0" > "$O" &&
	 for l in libpmalloc.so.0 libndctl libdaxctl libjson-c; do grep NEEDED "$O" | grep -qF "[$l"; done'

# ---- examples, shared
run env MAKEFLAGS= make -s -C examples OUT="$T/shared" CFLAGS="$EX_CFLAGS" PKG_CONFIG_PATH="$PC"
check "examples build against the prefix with pkg-config alone (shared)" \
	'[ $rc = 0 ] && [ -x "$T/shared/train_single" ] && [ -x "$T/shared/train_devdax" ]'
check "shared binaries resolve libpmckpt and libpmalloc from the prefix (rpath from pkg-config)" \
	'for b in "$T"/shared/*; do ldd "$b" > "$O" && grep -q "libpmckpt.so.0 => $P/lib/" "$O" &&
	 grep -q "libpmalloc.so.0 => $P/lib/" "$O" || exit 1; done'

# train_single: fresh, resumed locally, resumed from the shared directory.
rd="$R/ramdisk"
sd="$T/shared-dir"
run "$T/shared/train_single" "$rd" "$sd" 5
check "train_single: fresh start, 5 checkpoints committed and copied out, 2 deleted (keep 3)" \
	'[ $rc = 0 ] && has "no checkpoint in either tier: starting at step 1" &&
	 has "committed 5 checkpoints (last step 5)" && has "copied out 5 steps" &&
	 has "deleted 2 older ones (keep 3)"'
check "shared directory: steps 3, 4, 5, each COMPLETE" \
	'[ "$(ls "$sd" | tr "\n" " ")" = "step-000000000003 step-000000000004 step-000000000005 " ] &&
	 for s in 3 4 5; do [ -f "$sd/step-00000000000$s/COMPLETE" ]; done'
run "$T/shared/train_single" "$rd" "$sd" 4
check "train_single again: resumed at step 5 from the local tier, verified; steps 6..9" \
	'[ $rc = 0 ] && has "resumed at step 5 from the local tier" && has "contents verified" &&
	 has "committed 4 checkpoints (last step 9)"'
rm -f "$rd/pmckpt-train_single.pool"
run "$T/shared/train_single" "$rd" "$sd" 1
check "local pool lost: resumed at step 9 from the shared tier, verified" \
	'[ $rc = 0 ] && has "resumed at step 9 from the shared tier" && has "contents verified" &&
	 has "committed 1 checkpoints (last step 10)"'

# train_devdax: a blank file stands in for a device.
dax="$R/dax"
truncate -s 32M "$dax"
run "$T/shared/train_devdax" "$dax" 3
check "train_devdax: blank region formatted, steps 1..3 committed" \
	'[ $rc = 0 ] && has "pool: formatted a blank region" && has "no checkpoint yet" &&
	 has "step 3: committed to slot 0"'
run "$T/shared/train_devdax" "$dax" 2
check "train_devdax again: pool opened, step 3 recovered and verified, steps 4..5" \
	'[ $rc = 0 ] && has "pool: opened the existing pool" &&
	 has "recovered step 3 from slot 0; contents verified" && has "step 5: committed"'
head -c 1M /dev/urandom > "$dax"
truncate -s 32M "$dax"
cp "$dax" "$R/dax.orig"
run "$T/shared/train_devdax" "$dax" 1
check "train_devdax on other data: refused with pmck_errormsg(), exit 1, file untouched" \
	'[ $rc = 1 ] && has "train_devdax: pma_pool_open_or_create:" && has "not a pmalloc pool" &&
	 cmp -s "$dax" "$R/dax.orig"'

# ---- examples, static: a prefix without shared libraries.
install_to "$S" SHARED=0
check "make install SHARED=0: static libraries and .pc files, no .so" \
	'[ -f "$S/lib/libpmckpt.a" ] && [ -f "$S/lib/pkgconfig/pmckpt.pc" ] && ! ls "$S"/lib/*.so* 2>/dev/null'
cat > "$T/link.c" <<'C'
#include <pmckpt.h>
/* pma_region_open pulls region.o, which needs libpmem2 with or without CUDA. */
int main(void) { return pmck_gpu_available(0) == 0 && pma_region_open(0, 0, 0, 0) == 0; }
C
check "against .a files, pkg-config --libs (without --static) does not link: Libs.private is needed" \
	'! cc $SAN -o "$T/link" "$T/link.c" $(PKG_CONFIG_PATH=$S/lib/pkgconfig pkg-config --cflags --libs pmckpt) >/dev/null 2>&1'
run env MAKEFLAGS= make -s -C examples OUT="$T/static" STATIC=1 CFLAGS="$EX_CFLAGS" \
	PKG_CONFIG_PATH="$S/lib/pkgconfig"
check "libddio links from ddio.pc: shared (libddio.so.0 from the prefix) and --static (libddio.a)" \
	'cc $SAN -o "$T/ddio" "$T/ddio.c" $(pkg-config --cflags --libs ddio) -Wl,-rpath,$P/lib &&
	 ldd "$T/ddio" | grep -q "libddio.so.0 => $P/lib/" && "$T/ddio" >/dev/null &&
	 cc $SAN -o "$T/ddio-s" "$T/ddio.c" $(PKG_CONFIG_PATH=$S/lib/pkgconfig pkg-config --static --cflags --libs ddio) &&
	 ! ldd "$T/ddio-s" | grep -q libddio && "$T/ddio-s" >/dev/null'
check "a pma_ns_* program links from pmalloc_ns.pc: shared (libpmalloc_ns.so.0 from the prefix) and --static" \
	'cc $SAN -o "$T/ns" "$T/ns.c" $(pkg-config --cflags --libs pmalloc_ns) -Wl,-rpath,$P/lib &&
	 ldd "$T/ns" | grep -q "libpmalloc_ns.so.0 => $P/lib/" && "$T/ns" | grep -q GiB &&
	 cc $SAN -o "$T/ns-s" "$T/ns.c" $(PKG_CONFIG_PATH=$S/lib/pkgconfig pkg-config --static --cflags --libs pmalloc_ns) &&
	 ! ldd "$T/ns-s" | grep -q libpmalloc && "$T/ns-s" | grep -q GiB'
check "examples build with pkg-config --static alone (STATIC=1)" \
	'[ $rc = 0 ] && [ -x "$T/static/train_single" ] && [ -x "$T/static/train_devdax" ]'
check "static binaries need no libpmckpt/libpmalloc .so" \
	'for b in "$T"/static/*; do ! ldd "$b" | grep -q "libpmckpt\|libpmalloc"; done'
run "$T/static/train_single" "$R/ramdisk2" "$T/shared2" 2
check "static train_single: fresh start, 2 checkpoints copied out" \
	'[ $rc = 0 ] && has "committed 2 checkpoints (last step 2)" && has "copied out 2 steps"'
run "$T/static/train_devdax" "$R/dax2" 1
check "static train_devdax: a missing file created and formatted, step 1 committed" \
	'[ $rc = 0 ] && has "formatted a blank region" && has "step 1: committed"'

# ---- train_mpi under mpirun
why=""
command -v mpicc >/dev/null || why="no mpicc"
command -v mpirun >/dev/null || why="${why:+$why, }no mpirun"
[ -f "$PC/pmckpt_mpi.pc" ] || why="${why:+$why, }no pmckpt_mpi.pc (built with MPI=0)"
if [ -n "$why" ]; then
	skip "train_mpi: $why"
	skip "train_mpi again: $why"
else
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
	M="timeout 60 mpirun -np 2 --oversubscribe --allow-run-as-root $T/shared/train_mpi $R/mpi-ramdisk $T/mpi-shared"
	run $M 4
	check "train_mpi (2 ranks): fresh start, step 4 globally committed on both ranks" \
		'[ $rc = 0 ] && [ -x "$T/shared/train_mpi" ] &&
		 [ "$(grep -c "no checkpoint: starting at step 1" "$O")" = 2 ] &&
		 [ "$(grep -c "trained steps 1..4; globally committed step 4" "$O")" = 2 ]'
	run $M 3
	check "train_mpi again: both ranks resumed at step 4, verified; step 7 global, copied out by both" \
		'[ $rc = 0 ] && [ "$(grep -c "resumed at step 4 from the local tier; contents verified" "$O")" = 2 ] &&
		 [ "$(grep -c "globally committed step 7" "$O")" = 2 ] &&
		 [ -f "$T/mpi-shared/step-000000000007/COMPLETE" ] &&
		 [ -f "$T/mpi-shared/step-000000000007/rank-00001.safetensors" ]'
fi
echo "1..$n"
[ $fails = 0 ]
