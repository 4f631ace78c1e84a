#!/usr/bin/env bash
# A one-host Ceph test cluster for the RADOS tier's tests: one monitor and one
# OSD on the memstore object store, one pool of size 1, no authentication,
# loopback only, from Debian's packages (ceph-mon, ceph-osd, librados-dev;
# ceph-common, which they pull in, brings the rados and ceph commands).
# Everything lives in DIR; no systemd, nothing under /etc or /var/lib.
#
#   scripts/ceph-cluster.sh install       install what is missing (root), or
#                                         exit 77 saying why it cannot
#   scripts/ceph-cluster.sh start DIR     make DIR, start the cluster, wait
#                                         until a pool serves I/O, print
#                                         CEPH_CONF=DIR/ceph.conf and
#                                         KVFS_CEPH_POOL=POOL (also in DIR/env)
#   scripts/ceph-cluster.sh stop DIR      stop the OSD, then the monitor
#                                         (SIGTERM, SIGKILL after a grace)
#   scripts/ceph-cluster.sh osd-stop DIR  stop the OSD alone (clean: memstore
#                                         saves its objects to DIR/osd)
#   scripts/ceph-cluster.sh osd-start DIR start it again, wait for I/O
#   scripts/ceph-cluster.sh status DIR    which daemons run (exit 0 if both)
#   scripts/ceph-cluster.sh logs DIR      the tails of the daemons' logs
#
# Environment:
#   KVFS_CEPH_PORT       the monitor's port (default: the first free one of
#                        16789, 16889, ...); the OSD binds PORT+1..PORT+99
#   KVFS_CEPH_POOL       the pool's name (default kvfs)
#   KVFS_CEPH_MEM        memstore size in bytes or with K/M/G (default 1G); a
#                        full memstore makes writes hang, hence the client
#                        timeouts below
#   KVFS_CEPH_TIMEOUT    seconds to wait for I/O to work (default 60)
#   KVFS_CEPH_OP_TIMEOUT rados_osd_op_timeout / rados_mon_op_timeout /
#                        client_mount_timeout written into ceph.conf for
#                        clients (default 10)
#   KVFS_CEPH_OWNER_PID  when set at start, a watcher stops the cluster once
#                        that process is gone (a test killed with SIGKILL
#                        leaves no daemons behind)
#   KVFS_CEPH_OWNER_RMDIR =1: that watcher also removes DIR
#
# Exit status: 0 done, 1 failed (the daemons' log tails are printed), 2 bad
# usage, 77 Ceph is not installed and cannot be installed here.
set -euo pipefail

CEPH_PKGS=(ceph-mon ceph-osd librados-dev)
SKIP=77

die() {
	echo "ceph-cluster: $*" >&2
	exit 1
}

usage() {
	sed -n '/^#   scripts.ceph-cluster.sh install/,/^#   scripts.ceph-cluster.sh logs/p' "$0" |
		sed 's/^# \{0,1\}//' >&2
	exit 2
}

# Installs the packages that are missing. Returns 0 when all are there,
# SKIP (with the reason on stderr) when they are not and cannot be.
ceph_install() {
	local missing=() p
	for p in "${CEPH_PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if ! command -v apt-get >/dev/null; then
		echo "ceph-cluster: ${missing[*]} missing and there is no apt-get" >&2
		return $SKIP
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "ceph-cluster: ${missing[*]} missing and installing them needs root" >&2
		return $SKIP
	fi
	echo "ceph-cluster: installing ${missing[*]}" >&2
	local log
	log=$(mktemp /tmp/ceph-apt.XXXXXX)
	if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >"$log" 2>&1 ||
		{ DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$log" 2>&1 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--no-install-recommends "${missing[@]}" >>"$log" 2>&1; }; }; then
		echo "ceph-cluster: apt-get could not install ${missing[*]}:" >&2
		tail -n 5 "$log" >&2
		rm -f "$log"
		return $SKIP
	fi
	rm -f "$log"
}

# True when something listens on TCP port $1 (IPv4 or IPv6, any address).
port_busy() {
	local hex
	hex=$(printf ':%04X' "$1")
	awk -v p="$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
		END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_port() {
	if [ -n "${KVFS_CEPH_PORT:-}" ]; then
		! port_busy "$KVFS_CEPH_PORT" || die "port $KVFS_CEPH_PORT (KVFS_CEPH_PORT) is in use"
		echo "$KVFS_CEPH_PORT"
		return
	fi
	local p
	for p in $(seq 16789 100 19789); do
		if ! port_busy "$p" && ! port_busy $((p + 1)); then
			echo "$p"
			return
		fi
	done
	die "no free port block in 16789..19889 (set KVFS_CEPH_PORT)"
}

to_bytes() {
	local s=$1
	case "$s" in
	*[kK]) echo $((${s%?} << 10)) ;;
	*[mM]) echo $((${s%?} << 20)) ;;
	*[gG]) echo $((${s%?} << 30)) ;;
	*) echo $((s)) ;;
	esac
}

