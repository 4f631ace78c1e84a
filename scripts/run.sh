#!/usr/bin/env bash
# The main job: install what is missing, build Release, and mount kvfs at
# ./mnt with its data in ./kvfs-data, in the foreground. Ctrl-C unmounts.
# Extra arguments go to kvfs, e.g.: scripts/run.sh --mem-size=8G -o allow_other
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/deps.sh
kvfs_install_deps
# KVFS_CUDA=AUTO: with the CUDA backend when a toolkit is found, without otherwise;
# KVFS_FAULTS=OFF: no crash points (scripts/test.sh builds them into the same dir).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVFS_CUDA=AUTO -DKVFS_FAULTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target kvfs >/dev/null
mkdir -p mnt
# A mount left by a killed daemon answers "Transport endpoint is not connected".
if ! stat mnt >/dev/null 2>&1 || grep -q " $root/mnt fuse" /proc/mounts; then
	fusermount3 -u -z mnt 2>/dev/null || true
fi
cat <<MSG
kvfs: mounting at $root/mnt (data in $root/kvfs-data).
  use it:  cp FILE mnt/   ls -l mnt   cat mnt/.kvfs/stats   df -h mnt
  stop:    Ctrl-C here, or fusermount3 -u $root/mnt from another shell
MSG
exec build/kvfs -f "$@" kvfs-data mnt
