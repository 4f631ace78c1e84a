# SPDX-License-Identifier: MIT
"""The Debian packages as an operator meets them, on this machine:

- scripts/package.sh builds kvfs, libkvfs0, libkvfs-dev and python3-kvfs
  from a clean copy of the checkout (dpkg-buildpackage -us -uc -b, with
  DEB_BUILD_OPTIONS=nocheck: the unit tests ran in this suite already) and
  lintian finds no error in them;
- apt-get installs the four .deb files; `mount -t fuse.kvfs DATA MNT -o
  mem_size=128M` mounts a kvfs (the fstab path: mount.fuse3 finds the
  installed kvfs on the PATH);
- examples/c/roundtrip.c, as installed in /usr/share/kvfs/examples, built
  with `pkg-config --cflags --libs kvfs` alone, runs on that mount with the
  installed libkvfs;
- the installed Python package, imported from / with no PYTHONPATH and no
  KVFS_LIB, does a put and a get on the mount, with libkvfs from /usr/lib;
- after umount and `dpkg --purge`, dpkg knows none of the packages and no
  file or directory the packages brought is left under /usr or /etc.

It changes the machine (it installs and purges packages), so it skips,
saying why, where it cannot do that cleanly: not root, no dpkg-buildpackage
or apt-get, not a git checkout (package.sh copies what git knows of), or a
kvfs package already installed here (it would replace the operator's)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvfstest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
PACKAGES = ("kvfs", "libkvfs0", "libkvfs-dev", "python3-kvfs")


def run(cmd, env=None, cwd=None, timeout=300, check=True):
    """Runs cmd; returns (status, output); raises AssertionError with the
    output when check and it failed."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    out = r.stdout.decode(errors="replace")
    if check and r.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(cmd), r.returncode, out[-6000:]))
    return r.returncode, out


def installed_status(pkg):
    """dpkg's status of pkg ('install ok installed', ...), or '' if unknown."""
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    return r.stdout.decode().strip() if r.returncode == 0 else ""


