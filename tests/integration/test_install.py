# SPDX-License-Identifier: MIT
"""`cmake --install` as a user of kvfs meets it: the build under test (the
folder of --kvfs) installed with --prefix /usr into a temporary DESTDIR,
and then only that tree used:

- the layout: kvfs and kvfs-bench in bin/, libkvfs.so.0 with its SONAME,
  libkvfs.so and libkvfs.a, the headers, kvfs.pc, the CMake package, the
  Python package, the man pages and the examples;
- the installed `kvfs --version` runs and names the project's version;
- examples/c/roundtrip.c (as installed under share/) built with
  `pkg-config --cflags --libs kvfs` (PKG_CONFIG_SYSROOT_DIR and
  PKG_CONFIG_LIBDIR in the DESTDIR) and with a CMake project that asks
  find_package(kvfs) (CMAKE_PREFIX_PATH in the DESTDIR), against
  kvfs::kvfs and kvfs::kvfs_static, each run on a mounted kvfs and taking
  libkvfs from the DESTDIR;
- the installed Python package imported from outside the checkout, with
  KVFS_LIB naming the installed libkvfs.so.0 and with KVFS_LIB unset (the
  dynamic linker finds it), doing a put and a get;
- every long option of `kvfs --help` is in the generated kvfs(8), each
  setting with its -o and KVFS_* forms, and every option of
  `kvfs-bench --help` in kvfs-bench(1) (skipped, saying so, when the build
  found no scdoc)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvfstest  # noqa: E402

DEST = None  # the DESTDIR everything was installed into (setUpModule)
PREFIX = "/usr"


def build_dir():
    """The build folder of the kvfs under test, where CMakeCache.txt is."""
    return os.path.dirname(kvfstest.KVFS)


def cache():
    """The build's CMakeCache.txt as a dict NAME -> value."""
    out = {}
    with open(os.path.join(build_dir(), "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.+-]+):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


def run(cmd, env=None, cwd=None, timeout=120):
    """Runs cmd; returns its output; raises AssertionError with it on failure."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                       timeout=timeout)
    out = r.stdout.decode(errors="replace")
    if r.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(cmd), r.returncode, out))
    return out


def installed(suffix):
    """The one installed file whose path ends with /suffix (the libdir may be
    lib/ or lib/<multiarch>/: the tests do not guess it)."""
    hits = []
    for d, _, files in os.walk(DEST):
        for f in files:
            p = os.path.join(d, f)
            if p.endswith("/" + suffix):
                hits.append(p)
    if len(hits) != 1:
        raise AssertionError("installed %s: %d files, expected 1: %s" % (suffix, len(hits), hits))
    return hits[0]


def clean_env(**extra):
    """The environment a user outside the checkout has: nothing of ctest's
    PYTHONPATH and KVFS_LIB, nothing pointing into the build."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "KVFS_LIB", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH",
                        "CMAKE_PREFIX_PATH")}
    env.update(extra)
    return env


def loaded_from(pid_maps_text, name):
    """Paths of mapped files named `name` in a /proc/PID/maps text."""
    return sorted({line.split()[-1] for line in pid_maps_text.splitlines()
                   if line.split() and line.split()[-1].endswith("/" + name)})


def setUpModule():
    global DEST
    c = cache()
    if c.get("KVFS_SANITIZE"):
        raise unittest.SkipTest("a sanitizer build (KVFS_SANITIZE=%s): its libkvfs needs the "
                                "sanitizer runtime loaded first in every client"
                                % c["KVFS_SANITIZE"])
    DEST = tempfile.mkdtemp(prefix="kvfs-it-install-", dir="/tmp")
    os.chmod(DEST, 0o755)
    env = dict(os.environ, DESTDIR=DEST)
    run([c.get("CMAKE_COMMAND", "cmake"), "--install", build_dir(), "--prefix", PREFIX], env=env)


def tearDownModule():
    if DEST:
        shutil.rmtree(DEST, ignore_errors=True)