# The ceph CLI against DIR's cluster, bounded in time.
cephc() {
	timeout 20 ceph -c "$dir/ceph.conf" --connect-timeout 10 "$@"
}

# True while process $1 exists and is not a zombie.
running() {
	local st
	st=$(awk '{ sub(/.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

pid_of() { # mon|osd: prints the pid when that daemon runs
	local f="$dir/run/$1.pid" pid
	[ -s "$f" ] || return 1
	pid=$(cat "$f")
	running "$pid" || return 1
	echo "$pid"
}

# Runs a daemon in the foreground (-f), detached from this shell (own
# session, stdin closed), its stdout/stderr in DIR/log/NAME.out, its pid in
# DIR/run/NAME.pid.
spawn() { # name, command...
	local name=$1
	shift
	setsid "$@" -f </dev/null >>"$dir/log/$name.out" 2>&1 &
	echo $! >"$dir/run/$name.pid"
}

# SIGTERM, then SIGKILL after $2 seconds.
kill_daemon() { # mon|osd, grace
	local pid i
	pid=$(pid_of "$1") || {
		rm -f "$dir/run/$1.pid"
		return 0
	}
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < $2 * 10; i++)); do
		running "$pid" || break
		sleep 0.1
	done
	if running "$pid"; then
		echo "ceph-cluster: $1 (pid $pid) ignored SIGTERM for $2 s, killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			running "$pid" || break
			sleep 0.1
		done
	fi
	rm -f "$dir/run/$1.pid"
}

