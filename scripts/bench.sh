#!/usr/bin/env bash
# kvfs benchmarks, each against a baseline measured in the same run (these
# machines are shared and noisy: compare the ratios).
#
#   dram     fio sequential write then read (1 MiB blocks) through a
#            DRAM-only kvfs (--ssd-size=0) next to the same jobs on
#            /dev/shm: buffered (page cache; cold = dropped before reading,
#            warm = kept) and O_DIRECT.
#   ssd      fio sequential write then read of a data set 4x the DRAM pool
#            through kvfs (so reads come from the bucket files), next to the
#            same jobs with direct=1 on a plain directory of DATA_DIR's
#            filesystem; one 1 GiB file (it spills while written) the same
#            way; then the restart time for 100,000 keys.
#   ioctl    kvfs-bench --scenario=all (32 layers x 64 KiB = 2 MiB blocks)
#            through --path=ioctl next to --path=posix; a batch lookup of
#            1,000 names (one ioctl request) next to 1,000 stat() calls, both
#            on cold dentries (and stat() again with the dentries cached, as
#            within the 1 s entry timeout); ioctl get of DRAM-resident blocks next to one
#            thread's memcpy of the same bytes (kvfs-bench --scenario=memcpy).
#
#   gc       compaction: fio random 4 KiB and 1 MiB reads (p50, p99) with
#            compaction idle, then while a forced pass runs flat out; the
#            pass's copy rate next to the disk's direct write bandwidth,
#            once as fio writes (no flush) and once made durable (fio's
#            end_fsync: a pass syncs its outputs, and a disk with a
#            volatile cache, virtual ones too, takes writes faster than it
#            makes them durable);
#            the write amplification of the 75%-delete scenario; rm -rf of
#            100,000 keys.
#
#   meta     restart at scale: 100,000 and 1,000,000 keys (64-byte values put
#            by kvfs-bench through the ioctl path): recovery and mount-ready
#            seconds after a clean stop and after a kill -9, and the daemon's
#            DRAM per key (resident bytes next to an empty store's, values
#            evicted).
#
#   cow      copy-on-write per extent: 4 KiB random writes into a sealed
#            1 GiB file, each its own version (open, pwrite, close), in a
#            DRAM-only kvfs next to /dev/shm: versions/s and pool.cow_bytes
#            per write; fio sequential write (4 x 64 MiB) with its default
#            fallocate next to --fallocate=none; then the 4 KiB versions
#            with an SSD tier, each fsync'ed: SSD bytes written per version
#            (the untouched extents' records are shared, not written).
#
#   rados    the shared tier (issue 10) on the one-host test cluster
#            (scripts/ceph-cluster.sh), with kvfs-bench (256 blocks of 32 x
#            64 KiB, 16 requests on 4 threads): ioctl puts on node A (with
#            --rados-sync: until the cluster has them) next to a kvfs
#            without the tier; cold gets of those blocks on node B (every
#            byte from the cluster) through the ioctl path, and on node E
#            through POSIX reads, 16 requests in flight, next to `rados
#            bench seq` of 2 MiB objects, 16 in flight, on the same pool; gets of local blocks
#            (DRAM hits) with the tier on next to off.
#
#   vllm     the vLLM connector (scripts/bench_vllm.py): decode steps that save
#            blocks next to the same steps not saving; a 32-layer,
#            1,000-block prefix loaded through the connector next to
#            kvfs-bench gets of the same bytes (shm and proc regions; 7
#            rounds, medians); the lookup of a 4,000-block prompt (p50,
#            p99); a hit loaded asynchronously, by a step that waits for
#            it, and layer by layer, in turn (medians of 3).
#
#   uring    FUSE over io_uring (--uring=on) next to the /dev/fuse loop
#            (--uring=off), the same binary, 3 rounds alternating, fresh
#            mounts, medians: fio O_DIRECT 4 KiB random reads (1 and 2
#            jobs) and 1 MiB sequential reads and writes, create+close,
#            cold stat and rm -rf of min(--keys, 100000) keys, kvfs-bench
#            batches of 1 and 16 4-KiB keys (put, lookup p50/p99, get),
#            512 KiB values only on the SSD read whole (O_DIRECT); and
#            libfuse's passthrough_ll example over tmpfs (built here from
#            Debian's libfuse3-dev examples), 4 KiB random reads, as a generic
#            FUSE daemon. Sets enable_uring for the run and puts it back.
#
#   scripts/bench.sh [dram] [ssd] [ioctl] [gc] [meta] [cow] [rados] [vllm] [uring] [--keys=N]  (default: every part)
# KVFS_BIN=PATH runs another kvfs binary (a "before" build) instead of build/kvfs.
# KVFS_BENCH_DIR=DIR puts the data directories (and the baselines' files) on
# DIR's filesystem instead of the checkout's: to compare filesystems or
# mount options (an ext4 mounted with `discard` trims every removed bucket
# at its journal's commits; see README, "Compaction").
# Needs root (mounts, drop_caches).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/deps.sh
kvfs_install_deps
parts=() keys=100000
for a in "$@"; do
	case $a in
	dram | ssd | ioctl | gc | meta | cow | rados | vllm | uring) parts+=("$a") ;;
	--keys=*) keys=${a#*=} ;;
	*) echo "bench.sh: unknown argument '$a'" >&2; exit 2 ;;
	esac