class Layout(unittest.TestCase):
    def test_files(self):
        usr = os.path.join(DEST, PREFIX.lstrip("/"))
        for exe in ("kvfs", "kvfs-bench"):
            p = os.path.join(usr, "bin", exe)
            self.assertTrue(os.access(p, os.X_OK), p)
        so0 = installed("libkvfs.so.0")
        self.assertTrue(os.path.islink(so0), "libkvfs.so.0 is the SONAME link")
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(so0), "libkvfs.so")))
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(so0), "libkvfs.a")))
        for f in ("include/kvfs/kvfs.h", "include/kvfs/kvfs_ioctl.h", "pkgconfig/kvfs.pc",
                  "cmake/kvfs/kvfsConfig.cmake", "cmake/kvfs/kvfsConfigVersion.cmake",
                  "kvfs/__init__.py", "kvfs/vllm.py", "kvfs/blocks.py",
                  "share/kvfs/examples/c/roundtrip.c", "share/kvfs/examples/fio/seq.fio"):
            installed(f)
        if shutil.which("readelf"):
            dyn = run(["readelf", "-d", so0])
            self.assertIn("Library soname: [libkvfs.so.0]", dyn)
            self.assertNotRegex(dyn, r"RPATH|RUNPATH")
            # the version script: only kvfs_* is exported, under KVFS_0
            syms = run(["readelf", "--dyn-syms", "-W", so0])
            exported = [ln.split()[-1] for ln in syms.splitlines()
                        if " GLOBAL " in ln and " UND " not in ln]
            self.assertTrue(exported)
            for s in exported:
                self.assertRegex(s, r"^kvfs_[a-z]\w*@@KVFS_0$|^KVFS_0$", s)

    def test_version(self):
        want = cache()["CMAKE_PROJECT_VERSION"]
        exe = os.path.join(DEST, PREFIX.lstrip("/"), "bin", "kvfs")
        out = run([exe, "--version"], env=clean_env())
        self.assertRegex(out, r"^kvfs %s\b" % re.escape(want))


def man_text(page):
    """A generated man page from the DESTDIR as plain text (roff's font
    changes and escapes of '-' undone), or a skip when this build has no man
    pages."""
    if cache().get("SCDOC", "").endswith("NOTFOUND") or not cache().get("SCDOC"):
        raise unittest.SkipTest("scdoc was not found when the build was configured: no man "
                                "pages to check (install scdoc)")
    with open(installed("man%s/%s" % (page[-1], page))) as f:
        text = f.read()
    return re.sub(r"\\f[BIRP]", "", text).replace("\\-", "-").replace("\\&", "")


