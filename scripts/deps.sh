#!/usr/bin/env bash
# Installs the Debian packages kvfs needs to build, run and test, when any
# is missing. Sourced by run.sh and test.sh; runs apt-get only if needed.
kvfs_install_deps() {
	local pkgs=(build-essential cmake pkg-config fuse3 libfuse3-dev libnuma-dev
		libxxhash-dev libaio-dev libcmocka-dev librados-dev libmicrohttpd-dev libsystemd-dev liburing-dev
		systemd scdoc debhelper dh-python lintian python3 python3-venv python3-torch python3-prometheus-client fio attr
		rsync stress-ng universal-ctags)
	local missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "kvfs: installing ${missing[*]}" >&2
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null
}

# Prints the CUDA toolkit's root (CUDA_HOME, CUDA_PATH, /usr/local/cuda, or
# where nvcc is on PATH), or nothing when there is none. The toolkit is not
# a Debian package here: it is found, never installed.
kvfs_cuda_root() {
	local d
	for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
		if [ -n "$d" ] && [ -x "$d/bin/nvcc" ]; then
			echo "$d"
			return
		fi
	done
	if command -v nvcc >/dev/null; then
		dirname "$(dirname "$(command -v nvcc)")"
	fi
}
