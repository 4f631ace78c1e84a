#!/usr/bin/env bash
# Builds kvfs's Debian packages (debian/: kvfs, libkvfs0, libkvfs-dev,
# python3-kvfs) from a clean copy of the tree, with dpkg-buildpackage -us
# -uc -b, then checks them with lintian: any error fails the script.
#
#   scripts/package.sh [OUTDIR]     (default: build-deb/)
#
# The copy holds what git knows of (tracked files, and new files git does
# not ignore) as they are in the working tree, so nothing a build or a mount
# left in the checkout gets in. OUTDIR receives the .deb files, the
# .changes and .buildinfo, build.log and lintian.txt. DEB_BUILD_OPTIONS is passed on
# (nocheck skips the unit tests, parallel=N sets the build's jobs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/deps.sh
kvfs_install_deps
out=$(realpath -m "${1:-build-deb}")
mkdir -p "$out"
work=$(mktemp -d /tmp/kvfs-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT

src="$work/kvfs"
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard |
	rsync -a --from0 --files-from=- ./ "$src/"
export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-parallel=$(nproc)}"
echo "== dpkg-buildpackage -us -uc -b (in $src; DEB_BUILD_OPTIONS=$DEB_BUILD_OPTIONS)"
rc=0
(cd "$src" && dpkg-buildpackage -us -uc -b) >"$out/build.log" 2>&1 || rc=$?
if [ $rc -ne 0 ]; then
	tail -60 "$out/build.log" >&2
	echo "package.sh: dpkg-buildpackage failed (log above; all of it in $out/build.log)" >&2
	exit 1
fi
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
cp "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out/"
changes=$(ls "$out"/*.changes)

echo "== lintian $(basename "$changes")"
# Exit status 2 is lintian's "errors found" (with --fail-on error); the
# whole report is kept, and printed, either way.
lintian --fail-on error --info --display-info "$changes" >"$out/lintian.txt" 2>&1 || rc=$?
cat "$out/lintian.txt"
if [ $rc -ne 0 ]; then
	echo "package.sh: lintian found errors (exit $rc)" >&2
	exit 1
fi
echo "== packages in $out:"
ls -1 "$out"/*.deb
