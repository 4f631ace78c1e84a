#!/usr/bin/env bash
# Benchmarks kvfs against /dev/shm in one run: fio sequential write then
# read (1 MiB blocks, several 256 MiB files, buffered and O_DIRECT), with the
# kernel page cache dropped before each read so reads reach kvfs. Prints
# each bandwidth and the kvfs/shm ratio. Needs root (mount, drop_caches).
#   scripts/bench.sh [--jobs=N] [--files=N] [--size=256m]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/deps.sh
kvfs_install_deps
jobs=2 files=4 size=256m
for a in "$@"; do
	case $a in
	--jobs=*) jobs=${a#*=} ;;
	--files=*) files=${a#*=} ;;
	--size=*) size=${a#*=} ;;
	*) echo "bench.sh: unknown option '$a'" >&2; exit 2 ;;
	esac
done
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvfs >/dev/null

work=$(mktemp -d /tmp/kvfs-bench.XXXXXX)
shm=$(mktemp -d /dev/shm/kvfs-bench.XXXXXX)
mkdir -p "$work/mnt"
pool=$((jobs * files * ${size%m} * 2 + 512))M
build/kvfs -f --mem-size="$pool" "$work/data" "$work/mnt" 2>"$work/log" &
pid=$!
cleanup() {
	fusermount3 -u "$work/mnt" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$work" "$shm"
}
trap cleanup EXIT
for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
mountpoint -q "$work/mnt" || { cat "$work/log"; exit 1; }

# fio_bw DIR RW DIRECT -> MiB/s (aggregate over jobs)
fio_bw() {
	[ "$2" = read ] && sync && echo 3 >/proc/sys/vm/drop_caches
	fio --name=bench --directory="$1" --rw="$2" --bs=1M --size="$size" --nrfiles="$files" \
		--numjobs="$jobs" --direct="$3" --ioengine=psync --group_reporting \
		--filename_format='b.$jobnum.$filenum' --output-format=json |
		python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]
print("%.0f" % ((j["write"]["bw_bytes"] + j["read"]["bw_bytes"]) / 2**20))'
}

printf '%-22s %10s %10s %8s\n' "job ($jobs jobs x $files x $size)" "kvfs MiB/s" "shm MiB/s" ratio
for direct in 0 1; do
	for rw in write read; do
		k=$(fio_bw "$work/mnt" $rw $direct)
		s=$(fio_bw "$shm" $rw 0)
		[ $rw = read ] && rm -f "$work"/mnt/b.* "$shm"/b.*
		printf '%-22s %10s %10s %8s\n' "seq $rw direct=$direct" "$k" "$s" \
			"$(python3 -c "print('%.2f' % ($k / $s))")"
	done
done
