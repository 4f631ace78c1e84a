#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (nothing here needs one
# to build; everything below needs one to run). Under 5 minutes on one GPU:
#   1. installs the Debian packages kvfs needs (scripts/deps.sh; the CUDA
#      toolkit must already be there: CUDA_HOME, /usr/local/cuda or nvcc on
#      PATH) and prints the driver's and the runtime's versions;
#   2. builds with -DKVFS_CUDA=ON in build-gpu;
#   3. runs every CUDA test: test_gpu.py (CUDA_IPC and CUDA_VMM regions, a
#      layout over 32 layer tensors, SSD-resident gets, a client killed
#      mid-batch, a second process denied another's region, the C example),
#      with skips turned into failures, and the vLLM connector's test;
#   4. mounts a kvfs with --gpu=cuda and runs the bandwidth benchmark: batch
#      put (D2H) and batch get (H2D) of 2 MiB blocks through kvfs next to
#      plain cudaMemcpy between the same device buffer and pinned host
#      memory, in the same run, printed as ratios (targets: >= 0.8 each way).
# Usage: tests/gpu/run.sh [BENCH_MIB]   (default 2048)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bench_mib=${1:-2048}
. scripts/deps.sh
kvfs_install_deps

cuda_root=$(kvfs_cuda_root)
[ -n "$cuda_root" ] || { echo "tests/gpu/run.sh: no CUDA toolkit found" >&2; exit 1; }
echo "== CUDA toolkit: $cuda_root ($("$cuda_root/bin/nvcc" --version | tail -1))"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi

echo "== build (build-gpu, -DKVFS_CUDA=ON)"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKVFS_CUDA=ON \
	-DCUDAToolkit_ROOT="$cuda_root" >/dev/null
cmake --build build-gpu -j"$(nproc)" >/dev/null
# prints devices, driver and runtime versions; 77: none
build-gpu/gpu_e2e probe || { echo "tests/gpu/run.sh: no usable CUDA device" >&2; exit 1; }

echo "== CUDA tests"
timeout 200 python3 tests/integration/test_gpu.py --kvfs build-gpu/kvfs -v 2>&1 |
	tee build-gpu/gpu-tests.log
# Python 3.11 prints "(__main__.Device.test_x)", older ones "(__main__.Device)".
if grep -qE '\(__main__\.Device(\.[a-z0-9_]+)?\) \.\.\. skipped' build-gpu/gpu-tests.log; then
	echo "tests/gpu/run.sh: a CUDA test was skipped on a GPU machine" >&2
	exit 1
fi
timeout 60 python3 tests/integration/test_vllm_connector.py --kvfs build-gpu/kvfs

echo "== bandwidth: ${bench_mib} MiB in 2 MiB blocks"
tmp=$(mktemp -d /tmp/kvfs-gpu.XXXXXX)
cleanup() {
	fusermount3 -u "$tmp/mnt" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/data" "$tmp/mnt"
build-gpu/kvfs --gpu=cuda --mem-size=$((bench_mib * 2 + 1024))M --ssd-size=0 \
	"$tmp/data" "$tmp/mnt"
# Let the pool be pinned before measuring (progress in the stats).
for _ in $(seq 60); do
	python3 - "$tmp/mnt/.kvfs/stats" <<'PY' && break
import json, sys
g = json.load(open(sys.argv[1]))["gpu"]
print("pinned %d of %d bytes" % (g["pool_pinned"], g["pool_pin_target"]))
sys.exit(0 if g["pool_pinned"] >= g["pool_pin_target"] else 1)
PY
	sleep 1
done
python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["gpu"]
sys.exit(0 if g["pool_pinned"] >= g["pool_pin_target"] else 1)' "$tmp/mnt/.kvfs/stats" ||
	{ echo "tests/gpu/run.sh: the pool is not pinned after 60 s" >&2; exit 1; }
mkdir -p "$tmp/mnt/b"
timeout 120 build-gpu/gpu_e2e bench "$tmp/mnt/b" "$bench_mib"
echo "== tests/gpu/run.sh: done"
