#!/usr/bin/env bash
# The test suite: install what is missing, then
#   0. scripts/check_cycles.py: no cycle of calls between the product's .c
#      files (the layers of README.md, "Source layout"), of includes between
#      its files, or of either between its folders, before any build;
#   1. a Release build with every test (unit, integration on real mounts, fio);
#   2. the unit tests and the tests labelled asan (the ioctl path) again under
#      AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the concurrency tests under ThreadSanitizer;
#   4. where a CUDA toolkit is found (these machines: /usr/local/cuda), a
#      -DKVFS_CUDA=ON build (-Werror like the others) with its unit tests and
#      the integration tests of the device and ioctl paths; the CUDA tests
#      skip, each with the reason, where there is no GPU.
# Exits non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/deps.sh
kvfs_install_deps
jobs=$(nproc)

echo "== check_cycles: no cycle of calls or includes between the product's files or folders"
python3 scripts/check_cycles.py

build() { # dir, cmake args...
	local dir=$1
	shift
	cmake -S . -B "$dir" "$@" >/dev/null
	cmake --build "$dir" -j"$jobs" >/dev/null
}

echo "== Release build (without CUDA): all tests"
build build -DCMAKE_BUILD_TYPE=Release -DKVFS_CUDA=OFF -DKVFS_FAULTS=ON
(cd build && ctest --output-on-failure --timeout 600)

echo "== ASan+UBSan build: unit tests, ioctl tests"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DKVFS_CUDA=OFF -DKVFS_FAULTS=ON -DKVFS_SANITIZE=address,undefined
(cd build-asan && ctest --output-on-failure -L 'unit|asan')

echo "== TSan build: concurrency tests"
build build-tsan -DCMAKE_BUILD_TYPE=Debug -DKVFS_CUDA=OFF -DKVFS_FAULTS=ON -DKVFS_SANITIZE=thread
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -L concurrency)
cuda_root=$(kvfs_cuda_root)
if [ -n "$cuda_root" ]; then
	echo "== CUDA build ($cuda_root): unit tests, device and ioctl integration tests"
	build build-cuda -DCMAKE_BUILD_TYPE=Release -DKVFS_CUDA=ON -DKVFS_FAULTS=ON -DCUDAToolkit_ROOT="$cuda_root"
	(cd build-cuda && ctest --output-on-failure -L unit &&
		ctest --output-on-failure -R 'integration_test_(gpu|ioctl|client|vllm_connector)$')
else
	echo "== CUDA build: skipped, no CUDA toolkit found (nvcc not in CUDA_HOME, /usr/local/cuda or PATH)"
fi
echo "== all tests passed"
