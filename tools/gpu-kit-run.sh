#!/bin/bash
# gpu-kit-run.sh -- runs on a lent GPU machine, as .gpu/run.sh (tools/gpu-kit packs it):
#   bash .gpu/run.sh [checks|bench|all|profile]   (default all; about 8 minutes on an H100)
# checks: tests/gpu_hash (the hash kernel against libxxhash), tests/gpu_hasher (checksums of
#         device memory, for loads), tests/gpu_pipeline (the
#         stream contract included, each strategy with host and device hashing), the
#         wheel installed with pip install --no-index --no-deps beside the machine's torch, then
#         python -m pmckpt --version and test_gpu.py against the installed package;
# bench:  bench_gpu.py (make bench-gpu: save and load against pinned D2H/H2D, the stall
#         against DCP's, bench_train.py at batch 8 and 32), pmck-pipebench --gpu-only, and
#         pmbench's GPU rows (each strategy hashed on the host and on the GPU).
# profile: only bench_train.py at batch 8 with --profile-call (where the checkpoint call's
#         time goes on the training thread; GPU_KIT_PROFILE_CONFIGS, default
#         pm_every10,pmsnap_every10), about a minute.
# GPU_KIT_BENCH_ARGS: extra arguments of bench_gpu.py (e.g. --no-train).
# GPU_KIT_PIPEBENCH_THREADS: writer counts pmck-pipebench also runs with (--gpu-threads),
# after its default run (e.g. "4 12 16"; each about 6 s on an H100).
# GPU_KIT_TIMEOUT_PIPELINE, GPU_KIT_TIMEOUT_TESTS, GPU_KIT_TIMEOUT_BENCH: seconds for
# gpu_pipeline (180), test_gpu.py (300) and bench_gpu.py (480; each batch's training run
# inside it has 300, --train-timeout): shorter where a hang must not eat a short lease.
# Python runs unbuffered, so a step cut short keeps what it printed.
# Everything goes to $OUT (the device tool brings it back), one file per step, and run.log.
K=$(cd "$(dirname "$0")" && pwd)
what=${1:-all}
OUT=${OUT:-/tmp/gpu-kit-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
step() { echo "=== $(date +%T) $*"; }

step machine
grep -h PRETTY_NAME /etc/os-release 2>/dev/null
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
# The wheel installed as pip would, into a folder of its own beside the machine's torch
# (pip install --target); a python without pip gets it unzipped, which is what pip does with
# this pure-py3 wheel (its libraries find each other through their RPATHs).
T=$(mktemp -d /tmp/gpu-kit.XXXXXX)/site
if python3 -m pip install -q --no-index --no-deps --target "$T" "$K"/wheel/*.whl; then
	echo "wheel: pip install --no-index --no-deps --target"
elif mkdir -p "$T" && python3 -m zipfile -e "$K"/wheel/*.whl "$T"; then
	echo "wheel: unzipped (this python3 has no pip)"
else
	echo "gpu-kit: installing the wheel FAILED"
fi
# py SECONDS ARGS: the machine's python3 from the tests folder, with the installed package only.
py() {
	local t=$1
	shift
	# unbuffered: what a run cut short by its timeout printed is still in its file
	(cd "$K/py/tests" && env -u PMCKPT_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$T" \
		PYTHONUNBUFFERED=1 timeout "$t" python3 "$@")
}

if [ "$what" = profile ]; then
	step "bench_train.py --profile-call"
	py 300 ../bench/bench_train.py --device cuda --ranks 0 --batch 8 --steps 10 --warmup 3 \
		--reps 1 --profile-call --configs "${GPU_KIT_PROFILE_CONFIGS:-pm_every10,pmsnap_every10}" \
		>"$OUT/profile.txt" 2>&1
	echo "rc $?"; grep -E '^bench: cost' "$OUT/profile.txt"
	step done
	exit 0
fi
if [ "$what" != bench ]; then
	step tests/gpu_hash
	LD_LIBRARY_PATH=$K/lib timeout 120 "$K/bin/gpu_hash" >"$OUT/gpu_hash.tap" 2>&1
	echo "rc $?"; cat "$OUT/gpu_hash.tap"
	step tests/gpu_hasher
	LD_LIBRARY_PATH=$K/lib timeout 120 "$K/bin/gpu_hasher" >"$OUT/gpu_hasher.tap" 2>&1
	echo "rc $?"; cat "$OUT/gpu_hasher.tap"
	step tests/gpu_pipeline
	LD_LIBRARY_PATH=$K/lib timeout "${GPU_KIT_TIMEOUT_PIPELINE:-180}" "$K/bin/gpu_pipeline" >"$OUT/gpu_pipeline.tap" 2>&1
	echo "rc $?"; grep -E '^(not ok|1\.\.)' "$OUT/gpu_pipeline.tap"; tail -1 "$OUT/gpu_pipeline.tap"
	step "wheel: --version"
	py 60 -m pmckpt --version
	step "wheel: test_gpu.py"
	py "${GPU_KIT_TIMEOUT_TESTS:-300}" test_gpu.py >"$OUT/test_gpu.tap" 2>&1
	echo "rc $?"; grep -E '^(not ok|1\.\.)' "$OUT/test_gpu.tap"
fi
if [ "$what" != checks ]; then
	step "bench_gpu.py (save, load, stall, training at batch 8 and 32)"
	py "${GPU_KIT_TIMEOUT_BENCH:-480}" ../bench/bench_gpu.py ${GPU_KIT_BENCH_ARGS:-} >"$OUT/bench_gpu.txt" 2>&1
	echo "rc $?"; grep -E '^(bench|ratio):' "$OUT/bench_gpu.txt"
	# Once with the default writers, then once per GPU_KIT_PIPEBENCH_THREADS value.
	for t in default ${GPU_KIT_PIPEBENCH_THREADS:-}; do
		f=$OUT/pipebench$([ "$t" = default ] || echo "_threads$t").txt
		step "pmck-pipebench --gpu-only $([ "$t" = default ] || echo "--gpu-threads $t")"
		LD_LIBRARY_PATH=$K/lib timeout 120 "$K/bin/pmck-pipebench" --gpu-only --dir /dev/shm \
			$([ "$t" = default ] || echo "--gpu-threads $t") >"$f" 2>&1
		echo "rc $?"; grep -E '^(bench|ratio):' "$f"
	done
	# pmbench's GPU rows (the wheel's own pmbench): each strategy hashed on the host and on
	# the GPU, 16 MiB tensors, beside one small CPU configuration (about 10 s).
	step "pmbench (the GPU strategies, both hashings)"
	timeout 120 "$T/pmckpt/_native/pmbench" --region /dev/shm/pmck-kit-pmbench --size 2G \
		--sizes 4M --methods nt --layouts separated --aligns 128 --no-read --no-latency \
		--gpu-sizes 16M --time-ms 200 --out "$OUT/pmbench" >"$OUT/pmbench.txt" 2>&1
	# method, size, writers, GB/s of each GPU row; or why there are none
	echo "rc $?"; grep -h 'GPU path' "$OUT/pmbench.txt"; grep ',gpu,' "$OUT/pmbench.csv" | cut -d, -f3,6,7,16
	rm -f /dev/shm/pmck-kit-pmbench
fi
step done