done
[ ${#parts[@]} -gt 0 ] || parts=(dram ssd ioctl gc meta cow rados vllm uring)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVFS_CUDA=OFF -DKVFS_FAULTS=OFF >/dev/null # no crash points
cmake --build build -j"$(nproc)" --target kvfs kvfs-bench kvfs_shared >/dev/null

work=$(mktemp -d "${KVFS_BENCH_DIR:-$root}/.bench.XXXXXX") # on DATA_DIR's filesystem, like ./kvfs-data
shm=$(mktemp -d /dev/shm/kvfs-bench.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && { fusermount3 -u "$work/mnt" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	rm -rf "$work" "$shm"
}
trap cleanup EXIT

# mount_kvfs ARGS...: starts kvfs on $work/data at $work/mnt, waits until it
# serves and its pool is faulted in.
mount_kvfs() {
	mkdir -p "$work/mnt"
	"${KVFS_BIN:-build/kvfs}" -f "$@" "$work/data" "$work/mnt" 2>>"$work/log" &
	pid=$!
	for _ in $(seq 600); do mountpoint -q "$work/mnt" && [ -e "$work/mnt/.kvfs/stats" ] && break; sleep 0.1; done
	mountpoint -q "$work/mnt" || { cat "$work/log"; exit 1; }
	local want
	want=$(awk '/^mem_size/ {print int($3 / 1048576 * 0.95)}' "$work/mnt/.kvfs/config")
	for _ in $(seq 600); do
		[ "$(awk '/VmRSS/ {print int($2 / 1024)}' /proc/$pid/status)" -ge "$want" ] && break
		sleep 0.1
	done
}

umount_kvfs() {
	fusermount3 -u "$work/mnt"
	wait "$pid"
	pid=
}

# fio_bw DIR RW DIRECT COLD NRFILES FILESIZE JOBS [FSYNC] -> MiB/s (all jobs).
# COLD=1 drops the page cache first (and lets fio drop the files' pages), so
# a read reaches the filesystem; COLD=0 keeps it. FSYNC=1: the files are
# synced at the end, within the time. One file open per job at a time.
fio_bw() {
	if [ "$4" = 1 ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
	fio --name=bench --invalidate="$4" --fallocate=none --directory="$1" --rw="$2" --bs=1M \
		--direct="$3" --end_fsync="${8:-0}" \
		--nrfiles="$5" --filesize="$6" --numjobs="$7" --openfiles=1 \
		--file_service_type=sequential --ioengine=psync --group_reporting \
		--filename_format='b.$jobnum.$filenum' --output-format=json |
		python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]
print("%.0f" % ((j["write"]["bw_bytes"] + j["read"]["bw_bytes"]) / 2**20))'
}

row() { # LABEL KVFS_MIBS BASE_MIBS
	printf '%-40s %10s %10s %8s\n' "$1" "$2" "$3" "$(python3 -c "print('%.2f' % ($2 / $3))")"
}

bench_dram() {
	local f=4 s=256m j=2 k b
	mount_kvfs --mem-size=2560M --ssd-size=0
	printf '\n%-34s %10s %10s %8s\n' "DRAM: fio $j jobs x $f x $s" "kvfs MiB/s" "shm MiB/s" ratio
	k=$(fio_bw "$work/mnt" write 0 0 $f $s $j); b=$(fio_bw "$shm" write 0 0 $f $s $j)
	row "seq write, page cache" "$k" "$b"
	k=$(fio_bw "$work/mnt" read 0 1 $f $s $j); b=$(fio_bw "$shm" read 0 1 $f $s $j)
	row "seq read cold, page cache" "$k" "$b"
	k=$(fio_bw "$work/mnt" read 0 0 $f $s $j); b=$(fio_bw "$shm" read 0 0 $f $s $j)
	row "seq read warm, page cache" "$k" "$b"
	rm -f "$work"/mnt/b.* "$shm"/b.*
	k=$(fio_bw "$work/mnt" write 1 0 $f $s $j); b=$(fio_bw "$shm" write 0 0 $f $s $j)
	row "seq write, O_DIRECT" "$k" "$b"
	k=$(fio_bw "$work/mnt" read 1 1 $f $s $j); b=$(fio_bw "$shm" read 0 1 $f $s $j)
	row "seq read, O_DIRECT" "$k" "$b"
	umount_kvfs
	rm -rf "$work/data" "$shm"/b.*
}

bench_ssd() {
	local f=64 s=16m j=1 k b t0 t1 secs
	mkdir -p "$work/direct"
	mount_kvfs --mem-size=256M
	printf '\n%-34s %10s %10s %8s\n' "SSD: fio 1 GiB = 4x a 256M pool" "kvfs MiB/s" "disk MiB/s" ratio
	k=$(fio_bw "$work/mnt" write 1 0 $f $s $j); b=$(fio_bw "$work/direct" write 1 0 $f $s $j)
	row "seq write (kvfs O_DIRECT)" "$k" "$b"
	k=$(fio_bw "$work/mnt" read 1 1 $f $s $j); b=$(fio_bw "$work/direct" read 1 1 $f $s $j)
	row "seq read from SSD (kvfs O_DIRECT)" "$k" "$b"
	k=$(fio_bw "$work/mnt" read 0 1 $f $s $j)
	row "seq read from SSD (kvfs buffered)" "$k" "$b"
	rm -f "$work"/mnt/b.* "$work"/direct/b.*
	# One file 4x the pool: it spills to the SSD while it is written.
	k=$(fio_bw "$work/mnt" write 1 0 1 1024m 1); b=$(fio_bw "$work/direct" write 1 0 1 1024m 1)
	row "one 1 GiB file: seq write" "$k" "$b"
	# The disk's own rate swings by 2-3x between runs here: 3 rounds, alternating, and
	# the median of their ratios.
	local ratios=() r
	for r in 1 2 3; do
		k=$(fio_bw "$work/mnt" read 1 1 1 1024m 1); b=$(fio_bw "$work/direct" read 1 1 1 1024m 1)
		row "one 1 GiB file: seq read ($r/3)" "$k" "$b"
		ratios+=("$(python3 -c "print($k / $b)")")
	done
	printf '%-34s %30.2f\n' "one 1 GiB file: seq read, median" \
		"$(printf '%s\n' "${ratios[@]}" | sort -g | sed -n 2p)"
	python3 -c "import json; d=json.load(open('$work/mnt/.kvfs/stats')); print('  tier:', d['tier'])"
	umount_kvfs
	rm -rf "$work/data" "$work/direct"

	mount_kvfs --mem-size=256M
	echo "restart: creating $keys keys ..."
	python3 - "$work/mnt" "$keys" <<'PY'
import os, sys
mnt, n = sys.argv[1], int(sys.argv[2])
for d in range(100):
    os.mkdir(os.path.join(mnt, "d%02d" % d))
for i in range(n):
    with open(os.path.join(mnt, "d%02d" % (i % 100), "k%06d" % i), "wb") as f:
        f.write(b"%064d" % i)
PY
	umount_kvfs
	t0=$(date +%s.%N)
	mount_kvfs --mem-size=256M
	t1=$(date +%s.%N)
	secs=$(python3 -c "import json; d=json.load(open('$work/mnt/.kvfs/stats')); print(d['recovery']['seconds'], d['recovery']['keys'])")
	echo "restart with $keys keys: recovery ${secs% *} s for ${secs#* } keys; mount ready in $(python3 -c "print('%.2f' % ($t1 - $t0))") s"
	umount_kvfs
}

# kvfs_bench FIELD ARGS... -> FIELD of the last scenario kvfs-bench reports (exits on a failure).
kvfs_bench() {
	local field=$1 out
	shift
	out=$(build/kvfs-bench --json "$@") || { echo "kvfs-bench $* failed: $out" >&2; exit 1; }
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])["scenarios"][-1][sys.argv[2]])' \
		"$out" "$field"
}