show_logs() {
	local f
	for f in "$dir"/log/*; do
		[ -s "$f" ] || continue
		echo "----- tail of $f -----" >&2
		tail -n 25 "$f" >&2
	done
}

fail_start() {
	echo "ceph-cluster: $*" >&2
	show_logs
	stop_all
	exit 1
}

# Waits until a put/get round trip through the pool works.
wait_io() {
	local pool deadline probe
	pool=$(cat "$dir/pool")
	deadline=$((SECONDS + ${KVFS_CEPH_TIMEOUT:-60}))
	probe="$dir/run/probe"
	echo "kvfs ceph-cluster probe $$" >"$probe"
	while :; do
		if timeout 10 rados -c "$dir/ceph.conf" -p "$pool" put ceph-cluster-probe "$probe" \
			2>/dev/null &&
			timeout 10 rados -c "$dir/ceph.conf" -p "$pool" get ceph-cluster-probe \
				"$probe.back" 2>/dev/null &&
			cmp -s "$probe" "$probe.back"; then
			timeout 10 rados -c "$dir/ceph.conf" -p "$pool" rm ceph-cluster-probe \
				2>/dev/null || true
			rm -f "$probe" "$probe.back"
			return 0
		fi
		pid_of mon >/dev/null || return 1
		pid_of osd >/dev/null || return 1
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.2
	done
}

write_conf() { # port
	local port=$1 mem fsid
	mem=$(to_bytes "${KVFS_CEPH_MEM:-1G}")
	fsid=$(cat /proc/sys/kernel/random/uuid)
	local t=${KVFS_CEPH_OP_TIMEOUT:-10}
	cat >"$dir/ceph.conf" <<EOF
# A one-host test cluster made by scripts/ceph-cluster.sh; not for production.
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
public network = 127.0.0.0/8
ms bind msgr1 = false
ms bind ipv6 = false
ms bind port min = $((port + 1))
ms bind port max = $((port + 99))
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
log to stderr = false
err to stderr = false
log to syslog = false
crash dir = $dir/crash
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
mon warn on osd down out interval zero = false
# clients never wait forever (a full memstore makes writes hang)
rados osd op timeout = $t
rados mon op timeout = $t
client mount timeout = $t

[mon]
mon data = $dir/mon
# The disk reports little room free to non-root users: without these the
# monitor refuses to start.
mon data avail warn = 1
mon data avail crit = 0
# Commit monitor state at once: start-up takes ~1.5 s instead of ~5 s.
paxos propose interval = 0.01
paxos min wait = 0.01
mon osd down out interval = 0

[osd]
osd data = $dir/osd
osd objectstore = memstore
memstore device bytes = $mem
osd op num shards = 2
osd op num threads per shard = 1
osd crush update on start = true
# A clean stop (SIGTERM) saves memstore's objects to osd data, so a restarted
# OSD has them: fast shutdown would skip that.
osd fast shutdown = false
osd max object name len = 2048
EOF
}

start_mon() {
	spawn mon ceph-mon -c "$dir/ceph.conf" -i a
}

start_osd() {
	spawn osd ceph-osd -c "$dir/ceph.conf" -i 0
}

start_all() {
	local port pool osd_uuid
	[ ! -e "$dir/ceph.conf" ] || die "$dir already holds a cluster (stop it and remove $dir)"
	ceph_install || exit $?
	mkdir -p "$dir"/{mon,osd,run,log,crash}
	dir=$(cd "$dir" && pwd)
	port=$(pick_port)
	pool=${KVFS_CEPH_POOL:-kvfs}
	echo "$pool" >"$dir/pool"
	write_conf "$port"

	monmaptool --create --fsid "$(awk '/^fsid/ {print $3}' "$dir/ceph.conf")" \
		--addv a "[v2:127.0.0.1:$port]" "$dir/run/monmap" >/dev/null ||
		fail_start "monmaptool failed"
	ceph-mon -c "$dir/ceph.conf" --mkfs -i a --monmap "$dir/run/monmap" \
		>>"$dir/log/mon.out" 2>&1 || fail_start "ceph-mon --mkfs failed"
	start_mon
	if [ -n "${KVFS_CEPH_OWNER_PID:-}" ]; then
		watch_owner "$KVFS_CEPH_OWNER_PID"
	fi

	osd_uuid=$(cat /proc/sys/kernel/random/uuid)
	cephc osd new "$osd_uuid" 0 >/dev/null 2>>"$dir/log/setup.out" ||
		fail_start "the monitor did not answer (ceph osd new)"
	ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" \
		>>"$dir/log/osd.out" 2>&1 || fail_start "ceph-osd --mkfs failed"
	start_osd
	cephc osd pool create "$pool" 8 8 >/dev/null 2>>"$dir/log/setup.out" ||
		fail_start "ceph osd pool create $pool failed"
	cephc osd pool application enable "$pool" kvfs >/dev/null 2>>"$dir/log/setup.out" ||
		true
	wait_io || fail_start "no I/O through pool $pool within ${KVFS_CEPH_TIMEOUT:-60} s"
	printf 'CEPH_CONF=%s\nKVFS_CEPH_POOL=%s\n' "$dir/ceph.conf" "$pool" | tee "$dir/env"
}

# A detached watcher: once process $1 is gone, stops the cluster (and with
# KVFS_CEPH_OWNER_RMDIR=1 removes DIR); exits early when DIR is removed.
watch_owner() {
	local owner=$1 self
	self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
	# shellcheck disable=SC2016 # expanded by the inner shell
	setsid bash -c '
		while [ -e "/proc/$1" ] && ! grep -q "^State:[[:space:]]*Z" "/proc/$1/status"; do
			[ -d "$2" ] || exit 0
			sleep 1
		done
		[ -d "$2" ] || exit 0
		"$3" stop "$2"
		[ "$4" != 1 ] || rm -rf "$2"
	' ceph-cluster-watch "$owner" "$dir" "$self" "${KVFS_CEPH_OWNER_RMDIR:-0}" \
		</dev/null >/dev/null 2>&1 &
}

stop_all() {
	kill_daemon osd 20
	kill_daemon mon 10
}

cmd=${1:-}
case "$cmd" in
install)
	ceph_install
	exit $?
	;;
start | stop | osd-stop | osd-start | status | logs)
	[ $# -eq 2 ] || usage
	dir=$2
	;;
*) usage ;;
esac

case "$cmd" in
start) start_all ;;
stop)
	[ -d "$dir" ] || exit 0
	stop_all
	;;
osd-stop) kill_daemon osd 20 ;;
osd-start)
	[ -e "$dir/ceph.conf" ] || die "no cluster in $dir"
	pid_of osd >/dev/null && exit 0
	start_osd
	wait_io || {
		show_logs
		die "no I/O within ${KVFS_CEPH_TIMEOUT:-60} s after restarting the OSD"
	}
	;;
status)
	rc=0
	for d in mon osd; do
		if pid=$(pid_of $d); then
			echo "$d: running (pid $pid)"
		else
			echo "$d: stopped"
			rc=1
		fi
	done
	exit $rc
	;;
logs) show_logs ;;
esac