class ManPages(unittest.TestCase):
    def test_kvfs_8_has_every_option(self):
        man = man_text("kvfs.8")
        help_ = kvfstest.kvfs_help()
        longs = sorted(set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", help_)))
        self.assertIn("mem-size", longs)
        missing = [o for o in longs if not re.search(r"(?<![\w-])--%s(?![\w-])" % o, man)]
        self.assertEqual(missing, [], "options of kvfs --help missing from kvfs(8)")
        # every setting (a long option taking a value) in its -o and environment forms
        settings = re.findall(r"^\s+--([a-z][a-z0-9-]*)(?:=|\[=)", help_, re.M)
        self.assertGreater(len(settings), 20)
        for s in settings:
            o_form = s.replace("-", "_")
            env = "KVFS_" + o_form.upper()
            self.assertRegex(man, r"-o %s\b" % o_form, "-o form of --%s" % s)
            self.assertRegex(man, r"\b%s\b" % env, "environment form of --%s" % s)
        for short in ("-f", "-d", "-o", "-h", "-V"):
            self.assertRegex(man, r"(?<![\w-])%s(?![\w-])" % short)

    def test_kvfs_bench_1_has_every_option(self):
        man = man_text("kvfs-bench.1")
        exe = os.path.join(os.path.dirname(kvfstest.KVFS), "kvfs-bench")
        help_ = run([exe, "--help"])
        longs = sorted(set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", help_)))
        self.assertIn("layer-bytes", longs)
        missing = [o for o in longs if not re.search(r"(?<![\w-])--%s(?![\w-])" % o, man)]
        self.assertEqual(missing, [], "options of kvfs-bench --help missing from kvfs-bench(1)")

    def test_libkvfs_3_has_every_call(self):
        man = man_text("libkvfs.3")
        with open(installed("include/kvfs/kvfs.h")) as f:
            calls = set(re.findall(r"\b(kvfs_[a-z_]+)\(", f.read()))
        self.assertIn("kvfs_put", calls)
        missing = sorted(c for c in calls if c not in man)
        self.assertEqual(missing, [], "calls of kvfs.h missing from libkvfs(3)")


class Clients(kvfstest.KvfsTestCase):
    """C and Python clients built from the DESTDIR alone, on a real mount."""

    MOUNT_OPTS = ("--mem-size=128M",)

    def setUp(self):
        super().setUp()
        self.work = tempfile.mkdtemp(prefix="kvfs-it-install-client-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.work, True)
        self.libdir = os.path.dirname(installed("libkvfs.so.0"))
        self.example = installed("share/kvfs/examples/c/roundtrip.c")

    def run_roundtrip(self, exe, name):
        """Runs a built roundtrip on a fresh directory of the mount with the
        DESTDIR's libdir on LD_LIBRARY_PATH; checks libkvfs came from it."""
        d = self.m.path(name)
        os.mkdir(d)
        env = clean_env(LD_LIBRARY_PATH=self.libdir)
        out = run([exe, d], env=env, cwd=self.work)
        self.assertIn("host memory: round trip ok", out)
        self.assertEqual(len(os.listdir(os.path.join(d, "example-host"))), 4)
        return run(["ldd", exe], env=env) if shutil.which("ldd") else ""

    def test_pkg_config(self):
        if not shutil.which("pkg-config"):
            self.skipTest("pkg-config is not installed")
        env = clean_env(PKG_CONFIG_SYSROOT_DIR=DEST,
                        PKG_CONFIG_LIBDIR=os.path.join(self.libdir, "pkgconfig"))
        self.assertEqual(run(["pkg-config", "--modversion", "kvfs"], env=env).strip(),
                         cache()["CMAKE_PROJECT_VERSION"])
        flags = run(["pkg-config", "--cflags", "--libs", "kvfs"], env=env).split()
        self.assertIn("-I%s/usr/include" % DEST, flags)
        self.assertIn("-L%s" % self.libdir, flags)
        exe = os.path.join(self.work, "roundtrip")
        run([cache().get("CMAKE_C_COMPILER", "cc"), "-Wall", "-Wextra", "-Werror", "-o", exe,
             self.example] + flags, env=env, cwd=self.work)
        ldd = self.run_roundtrip(exe, "pc")
        if ldd:
            self.assertIn(os.path.join(self.libdir, "libkvfs.so.0"), ldd)

    def test_find_package(self):
        c = cache()
        src = os.path.join(self.work, "src")
        os.mkdir(src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(textwrap.dedent("""\
                cmake_minimum_required(VERSION 3.20)
                project(kvfs_client C)
                find_package(kvfs %s REQUIRED CONFIG)
                message(STATUS "kvfs_DIR=${kvfs_DIR}")
                add_executable(rt_shared %s)
                target_link_libraries(rt_shared PRIVATE kvfs::kvfs)
                add_executable(rt_static %s)
                target_link_libraries(rt_static PRIVATE kvfs::kvfs_static)
                """ % (c["CMAKE_PROJECT_VERSION"], self.example, self.example)))
        bld = os.path.join(self.work, "build")
        cmake = c.get("CMAKE_COMMAND", "cmake")
        out = run([cmake, "-S", src, "-B", bld, "-DCMAKE_PREFIX_PATH=%s/usr" % DEST,
                   "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF",
                   "-DCMAKE_C_COMPILER=%s" % c.get("CMAKE_C_COMPILER", "cc")],
                  env=clean_env(), cwd=self.work)
        self.assertRegex(out, r"kvfs_DIR=%s/" % re.escape(DEST))
        run([cmake, "--build", bld], env=clean_env(), cwd=self.work)
        ldd = self.run_roundtrip(os.path.join(bld, "rt_shared"), "cmake-shared")
        if ldd:
            self.assertIn(os.path.join(self.libdir, "libkvfs.so.0"), ldd)
        ldd = self.run_roundtrip(os.path.join(bld, "rt_static"), "cmake-static")
        if ldd:
            self.assertNotIn("libkvfs", ldd)

    PY = textwrap.dedent("""\
        import os, sys
        import kvfs
        with kvfs.Client(sys.argv[1]) as c:
            r = c.put_buffers([("py/a", b"installed" * 1000)], flags=kvfs.PUT_MKDIR)
            assert r.ok == 1, r.errors()
            out = bytearray(9000)
            g = c.get_into([("py/a", out)])
            assert g.ok == 1 and bytes(out) == b"installed" * 1000, g.errors()
        with open("/proc/self/maps") as f:
            maps = f.read()
        print("module", kvfs.__file__)
        print("maps", " ".join(sorted({l.split()[-1] for l in maps.splitlines()
                                       if "libkvfs" in l})))
        """)

    def run_python(self, **env):
        pydir = os.path.dirname(os.path.dirname(installed("kvfs/__init__.py")))
        out = run([sys.executable, "-c", self.PY, self.m.mnt],
                  env=clean_env(PYTHONPATH=pydir, **env), cwd=self.work)
        module = re.search(r"^module (.*)$", out, re.M).group(1)
        maps = re.search(r"^maps (.*)$", out, re.M).group(1).split()
        self.assertTrue(module.startswith(DEST + "/"), module)
        self.assertTrue(maps, "no libkvfs mapped")
        for p in maps:
            self.assertTrue(p.startswith(self.libdir + "/"), p)

    def test_python_kvfs_lib(self):
        self.run_python(KVFS_LIB=installed("libkvfs.so.0"))

    def test_python_dynamic_linker(self):
        self.run_python(LD_LIBRARY_PATH=self.libdir)


if __name__ == "__main__":
    kvfstest.main()