best() { python3 -c 'import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))' "$1" "$2"; }

bench_ioctl() {
	local shape=(--layers=32 --layer-bytes=64K --blocks=16 --requests=32) sc k b
	mount_kvfs --mem-size=4G --ssd-size=0
	mkdir "$work/mnt/io" "$work/mnt/px" "$work/mnt/look"
	printf '\n%-34s %10s %10s %8s\n' "ioctl: 2 MiB blocks, 16 per request" "ioctl MiB/s" \
		"posix MiB/s" ratio
	for sc in write get; do
		[ $sc = write ] || { sync; echo 3 >/proc/sys/vm/drop_caches; }
		k=$(kvfs_bench mib_s "${shape[@]}" --threads=2 --scenario=$sc --path=ioctl "$work/mnt/io")
		b=$(kvfs_bench mib_s "${shape[@]}" --threads=2 --scenario=$sc --path=posix "$work/mnt/px")
		row "$sc, 2 threads" "$k" "$b"
	done
	rm -rf "$work/mnt/px"
	printf '%-34s %10s %10s %8s\n' "DRAM-resident get vs memcpy" "get MiB/s" "memcpy MiB/s" ratio
	k=0 b=0
	for _ in 1 2 3; do # alternated, best of 3 each: other tenants' noise only slows a run
		k=$(best "$k" "$(kvfs_bench mib_s "${shape[@]}" --threads=1 --scenario=get \
			--path=ioctl "$work/mnt/io")")
		b=$(best "$b" "$(kvfs_bench mib_s "${shape[@]}" --threads=1 --scenario=memcpy \
			"$work/mnt/io")")
	done
	row "ioctl get, 1 thread (best of 3)" "$k" "$b"
	kvfs_bench mib_s --layers=1 --layer-bytes=4K --blocks=1000 --requests=20 --scenario=write \
		"$work/mnt/look" >/dev/null
	printf '%-34s %10s %10s %8s\n' "1,000 names per request, cold" "lookup us" "stat us" speedup
	echo 2 >/proc/sys/vm/drop_caches
	k=$(kvfs_bench p50_us --layers=1 --layer-bytes=4K --blocks=1000 --requests=20 \
		--scenario=is_exist --path=ioctl "$work/mnt/look")
	echo 2 >/proc/sys/vm/drop_caches
	b=$(kvfs_bench p50_us --layers=1 --layer-bytes=4K --blocks=1000 --requests=20 \
		--scenario=is_exist --path=posix "$work/mnt/look")
	printf '%-34s %10s %10s %8s\n' "batch lookup vs stat() (p50)" "$k" "$b" \
		"$(python3 -c "print('%.1f' % ($b / $k))")"
	b=$(kvfs_bench p50_us --layers=1 --layer-bytes=4K --blocks=1000 --requests=20 \
		--scenario=is_exist --path=posix "$work/mnt/look")
	printf '%-34s %10s %10s %8s\n' "... stat() on cached dentries" "$k" "$b" \
		"$(python3 -c "print('%.1f' % ($b / $k))")"
	umount_kvfs
	rm -rf "$work/data"
}

# fio_lat DIR BS SECONDS NRFILES FILESIZE -> "p50_us p99_us" of O_DIRECT random reads.
fio_lat() {
	fio --name=lat --directory="$1" --rw=randread --bs="$2" --direct=1 --ioengine=psync \
		--runtime="$3" --time_based --nrfiles="$4" --filesize="$5" --openfiles=16 \
		--filename_format='r.$jobnum.$filenum' --invalidate=0 --output-format=json |
		python3 -c 'import json,sys; p=json.load(sys.stdin)["jobs"][0]["read"]["clat_ns"]["percentile"]
print("%.0f %.0f" % (p["50.000000"] / 1e3, p["99.000000"] / 1e3))'
}

# gc_stat FIELD -> a field of the "gc" stats section
gc_stat() {
	python3 -c "import json; print(json.load(open('$work/mnt/.kvfs/stats'))['gc']['$1'])"
}

# make_garbage DIR NFILES SIZE EVERY: writes NFILES files, syncs, deletes all but every EVERY-th
make_garbage() {
	python3 - "$@" <<'PY'
import os, sys
d, n, size, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(d, exist_ok=True)
buf = os.urandom(size)
for i in range(n):
    with open(os.path.join(d, "g%06d" % i), "wb") as f:
        f.write(buf)
fd = os.open(os.path.dirname(d), os.O_RDONLY)
os.fsync(fd)
for i in range(n):
    if i % every:
        os.unlink(os.path.join(d, "g%06d" % i))
os.fsync(fd)
os.close(fd)
PY
}

