#!/usr/bin/env bash
# The test suite: install what is missing, then
#   1. a Release build with every test (unit, integration on real mounts, fio);
#   2. the unit tests and the tests labelled asan (the ioctl path) again under
#      AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the concurrency tests under ThreadSanitizer.
# Exits non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/deps.sh
kvfs_install_deps
jobs=$(nproc)

build() { # dir, cmake args...
	local dir=$1
	shift
	cmake -S . -B "$dir" "$@" >/dev/null
	cmake --build "$dir" -j"$jobs" >/dev/null
}

echo "== Release build: all tests"
build build -DCMAKE_BUILD_TYPE=Release
(cd build && ctest --output-on-failure --timeout 600)

echo "== ASan+UBSan build: unit tests, ioctl tests"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DKVFS_CUDA=OFF -DKVFS_SANITIZE=address,undefined
(cd build-asan && ctest --output-on-failure -L 'unit|asan')

echo "== TSan build: concurrency tests"
build build-tsan -DCMAKE_BUILD_TYPE=Debug -DKVFS_CUDA=OFF -DKVFS_SANITIZE=thread
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -L concurrency)
echo "== all tests passed"
