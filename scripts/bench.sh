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
pool_mb=$((jobs * files * ${size%m} + 512))
build/kvfs -f --mem-size="${pool_mb}M" "$work/data" "$work/mnt" 2>"$work/log" &
pid=$!
cleanup() {
	fusermount3 -u "$work/mnt" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$work" "$shm"
}
trap cleanup EXIT
for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
mountpoint -q "$work/mnt" || { cat "$work/log"; exit 1; }
# The daemon faults its pool in at start; measure once that is done.
for _ in $(seq 600); do
	rss=$(awk '/VmRSS/ {print int($2 / 1024)}' /proc/$pid/status)
	[ "$rss" -ge "$pool_mb" ] && break
	sleep 0.1
done

# fio_bw DIR RW DIRECT COLD -> MiB/s (aggregate over jobs). COLD=1 drops
# the page cache first, so a read reaches the filesystem; COLD=0 keeps it
# (fio would otherwise drop the file's cached pages before the job).
fio_bw() {
	if [ "$4" = 1 ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
	fio --name=bench --invalidate="$4" --directory="$1" --rw="$2" --bs=1M --size="$size" --nrfiles="$files" \
		--numjobs="$jobs" --direct="$3" --ioengine=psync --group_reporting \
		--filename_format='b.$jobnum.$filenum' --output-format=json |
		python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]
print("%.0f" % ((j["write"]["bw_bytes"] + j["read"]["bw_bytes"]) / 2**20))'
}

# row LABEL RW DIRECT COLD: the same job on kvfs (DIRECT as given) and on
# /dev/shm (always buffered: tmpfs is memory either way).
row() {
	local k s
	k=$(fio_bw "$work/mnt" "$2" "$3" "$4")
	s=$(fio_bw "$shm" "$2" 0 "$4")
	printf '%-28s %10s %10s %8s\n' "$1" "$k" "$s" "$(python3 -c "print('%.2f' % ($k / $s))")"
}

printf '%-28s %10s %10s %8s\n' "fio, $jobs jobs x $files x $size" "kvfs MiB/s" "shm MiB/s" ratio
row "seq write, page cache" write 0 0
row "seq read cold, page cache" read 0 1
row "seq read warm, page cache" read 0 0
rm -f "$work"/mnt/b.* "$shm"/b.*
row "seq write, O_DIRECT" write 1 0
row "seq read, O_DIRECT" read 1 1