bench_gc() {
	local k b l4i l4p l4g l4q l1i l1p l1g l1q t0 t1 c0 c1 s0 s1 w0 w1 g0 g1
	mkdir -p "$work/direct"
	mount_kvfs --mem-size=128M --bucket-size=16M --gc=off
	mkdir "$work/mnt/r"
	fio --name=fill --directory="$work/mnt/r" --rw=write --bs=1M --direct=1 --nrfiles=512 --openfiles=1 \
		--filesize=1m --filename_format='r.$jobnum.$filenum' --output-format=json >/dev/null
	fsync_root() { python3 -c "import os; fd=os.open('$work/mnt', os.O_RDONLY); os.fsync(fd)"; }
	fsync_root
	printf '\n%-40s %10s %10s %8s\n' "GC: fio randread O_DIRECT, 512 x 1 MiB" "during gc" "idle" ratio
	# Three rounds per read size, each with its own garbage (2 GiB in 256 KiB keys,
	# every other one deleted: every bucket a victim): reads while nothing else runs,
	# then while a forced pass runs flat out. Medians: the disk's own latency wanders.
	local r bs lat4="" lat1="" gcs=0 gcb=0 gcpid
	for r in 1 2 3; do
		for bs in 4k 1m; do
			make_garbage "$work/mnt/g" 8192 262144 2
			l4i=$(fio_lat "$work/mnt/r" $bs 2 512 1m)
			c0=$(gc_stat bytes_copied); s0=$(gc_stat seconds)
			echo gc >"$work/mnt/.kvfs/ctl" &
			gcpid=$!
			l4g=$(fio_lat "$work/mnt/r" $bs 2 512 1m)
			wait $gcpid
			c1=$(gc_stat bytes_copied); s1=$(gc_stat seconds)
			gcs=$(python3 -c "print($gcs + $s1 - $s0)"); gcb=$((gcb + c1 - c0))
			[ $bs = 4k ] && lat4="$lat4 $l4i $l4g" || lat1="$lat1 $l4i $l4g"
			rm -rf "$work/mnt/g"
			echo gc >"$work/mnt/.kvfs/ctl" # the round's outputs, now dead: not the next round's work
		done
	done
	# median [idle p50, idle p99, gc p50, gc p99] of the rounds' "p50 p99 p50 p99"
	med() { python3 -c 'import statistics as s, sys; v=[float(x) for x in sys.argv[1:]]
print(" ".join("%.0f" % s.median(v[i::4]) for i in range(4)))' "$@"; }
	read -r l4i l4p l4g l4q < <(med $lat4)
	read -r l1i l1p l1g l1q < <(med $lat1)
	row "random 4 KiB read p50 (us)" "$l4g" "$l4i"
	row "random 4 KiB read p99 (us)" "$l4q" "$l4p"
	row "random 1 MiB read p50 (us)" "$l1g" "$l1i"
	row "random 1 MiB read p99 (us)" "$l1q" "$l1p"
	echo "  (medians of 3 rounds; rounds (idle p50 p99, gc p50 p99): 4 KiB$lat4; 1 MiB$lat1)"
	echo "  (the passes ran $(python3 -c "print('%.2f' % $gcs)") s," \
		"copying $(python3 -c "print('%.0f' % ($gcb / 2**20 / max($gcs, 1e-9)))") MiB/s beside the reads)"
	# The copy rate alone: a pass with nothing else running, next to direct writes
	# of the same bytes in the same round, without and with a sync at the end;
	# three rounds, the median ratio of each.
	local rates="" drates="" all="" d
	for r in 1 2 3; do
		make_garbage "$work/mnt/g" 12288 262144 2
		c0=$(gc_stat bytes_copied); s0=$(gc_stat seconds)
		echo gc >"$work/mnt/.kvfs/ctl"
		c1=$(gc_stat bytes_copied); s1=$(gc_stat seconds)
		k=$(python3 -c "print('%.0f' % (($c1 - $c0) / 2**20 / max($s1 - $s0, 1e-9)))")
		sync # the trims of files removed before are not the writes' to wait for
		b=$(fio_bw "$work/direct" write 1 0 64 16m 1)
		rm -rf "$work/direct"/*
		sync
		d=$(fio_bw "$work/direct" write 1 0 64 16m 1 1)
		rates="$rates $k $b" drates="$drates $k $d" all="$all $k/$b/$d"
		rm -rf "$work/direct"/* "$work/mnt/g"
		# untimed: drops this round's outputs (all dead now), so that the next
		# round's pass copies its own garbage and removes nothing else
		echo gc >"$work/mnt/.kvfs/ctl"
	done
	# "GC BASE" of the round whose ratio is the median, of "GC BASE ..." pairs
	median_round() { python3 -c 'import statistics as s, sys; v=[float(x) for x in sys.argv[1:]]
r=[v[i]/v[i+1] for i in range(0, len(v), 2)]; i=r.index(s.median(r)); print("%.0f %.0f" % (v[2*i], v[2*i+1]))' "$@"; }
	printf '%-40s %10s %10s %8s\n' "" "gc MiB/s" "disk MiB/s" ratio
	read -r k b < <(median_round $rates)
	row "compaction copy rate vs direct write" "$k" "$b"
	read -r k d < <(median_round $drates)
	row "  vs direct write + fsync at the end" "$k" "$d"
	echo "  (the rounds with the median ratios; rounds (gc/disk/disk + fsync MiB/s):$all)"
	rm -rf "$work/direct"
	echo gc >"$work/mnt/.kvfs/ctl"

	# write amplification of the 75%-delete scenario: 1 GiB put, 3/4 deleted, one pass
	w0=$(python3 -c "import json; print(json.load(open('$work/mnt/.kvfs/stats'))['ssd']['bytes_written'])")
	g0=$(gc_stat bytes_copied)
	make_garbage "$work/mnt/w" 4096 262144 4
	echo gc >"$work/mnt/.kvfs/ctl"
	w1=$(python3 -c "import json; print(json.load(open('$work/mnt/.kvfs/stats'))['ssd']['bytes_written'])")
	g1=$(gc_stat bytes_copied)
	echo "write amplification, 1 GiB put, 75% deleted, one pass: $(python3 -c "print('%.3f' % (($w1 - $w0 + $g1 - $g0) / ($w1 - $w0)))") (bytes to buckets / bytes put)"
	umount_kvfs
	rm -rf "$work/data"

	mount_kvfs --mem-size=256M
	for d in "$work/mnt" "$work"; do
		python3 - "$d" "$keys" <<'PY'
import os, sys
mnt, n = sys.argv[1], int(sys.argv[2])
os.mkdir(os.path.join(mnt, "rm"))
for d in range(100):
    os.mkdir(os.path.join(mnt, "rm", "d%02d" % d))
for i in range(n):
    with open(os.path.join(mnt, "rm", "d%02d" % (i % 100), "k%06d" % i), "wb") as f:
        f.write(b"%064d" % i)
fd = os.open(mnt, os.O_RDONLY)
os.fsync(fd)
PY
	done
	sync
	t0=$(date +%s.%N); rm -rf "$work/mnt/rm"; t1=$(date +%s.%N)
	k=$(python3 -c "print('%.2f' % ($t1 - $t0))")
	t0=$(date +%s.%N); rm -rf "$work/rm"; t1=$(date +%s.%N)
	b=$(python3 -c "print('%.2f' % ($t1 - $t0))")
	printf '%-40s %10s %10s %8s\n' "" "kvfs s" "disk fs s" ratio
	row "rm -rf of $keys keys in 100 dirs" "$k" "$b"
	umount_kvfs
	rm -rf "$work/data"
}

# start_timed VAR OPTS...: starts kvfs on $work/data (pid set, as mount_kvfs does) and times
# it until it serves, not waiting for the pool to be faulted in as mount_kvfs does; sets the
# array VAR to (recovery_s keys ready_s rss_kib).
start_timed() {
	local -n res=$1
	local t0 t1
	shift
	mkdir -p "$work/mnt"
	t0=$(date +%s.%N)
	"${KVFS_BIN:-build/kvfs}" -f "$@" "$work/data" "$work/mnt" >>"$work/log" 2>&1 &
	pid=$!
	until [ -e "$work/mnt/.kvfs/stats" ]; do
		kill -0 "$pid" 2>/dev/null || { cat "$work/log"; exit 1; }
		sleep 0.005
	done
	t1=$(date +%s.%N)
	sleep 1 # the pool's pages settle
	res=($(python3 -c "import json; r=json.load(open('$work/mnt/.kvfs/stats'))['recovery']
print(r['seconds'], r['keys'], '%.3f' % ($t1 - $t0))") $(awk '/VmRSS/ {print $2}' "/proc/$pid/status"))
}

# cow_writes DIR N -> "versions/s cow_bytes_per_write": N 4 KiB writes at
# random 4 KiB-aligned offsets of DIR/big (1 GiB, sealed), each in its own
# open/pwrite/close, so each makes a new version.
cow_writes() {
	python3 - "$1" "$2" <<'PY'
import json, os, random, sys, time
d, n = sys.argv[1], int(sys.argv[2])
p = os.path.join(d, "big")
st = os.path.join(d, ".kvfs", "stats")
cow = lambda: json.load(open(st))["pool"].get("cow_bytes", -1) if os.path.exists(st) else 0
rnd = random.Random(1)
buf = os.urandom(4096)
c0, t0 = cow(), time.monotonic()
for _ in range(n):
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, buf, rnd.randrange(1 << 18) * 4096)
    os.close(fd)
t = time.monotonic() - t0
c = cow()
print("%.0f %s" % (n / t, "%.0f" % ((c - c0) / n) if c0 >= 0 and c >= 0 else "n/a"))
PY
}

bench_cow() {
	local k b kc n=200
	mount_kvfs --mem-size=2560M --ssd-size=0
	printf '\n%-34s %10s %10s %8s\n' "copy-on-write, 1 GiB sealed file" "kvfs" "shm" ratio
	head -c 1G /dev/urandom >"$work/mnt/big"
	cp "$work/mnt/big" "$shm/big"
	read -r k kc <<<"$(cow_writes "$work/mnt" $n)"
	read -r b _ <<<"$(cow_writes "$shm" $n)"
	row "4 KiB write+close, versions/s" "$k" "$b"
	echo "  pool.cow_bytes per 4 KiB write: $kc (one extent: $((2 << 20)))"
	rm -f "$work/mnt/big" "$shm/big"
	printf '\n%-34s %10s %10s %8s\n' "fio seq write 4 x 64 MiB" "fallocate" "none" ratio
	k=$(fio --name=bench --directory="$work/mnt" --rw=write --bs=1M --nrfiles=4 --filesize=64m \
		--ioengine=psync --output-format=json | python3 -c 'import json,sys
print("%.0f" % (json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"] / 2**20))')
	rm -f "$work"/mnt/bench.*
	b=$(fio --name=bench --directory="$work/mnt" --rw=write --bs=1M --nrfiles=4 --filesize=64m \
		--fallocate=none --ioengine=psync --output-format=json | python3 -c 'import json,sys
print("%.0f" % (json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"] / 2**20))')
	row "MiB/s, default fallocate vs none" "$k" "$b"
	umount_kvfs
	rm -rf "$work/data"

	# The same with an SSD tier: fallocate reserves SSD quota, the offload fills it.
	mount_kvfs --mem-size=2560M
	printf '\n%-34s %10s %10s %8s\n' "fio seq write 4 x 64 MiB, SSD tier" "fallocate" "none" ratio
	k=$(fio --name=bench --directory="$work/mnt" --rw=write --bs=1M --nrfiles=4 --filesize=64m \
		--ioengine=psync --end_fsync=1 --output-format=json | python3 -c 'import json,sys
print("%.0f" % (json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"] / 2**20))')
	rm -f "$work"/mnt/bench.*
	b=$(fio --name=bench --directory="$work/mnt" --rw=write --bs=1M --nrfiles=4 --filesize=64m \
		--fallocate=none --ioengine=psync --end_fsync=1 --output-format=json | python3 -c 'import json,sys
print("%.0f" % (json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"] / 2**20))')
	row "MiB/s, default fallocate vs none" "$k" "$b"
	umount_kvfs
	rm -rf "$work/data"

	# The same small changes with an SSD tier, each version fsync'ed: what reaches the SSD.
	mount_kvfs --mem-size=2560M
	head -c 1G /dev/urandom >"$work/mnt/big"
	python3 - "$work/mnt" <<'PY'
import json, os, random, sys, time
d = sys.argv[1]
p, st = os.path.join(d, "big"), os.path.join(d, ".kvfs", "stats")
stats = lambda: json.load(open(st))
fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)
rnd, buf, n = random.Random(1), os.urandom(4096), 50
w0, s0, t0 = stats()["ssd"]["bytes_written"], stats()["tier"].get("shared_bytes", 0), time.monotonic()
for _ in range(n):
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, buf, rnd.randrange(1 << 18) * 4096)
    os.fsync(fd)
    os.close(fd)
t = time.monotonic() - t0
w, s = stats()["ssd"]["bytes_written"], stats()["tier"].get("shared_bytes", 0)
print("with an SSD tier, 4 KiB write+fsync+close into a sealed 1 GiB file: %.0f versions/s,"
      % (n / t))
print("  SSD bytes written per version: %.0f (the value: %d, one extent: %d); shared: %.0f"
      % ((w - w0) / n, 1 << 30, 2 << 20, (s - s0) / n))
PY
	umount_kvfs
	rm -rf "$work/data"
}

bench_meta() {
	local n
	local -a empty crash clean
	rm -rf "$work/data"
	start_timed empty --mem-size=256M
	umount_kvfs
	printf '\n%-12s %12s %12s %12s %12s %12s\n' "meta: keys" "crash rec s" "crash ready" \
		"clean rec s" "clean ready" "DRAM B/key"
	for n in 100000 1000000; do
		rm -rf "$work/data"
		mount_kvfs --mem-size=256M
		mkdir "$work/mnt/m0" "$work/mnt/m1" "$work/mnt/m2" "$work/mnt/m3"
		for d in 0 1 2 3; do
			kvfs_bench keys --layers=1 --layer-bytes=64 --blocks=250 --requests=$((n / 1000)) \
				--threads=2 --scenario=write "$work/mnt/m$d" >/dev/null
		done
		python3 -c "import os; os.fsync(os.open('$work/mnt', os.O_RDONLY))"
		# kill -9: the next start replays a journal PUT per key, then writes a checkpoint
		kill -9 "$pid"
		wait "$pid" 2>/dev/null || true
		fusermount3 -u -z "$work/mnt"
		start_timed crash --mem-size=256M
		umount_kvfs
		# a clean stop wrote the checkpoint: the next start reads it and nothing else
		start_timed clean --mem-size=256M
		[ "${crash[1]}" = "$n" ] && [ "${clean[1]}" = "$n" ] ||
			{ echo "meta: recovered ${crash[1]} and ${clean[1]} keys, not $n" >&2; exit 1; }
		printf '%-12s %12s %12s %12s %12s %12s\n' "$n" "${crash[0]}" "${crash[2]}" \
			"${clean[0]}" "${clean[2]}" \
			"$(python3 -c "print('%.0f' % ((${clean[3]} - ${empty[3]}) * 1024 / $n))")"
		umount_kvfs
	done
	rm -rf "$work/data"
}

# kb_mibs NODE SCENARIO PATH [THREADS]: kvfs-bench on $work/NODE/m/x, 256 keys
# of 2 MiB (32 layers x 64 KiB) in 16 requests on THREADS (4) threads -> MiB/s.
# kb_mibs NODE SCENARIO PATH [THREADS] [DIR] -> MiB/s of kvfs-bench in NODE's mount, DIR (x)
kb_mibs() {
	build/kvfs-bench --requests=16 --blocks=16 --threads="${4:-4}" --scenario="$2" --path="$3" --json \
		"$work/$1/m/${5:-x}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["scenarios"][0]["mib_s"])'
}

# median of the numbers on stdin
median() {
	sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

bench_rados() {
	local c="$work/ceph" bin="${KVFS_BIN:-build/kvfs}" pids=() m
	if ! "$bin" --version | grep -q 'rados librados' || ! scripts/ceph-cluster.sh install >/dev/null; then
		echo "rados: no librados build or no Ceph here: skipped"
		return 0
	fi
	KVFS_CEPH_MEM=4G scripts/ceph-cluster.sh start "$c" >/dev/null
	. "$c/env"
	local rados_=(rados -c "$CEPH_CONF" -p "$KVFS_CEPH_POOL")
	local tier=(--mem-size=1G "--rados-pool=$KVFS_CEPH_POOL" "--rados-conf=$CEPH_CONF" --rados-sync)
	for m in a s b e o; do
		mkdir -p "$work/$m/m"
		if [ $m = o ]; then
			"$bin" -f --mem-size=1G "$work/$m/d" "$work/$m/m" 2>>"$work/log" &
		elif [ $m = s ]; then # no --rados-sync: puts go to the cluster in the background
			"$bin" -f "${tier[@]:0:3}" --rados-namespace=s "$work/$m/d" "$work/$m/m" 2>>"$work/log" &
		else
			"$bin" -f "${tier[@]}" "$work/$m/d" "$work/$m/m" 2>>"$work/log" &
		fi
		pids+=($!)
	done
	for m in a s b e o; do
		for _ in $(seq 300); do
			[ -e "$work/$m/m/.kvfs/stats" ] && { [ $m = o ] ||
				grep -q '"state": "connected"' "$work/$m/m/.kvfs/stats"; } && break
			sleep 0.1
		done
	done
	mkdir "$work/a/m/x" "$work/s/m/x" "$work/o/m/x"
	local put_on put_bg put_off seq_bw cold_ioctl cold_posix local_on local_off r ri=() rp=()
	# Puts: tier off (O), background (S) and --rados-sync (A: each request
	# returns once the cluster has it), 512 MiB each. O and S alternate in 3
	# rounds of fresh keys (the first write into a new pool pays its page
	# faults); medians. A writes once: the keys read cold below.
	local po=() pb=() d
	po+=("$(kb_mibs o write ioctl)")
	pb+=("$(kb_mibs s write ioctl)")
	put_on=$(kb_mibs a write ioctl)
	# A's blocks are its own: local hits, measured before more writes fill
	# the pools. A get of 512 MiB from DRAM takes ~0.1 s: the median of 5,
	# alternating, so that one TTL check of the directory (one cluster read
	# per second) is seen at its real weight.
	local on=() off=()
	for _ in 1 2 3 4 5; do on+=("$(kb_mibs a get ioctl)"); off+=("$(kb_mibs o get ioctl)"); done
	local_on=$(printf '%s\n' "${on[@]}" | sort -n | sed -n 3p)
	local_off=$(printf '%s\n' "${off[@]}" | sort -n | sed -n 3p)
	for d in p2 p3; do
		mkdir "$work/o/m/$d" "$work/s/m/$d"
		po+=("$(kb_mibs o write ioctl 4 $d)")
		pb+=("$(kb_mibs s write ioctl 4 $d)")
	done
	put_off=$(printf '%s\n' "${po[@]}" | median)
	put_bg=$(printf '%s\n' "${pb[@]}" | median)
	for _ in $(seq 600); do grep -q '"backlog": 0,' "$work/s/m/.kvfs/stats" && break; sleep 0.1; done
	# Cold reads, in 3 rounds of fresh keys (this cluster's own rate swings 2x
	# between runs): each round's rados bench seq next to B's cold ioctl gets
	# and E's cold POSIX reads of keys A just wrote; the medians of the ratios.
	for r in 1 2 3; do
		[ $r = 1 ] || { mkdir "$work/a/m/x$r"; kb_mibs a write ioctl 4 "x$r" >/dev/null; }
		"${rados_[@]}" bench 2 write -b 2097152 -t 16 --no-cleanup >"$work/rb.w" 2>&1
		sync; echo 3 >/proc/sys/vm/drop_caches
		"${rados_[@]}" bench 10 seq -t 16 >"$work/rb.r" 2>&1
		"${rados_[@]}" cleanup >/dev/null 2>&1
		seq_bw=$(awk '/^Bandwidth/ {print $3}' "$work/rb.r") # rados bench's "MB" are MiB
		cold_ioctl=$(kb_mibs b get ioctl 16 "x${r#1}")
		cold_posix=$(kb_mibs e get posix 16 "x${r#1}")
		echo "  round $r: rados bench seq $seq_bw MiB/s, cold ioctl get $cold_ioctl, cold posix read $cold_posix"
		ri+=("$(python3 -c "print($cold_ioctl / $seq_bw)")")
		rp+=("$(python3 -c "print($cold_posix / $seq_bw)")")
	done
	grep -q '"hits": 768,' "$work/b/m/.kvfs/stats" || { echo "rados: B did not bring every key in" >&2; exit 1; }
	printf '\n%-40s %10s %10s %8s\n' "rados: 256 x 2 MiB blocks (32 layers)" "kvfs MiB/s" "base" "ratio"
	row "ioctl put, --rados-sync vs tier off" "$put_on" "$put_off"
	row "ioctl put, tier on (background) vs off" "$put_bg" "$put_off"
	printf '%-40s %10s %10s %8s\n' "cold ioctl get on B vs rados bench seq" "(median" "of 3)" \
		"$(printf '%s\n' "${ri[@]}" | median | xargs printf '%.2f')"
	printf '%-40s %10s %10s %8s\n' "cold posix read on E vs rados bench seq" "(median" "of 3)" \
		"$(printf '%s\n' "${rp[@]}" | median | xargs printf '%.2f')"
	row "local ioctl get, tier on vs off (median)" "$local_on" "$local_off"
	for m in a s b e o; do fusermount3 -u "$work/$m/m"; done
	wait "${pids[@]}"
	scripts/ceph-cluster.sh stop "$c" >/dev/null
}

bench_vllm() {
	mount_kvfs --mem-size=4G --ssd-size=0
	printf '\nvLLM connector (scripts/bench_vllm.py):\n'
	PYTHONHASHSEED=0 PYTHONPATH="$root/client/python:$root/tests/integration" \
		KVFS_LIB="$root/build/client/libkvfs.so" /usr/bin/python3 scripts/bench_vllm.py \
		"$work/mnt" build/kvfs-bench
	umount_kvfs
	rm -rf "$work/data"
}

# fio_iops DIR RW BS JOBS -> IOPS: O_DIRECT, psync, 5 s over the 64 files of 8 MiB
# the jobs share (u.N, laid out by fio_layout).
fio_iops() {
	fio --name=bench --directory="$1" --rw="$2" --bs="$3" --numjobs="$4" --direct=1 \
		--nrfiles=64 --size=512m --openfiles=64 --file_service_type=random \
		--ioengine=psync --time_based --runtime=5 --group_reporting --fallocate=none \
		--filename_format='u.$filenum' --output-format=json |
		python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]
print("%.0f" % (j["read"]["iops"] + j["write"]["iops"]))'
}

# uring_round MODE OUT: one round of every figure on a fresh mount with --uring=MODE,
# appended to OUT as "figure value" lines.
uring_round() {
	local mode=$1 out=$2 n b t0 t1
	mount_kvfs --uring="$mode" --mem-size=1536M --ssd-size=0
	python3 -c "import json; t=json.load(open('$work/mnt/.kvfs/stats'))['fuse']['transport']
assert t == ('io_uring' if '$mode' == 'on' else 'dev_fuse'), t"
	# 1 MiB sequential writes lay out the files the reads use
	echo "seq_write_1m_mib_s $(fio_bw "$work/mnt" write 1 0 64 8m 1)" >>"$out"
	fio --name=bench --directory="$work/mnt" --rw=write --bs=1m --direct=1 --nrfiles=64 \
		--size=512m --fallocate=none --filename_format='u.$filenum' --output=/dev/null
	echo "seq_read_1m_mib_s $(fio_bw "$work/mnt" read 1 1 64 8m 1)" >>"$out"
	echo "randread_4k_1job_iops $(fio_iops "$work/mnt" randread 4k 1)" >>"$out"
	echo "randread_4k_2jobs_iops $(fio_iops "$work/mnt" randread 4k 2)" >>"$out"
	for b in 1 16; do
		mkdir -p "$work/mnt/kb$b"
		build/kvfs-bench --scenario=all --path=ioctl --blocks=$b --layers=1 --layer-bytes=4K \
			--requests=$((4000 / b)) --json "$work/mnt/kb$b" | python3 -c "
import json, sys
for s in json.load(sys.stdin)['scenarios']:
    k = 'kvfs_bench_b${b}_' + s['scenario']
    if s['bytes']:
        print(k + '_mib_s', s['mib_s'])
    print(k + '_p50_us', s['p50_us'])
    print(k + '_p99_us', s['p99_us'])" >>"$out"
	done
	n=$((keys < 100000 ? keys : 100000))
	python3 - "$work/mnt/meta" "$n" >>"$out" <<'PY'
import os, sys, time
top, n = sys.argv[1], int(sys.argv[2])
os.mkdir(top)
for d in range(100):
    os.mkdir(os.path.join(top, "d%02d" % d))
names = [os.path.join(top, "d%02d" % (i % 100), "k%06d" % i) for i in range(n)]
t = time.monotonic()
for p in names:
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
print("create_close_keys_s", n / (time.monotonic() - t))
with open("/proc/sys/vm/drop_caches", "w") as f:
    f.write("2")  # the kernel forgets the names: each stat asks the daemon
t = time.monotonic()
for p in names:
    os.stat(p)
print("stat_cold_keys_s", n / (time.monotonic() - t))
PY
	t0=$(date +%s.%N)
	rm -rf "$work/mnt/meta"
	t1=$(date +%s.%N)
	echo "rm_rf_keys_s $(python3 -c "print($n / ($t1 - $t0))")" >>"$out"
	umount_kvfs
	rm -rf "$work/data"
}

# uring_ssd_round MODE OUT: values only on the SSD read whole (O_DIRECT, 512 KiB
# each: over io_uring straight from the bucket into the ring's buffer), MiB/s.
uring_ssd_round() {
	local mode=$1 out=$2
	mount_kvfs --uring="$mode" --mem-size=128M --bucket-size=16M
	python3 - "$work/mnt" >>"$out" <<'PY'
import json, mmap, os, sys, time
mnt, n, size = sys.argv[1], 768, 512 * 1024
data = os.urandom(size)
for i in range(n):  # 384 MiB through a 128 MiB pool: the first ones leave DRAM
    with open(os.path.join(mnt, "v%04d" % i), "wb") as f:
        f.write(data)
def tier(i):
    return os.getxattr(os.path.join(mnt, "v%04d" % i), "user.kvfs.tier").decode()
ssd = [i for i in range(n // 2) if tier(i) == "ssd"]
buf = mmap.mmap(-1, size)
t = time.monotonic()
for i in ssd:
    fd = os.open(os.path.join(mnt, "v%04d" % i), os.O_RDONLY | os.O_DIRECT)
    assert os.readv(fd, [buf]) == size
    os.close(fd)
print("ssd_whole_value_read_512k_mib_s", len(ssd) * size / 2**20 / (time.monotonic() - t))
PY
	umount_kvfs
	rm -rf "$work/data"
}

bench_uring() {
	local param=/sys/module/fuse/parameters/enable_uring was r mode pt_pid
	printf '\nFUSE over io_uring (--uring=on) next to the /dev/fuse loop (--uring=off):\n'
	if [ ! -e "$param" ]; then
		echo "  skipped: this kernel has no FUSE over io_uring ($param is missing)"
		return
	fi
	was=$(cat "$param")
	echo Y >"$param"
	for r in 1 2 3; do
		for mode in off on; do
			uring_round "$mode" "$work/uring.$mode"
			uring_ssd_round "$mode" "$work/uring.$mode"
		done
	done
	echo "$was" >"$param"
	# a generic FUSE daemon: libfuse's passthrough_ll example over tmpfs
	gcc -O2 -o "$work/passthrough_ll" /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c \
		$(pkg-config --cflags --libs fuse3)
	mkdir -p "$shm/pt" "$work/pt"
	"$work/passthrough_ll" -f -o source="$shm/pt" "$work/pt" 2>/dev/null &
	pt_pid=$!
	for _ in $(seq 100); do mountpoint -q "$work/pt" && break; sleep 0.1; done
	fio --name=bench --directory="$work/pt" --rw=write --bs=1m --direct=1 --nrfiles=64 \
		--size=512m --fallocate=none --filename_format='u.$filenum' --output=/dev/null
	for r in 1 2 3; do
		echo "randread_4k_1job_iops $(fio_iops "$work/pt" randread 4k 1)" >>"$work/uring.pt"
	done
	fusermount3 -u "$work/pt"
	wait "$pt_pid" || true
	python3 - "$work/uring.on" "$work/uring.off" "$work/uring.pt" <<'PY'
import statistics, sys
def load(p):
    d = {}
    for line in open(p):
        k, v = line.split()
        d.setdefault(k, []).append(float(v))
    return {k: statistics.median(v) for k, v in d.items()}
on, off, pt = (load(p) for p in sys.argv[1:])
print("  %-36s %12s %12s %8s" % ("median of 3 rounds", "io_uring", "/dev/fuse", "ratio"))
for k in on:
    lower = k.endswith("_us")  # latencies: lower is better, the ratio is off / on
    r = off[k] / on[k] if lower else on[k] / off[k]
    print("  %-36s %12.1f %12.1f %7.2fx%s" % (k, on[k], off[k], r, " (lower is better)" if lower else ""))
k = "randread_4k_1job_iops"
print("  %-36s %12.1f %12s %7.2fx (io_uring / passthrough_ll over tmpfs)"
      % ("passthrough_ll " + k, pt[k], "", on[k] / pt[k]))
PY
}

for p in "${parts[@]}"; do "bench_$p"; done