def user_env(**extra):
    """The environment of a user outside the checkout: nothing of ctest's
    PYTHONPATH and KVFS_LIB, nothing pointing into the build."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "KVFS_LIB", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH",
                        "PKG_CONFIG_LIBDIR", "CMAKE_PREFIX_PATH")}
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env.update(extra)
    return env


def serves(pid, mnt):
    """Whether process pid runs /usr/bin/kvfs with mnt among its arguments."""
    try:
        exe = os.readlink("/proc/%s/exe" % pid)
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    return exe == "/usr/bin/kvfs" and mnt in args


def tree(*tops):
    """Every path (files, links and directories) under tops."""
    out = set()
    for top in tops:
        for d, dirs, files in os.walk(top):
            out.add(d)
            out.update(os.path.join(d, f) for f in files)
            out.update(os.path.join(d, x) for x in dirs if os.path.islink(os.path.join(d, x)))
    return out


class Package(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("not root: installing packages needs root")
        for tool in ("dpkg-buildpackage", "apt-get", "lintian", "git", "pkg-config"):
            if not shutil.which(tool):
                self.skipTest("%s is not installed (scripts/deps.sh installs it)" % tool)
        if run(["git", "-C", ROOT, "rev-parse", "--is-inside-work-tree"], check=False)[0] != 0:
            self.skipTest("%s is not a git checkout: package.sh copies what git knows of" % ROOT)
        here = [p for p in PACKAGES if installed_status(p).endswith(" installed")]
        if here:
            self.skipTest("kvfs packages are installed on this machine already (%s): the test "
                          "would replace and then purge them" % ", ".join(here))
        self.work = tempfile.mkdtemp(prefix="kvfs-it-package-", dir="/tmp")
        os.chmod(self.work, 0o755)
        self.addCleanup(shutil.rmtree, self.work, True)

    def purge(self):
        run(["dpkg", "--purge"] + list(PACKAGES), env=user_env(DEBIAN_FRONTEND="noninteractive"),
            check=False)

    def test_round_trip(self):
        out = os.path.join(self.work, "debs")
        env = user_env(DEB_BUILD_OPTIONS="nocheck parallel=%d" % (os.cpu_count() or 1))
        run([os.path.join(ROOT, "scripts", "package.sh"), out], env=env, cwd=ROOT, timeout=900)
        with open(os.path.join(out, "lintian.txt")) as f:
            lint = f.read()
        self.assertNotRegex(lint, r"(?m)^E: ", "lintian errors")
        debs = {}
        for p in PACKAGES:
            hits = [f for f in os.listdir(out) if re.match(r"^%s_[^_]+_[a-z0-9]+\.deb$"
                                                            % re.escape(p), f)]
            self.assertEqual(len(hits), 1, "%s: %s" % (p, sorted(os.listdir(out))))
            debs[p] = os.path.join(out, hits[0])

        before = tree("/usr", "/etc")
        self.addCleanup(self.purge)
        run(["apt-get", "install", "-y", "--no-install-recommends"] + list(debs.values()),
            env=user_env(DEBIAN_FRONTEND="noninteractive"))
        for p in PACKAGES:
            self.assertEqual(installed_status(p), "install ok installed", p)
        files = set()
        for p in PACKAGES:
            files.update(ln for ln in run(["dpkg", "-L", p])[1].splitlines()
                         if ln.startswith("/"))
        libdir = "/usr/lib/" + run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"])[1].strip()
        for f in ("/usr/bin/kvfs", "/usr/bin/kvfs-bench", "/usr/share/man/man8/kvfs.8.gz",
                  "/lib/systemd/system/kvfs@.service", libdir + "/libkvfs.so.0",
                  libdir + "/pkgconfig/kvfs.pc", "/usr/include/kvfs/kvfs.h",
                  "/usr/lib/python3/dist-packages/kvfs/vllm.py",
                  "/usr/share/kvfs/examples/c/roundtrip.c"):
            self.assertIn(f, files)
            self.assertTrue(os.path.lexists(f), f)

        # where kvfs@NAME.service reads NAME.conf: the package makes it
        self.assertIn("/etc/kvfs", files)
        self.assertTrue(os.path.isdir("/etc/kvfs"))

        self.mount_and_use(libdir)

        run(["dpkg", "--purge"] + list(PACKAGES), env=user_env(DEBIAN_FRONTEND="noninteractive"))
        for p in PACKAGES:
            self.assertIn(installed_status(p), ("", "unknown ok not-installed"), p)
            rc, listing = run(["dpkg", "-L", p], check=False)
            self.assertNotEqual(rc, 0, "dpkg -L %s after purge:\n%s" % (p, listing))
        # what dpkg listed: no file or link is left (a directory is checked
        # below where the packages made it: /usr/bin and the like are not theirs)
        left = sorted(f for f in files
                      if os.path.lexists(f) and not os.path.isdir(f))
        self.assertEqual(left, [], "files of the packages left after the purge")
        new = sorted(tree("/usr", "/etc") - before)
        # Only what the packages brought counts: a __pycache__ another
        # program's import wrote meanwhile is not theirs.
        new = [p for p in new if "kvfs" in p or "__pycache__" not in p]
        self.assertEqual(new, [], "paths under /usr or /etc that were not there before")

    def mount_and_use(self, libdir):
        data = os.path.join(self.work, "data")
        mnt = os.path.join(self.work, "mnt")
        os.mkdir(data)
        os.mkdir(mnt)
        env = user_env()
        run(["mount", "-t", "fuse.kvfs", data, mnt, "-o", "mem_size=128M"], env=env, timeout=60)
        self.addCleanup(self.unmount, mnt)
        with open("/proc/self/mounts") as f:
            types = [ln.split()[2] for ln in f if ln.split()[1] == mnt]
        self.assertEqual(types, ["fuse.kvfs"])
        pids = [pid for pid in os.listdir("/proc") if pid.isdigit() and serves(pid, mnt)]
        self.assertEqual(len(pids), 1, "one installed /usr/bin/kvfs serves the mount")

        # C: the installed example, built with pkg-config alone.
        flags = run(["pkg-config", "--cflags", "--libs", "kvfs"], env=env)[1].split()
        self.assertIn("-lkvfs", flags)
        exe = os.path.join(self.work, "roundtrip")
        run(["cc", "-Wall", "-Wextra", "-Werror", "-o", exe,
             "/usr/share/kvfs/examples/c/roundtrip.c"] + flags, env=env, cwd=self.work)
        d = os.path.join(mnt, "c")
        os.mkdir(d)
        out = run([exe, d], env=env, cwd="/")[1]
        self.assertIn("host memory: round trip ok", out)
        self.assertEqual(len(os.listdir(os.path.join(d, "example-host"))), 4)
        # (/lib is /usr/lib on a merged-/usr system: paths compared resolved)
        want = os.path.realpath("%s/libkvfs.so.0" % libdir)
        got = re.search(r"libkvfs\.so\.0 => (\S+)", run(["ldd", exe], env=env)[1])
        self.assertTrue(got, "roundtrip is not linked to libkvfs.so.0")
        self.assertEqual(os.path.realpath(got.group(1)), want)

        # Python: the installed package from /, found by the interpreter and
        # finding libkvfs through the dynamic linker.
        py = (
            "import sys, kvfs\n"
            "with kvfs.Client(sys.argv[1]) as c:\n"
            "    r = c.put_buffers([('py/a', b'packaged' * 1000)], flags=kvfs.PUT_MKDIR)\n"
            "    assert r.ok == 1, r.errors()\n"
            "    out = bytearray(8000)\n"
            "    g = c.get_into([('py/a', out)])\n"
            "    assert g.ok == 1 and bytes(out) == b'packaged' * 1000, g.errors()\n"
            "print('module', kvfs.__file__)\n"
            "print('maps', ' '.join(sorted({l.split()[-1] for l in open('/proc/self/maps')\n"
            "                               if 'libkvfs' in l})))\n")
        out = run(["/usr/bin/python3", "-c", py, mnt], env=env, cwd="/")[1]
        self.assertEqual(re.search(r"^module (.*)$", out, re.M).group(1),
                         "/usr/lib/python3/dist-packages/kvfs/__init__.py")
        maps = re.search(r"^maps (.*)$", out, re.M).group(1).split()
        self.assertTrue(maps, "no libkvfs mapped")
        for p in maps:
            self.assertEqual(os.path.realpath(p), want, p)
        with open(os.path.join(mnt, "py", "a"), "rb") as f:
            self.assertEqual(f.read(), b"packaged" * 1000)

        self.unmount(mnt)
        with open("/proc/self/mounts") as f:
            self.assertNotIn(mnt, [ln.split()[1] for ln in f])
        # the daemon exits once unmounted (it would hold the binary the
        # purge removes): wait for it, bounded
        for pid in pids:
            kvfstest.wait_until(lambda: not os.path.exists("/proc/%s" % pid), timeout=30,
                                what="installed kvfs %s to exit after umount" % pid)

    @staticmethod
    def unmount(mnt):
        with open("/proc/self/mounts") as f:
            if mnt in [ln.split()[1] for ln in f]:
                subprocess.run(["umount", mnt], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    kvfstest.main()
