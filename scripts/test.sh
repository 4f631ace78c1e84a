#!/usr/bin/env bash
# The test suite: install what is missing, then
#   0. scripts/check_cycles.py: no cycle of calls between the product's .c
#      files (the layers of README.md, "Source layout"), of includes between
#      its files, or of either between its folders, before any build;
#   1. a Release build with every test (unit, integration on real mounts, fio);
#   1b. the integration tests again with FUSE over io_uring (KVFS_URING=on;
#      but the three that mount no kvfs of this build):
#      where the kernel has it, enable_uring is set for the run and put back
#      as it was; where it cannot be, the run is skipped saying why;
#   2. the unit tests and the tests labelled asan (the ioctl path) again under
#      AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the concurrency tests under ThreadSanitizer (only their programs built),
#      and test_uring against a TSan daemon;
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

# Runs "$@" with /sys/module/fuse/parameters/enable_uring set to Y, and puts
# it back as it was; returns 77 with the reason on stderr where it cannot.
uring_param=/sys/module/fuse/parameters/enable_uring
with_uring() {
	local was rc=0
	if [ ! -e "$uring_param" ]; then
		echo "this kernel has no FUSE over io_uring ($uring_param is missing)" >&2
		return 77
	fi
	was=$(cat "$uring_param")
	if ! { echo Y >"$uring_param"; } 2>/dev/null; then
		echo "cannot set $uring_param (not root, or a read-only /sys)" >&2
		return 77
	fi
	"$@" || rc=$?
	echo "$was" >"$uring_param"
	return $rc
}

echo "== Release build (without CUDA): all tests"
build build -DCMAKE_BUILD_TYPE=Release -DKVFS_CUDA=OFF -DKVFS_FAULTS=ON
(cd build && ctest --output-on-failure --timeout 600)

echo "== FUSE over io_uring: the integration tests again (KVFS_URING=on)"
# all but those that mount no kvfs of this build: the packages' round trip, the
# install tree, the cycle check
rc=0
(cd build && with_uring env KVFS_URING=on ctest --output-on-failure --timeout 600 -L integration \
	-E 'integration_test_(package|install|check_cycles)$') || rc=$?
if [ "$rc" = 77 ]; then
	echo "== FUSE over io_uring: skipped (above: why)"
elif [ "$rc" != 0 ]; then
	exit "$rc"
fi

echo "== ASan+UBSan build: unit tests, ioctl tests"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DKVFS_CUDA=OFF -DKVFS_FAULTS=ON -DKVFS_SANITIZE=address,undefined
(cd build-asan && ctest --output-on-failure -L 'unit|asan')

echo "== TSan build: concurrency tests"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DKVFS_CUDA=OFF -DKVFS_FAULTS=ON \
	-DKVFS_SANITIZE=thread >/dev/null
# the concurrency tests are unit programs, each its own target; those labelled tsan
# drive a daemon (kvfs, ioctl_e2e), whose exit status says whether TSan reported
cmake --build build-tsan -j"$jobs" --target kvfs ioctl_e2e \
	$(cd build-tsan && ctest -N -L concurrency | sed -n 's/^ *Test *#[0-9]*: //p') >/dev/null
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -L 'concurrency|tsan')
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
