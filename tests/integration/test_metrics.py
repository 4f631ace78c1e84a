# SPDX-License-Identifier: MIT
"""Prometheus metrics (fs/metrics.h): --metrics=ADDR:PORT over HTTP and
MNT/.kvfs/metrics, both parsed by Debian's python3-prometheus-client.

- both carry the same families, each with HELP and TYPE, under the
  conventions (kvfs_ prefix, counters ending in _total);
- counters rise by exactly the operations the test performs, through FUSE
  and through the ioctl path;
- every histogram is cumulative, its +Inf bucket equals its _count, and
  _count equals the operations;
- a bad path gets 404, a POST 405, HEAD the headers of GET;
- 200 concurrent scrapes while fio writes and verifies on the mount leave the
  daemon serving;
- a port already taken: kvfs exits 1 with one line naming it;
- the option's three forms (--metrics, -o metrics=, KVFS_METRICS);
- every metric name examples/grafana/kvfs.json's queries use is in a scrape
  (kvfs_shared_* from a mount with an unreachable RADOS cluster, where this
  kvfs has librados).

HTTP parts skip, with the reason, when kvfs was built without libmicrohttpd
(kvfs_build_info{metrics_http="none"} in .kvfs/metrics)."""

import concurrent.futures
import errno
import json
import mmap
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, write_file  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # checked in main()
    text_string_to_metric_families = None

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "grafana", "kvfs.json"))
FIO = shutil.which("fio")
N = 12  # operations of each kind the counting tests perform

_HTTP_BUILT = None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_ctl(m, name="metrics"):
    """MNT/.kvfs/NAME with os.read (open() would ask isatty, an ioctl kvfs counts)."""
    fd = os.open(m.path(".kvfs", name), os.O_RDONLY)
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def http_get(port, path="/metrics", method="GET", timeout=20):
    """(status, headers, body) of one request to 127.0.0.1:port."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def parse(text):
    """{family name: Metric} of a Prometheus text exposition."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams):
    """{(sample name, frozenset of labels): value} of parsed families."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in fams.values() for s in f.samples}


def val(smp, name, **labels):
    return smp[(name, frozenset(labels.items()))]


def http_built():
    """True when this kvfs serves --metrics (asked once, of a plain mount)."""
    global _HTTP_BUILT
    if _HTTP_BUILT is None:
        with kvfstest.Mount(["--mem-size=64M"], name="probe") as m:
            info = parse(read_ctl(m))["kvfs_build_info"].samples[0].labels
        _HTTP_BUILT = info["metrics_http"] != "none"
    return _HTTP_BUILT


def need_http(test):
    if not http_built():
        test.skipTest("kvfs was built without libmicrohttpd (KVFS_METRICS_HTTP): "
                      "no --metrics endpoint to test")


def check_histograms(t, fams):
    """Every histogram of fams is cumulative, ends with +Inf == _count, and
    kvfs has one per FUSE op, batch ioctl kind and ioctl stage."""
    checked = 0
    for fam in (f for f in fams.values() if f.type == "histogram"):
        series = {}
        for s in fam.samples:
            key = frozenset((k, v) for k, v in s.labels.items() if k != "le")
            series.setdefault(key, {"buckets": []})
            if s.name.endswith("_bucket"):
                series[key]["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                series[key]["count"] = s.value
            elif s.name.endswith("_sum"):
                series[key]["sum"] = s.value
        for key, h in series.items():
            les = [le for le, _ in h["buckets"]]
            counts = [c for _, c in h["buckets"]]
            t.assertEqual(les, sorted(les), (fam.name, key))
            t.assertEqual(les[-1], float("inf"), (fam.name, key))
            t.assertGreater(len(les), 20, (fam.name, key))
            for lo, hi in zip(counts, counts[1:]):
                t.assertLessEqual(lo, hi, (fam.name, key, "not cumulative"))
            t.assertEqual(counts[-1], h["count"], (fam.name, key))
            t.assertGreaterEqual(h["sum"], 0, (fam.name, key))
            if h["count"] == 0:
                t.assertEqual(h["sum"], 0, (fam.name, key))
            checked += 1
    t.assertEqual(checked, len(kvfstest.OP_NAMES) + 4 + 5)  # ops, ioctl kinds, stages


class MetricsTest(kvfstest.KvfsTestCase):
    """Each test gets a mount serving --metrics on a free port (self.port)."""

    def setUp(self):
        need_http(self)
        self.port = free_port()
        self.m = self.mount(["--mem-size=256M", "--metrics=127.0.0.1:%d" % self.port])

    def scrape(self):
        st, hdr, body = http_get(self.port)
        self.assertEqual(st, 200, body[:500])
        return body

    def test_http_and_file_same_families(self):
        st, hdr, body = http_get(self.port)
        self.assertEqual(st, 200)
        self.assertEqual(hdr["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
        file_text = read_ctl(self.m)
        a, b = parse(body), parse(file_text)
        self.assertEqual(set(a), set(b))
        self.assertTrue(body.endswith("\n"))
        helps = re.findall(r"^# HELP (\S+) \S", body, re.M)
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M))
        self.assertEqual(len(helps), len(set(helps)), "a family twice")
        self.assertEqual(set(helps), set(types), "HELP and TYPE for each family")
        for name, typ in types.items():
            self.assertTrue(name.startswith("kvfs_"), name)
            self.assertEqual(name.endswith("_total"), typ == "counter", name)
            self.assertIn(typ, ("counter", "gauge", "histogram", "summary"), name)
        for name, f in a.items():
            self.assertTrue(f.documentation, name)
            self.assertNotEqual(f.type, "unknown", name)
        # what .kvfs/stats has is here: every op, the pool, the SSD, compaction
        smp = samples(a)
        stats = self.m.stats()
        for op in kvfstest.OP_NAMES:
            self.assertIn(("kvfs_requests_total",
                           frozenset({"path": "fuse", "op": op}.items())), smp)
        self.assertEqual(val(smp, "kvfs_pool_size_bytes"), stats["pool"]["size"])
        self.assertEqual(val(smp, "kvfs_ssd_capacity_bytes"), stats["ssd"]["cap"])
        for fam in ("kvfs_request_duration_seconds", "kvfs_ioctl_stage_duration_seconds"):
            self.assertEqual(a[fam].type, "histogram")
        for fam in ("kvfs_gc_buckets", "kvfs_tier_hits", "kvfs_offload_backlog_bytes",
                    "kvfs_ssd_used_bytes", "kvfs_errors"):
            self.assertIn(fam, a)

    def test_fuse_counters_exact(self):
        m = self.m
        os.mkdir(m.path("d"))
        size = 4096
        a = samples(parse(self.scrape()))
        for i in range(N):
            os.mkdir(m.path("d", "sub%d" % i))
        for i in range(N):
            write_file(m.path("d", "f%d" % i), pattern("f%d" % i, size))
        buf = mmap.mmap(-1, size)
        for i in range(N):
            fd = os.open(m.path("d", "f%d" % i), os.O_RDONLY | os.O_DIRECT)
            try:
                self.assertEqual(os.preadv(fd, [buf], 0), size)
            finally:
                os.close(fd)
            self.assertEqual(bytes(buf), pattern("f%d" % i, size))
        for i in range(N):
            os.unlink(m.path("d", "f%d" % i))
        buf.close()
        b = samples(parse(self.scrape()))

        def delta(name, **labels):
            return val(b, name, **labels) - val(a, name, **labels)

        for op in ("mkdir", "create", "read", "unlink"):
            fuse = {"path": "fuse", "op": op}
            self.assertEqual(delta("kvfs_requests_total", **fuse), N, op)
            self.assertEqual(delta("kvfs_request_duration_seconds_count", **fuse), N, op)
            self.assertEqual(delta("kvfs_request_duration_seconds_bucket", le="+Inf", **fuse),
                             N, op)
            self.assertEqual(delta("kvfs_request_errors_total", **fuse), 0, op)
            self.assertGreater(delta("kvfs_request_duration_seconds_sum", **fuse), 0, op)
        self.assertEqual(delta("kvfs_request_bytes_total", path="fuse", op="read"), N * size)
        self.assertEqual(delta("kvfs_request_bytes_total", path="fuse", op="write"), N * size)
        self.assertEqual(delta("kvfs_nodes", type="dir"), N)
        self.assertEqual(delta("kvfs_nodes", type="file"), 0)
        # a refused rmdir: one request, one error, one ENOTEMPTY
        write_file(m.path("d", "sub0", "x"), b"x")
        c = samples(parse(self.scrape()))
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.path("d", "sub0"))
        d = samples(parse(self.scrape()))
        rmdir = {"path": "fuse", "op": "rmdir"}
        self.assertEqual(val(d, "kvfs_requests_total", **rmdir)
                         - val(c, "kvfs_requests_total", **rmdir), 1)
        self.assertEqual(val(d, "kvfs_request_errors_total", **rmdir)
                         - val(c, "kvfs_request_errors_total", **rmdir), 1)
        self.assertEqual(val(d, "kvfs_errors_total", path="fuse", errno="ENOTEMPTY")
                         - c.get(("kvfs_errors_total",
                                  frozenset({"path": "fuse", "errno": "ENOTEMPTY"}.items())), 0),
                         1)

    def test_histograms_cumulative(self):
        m = self.m
        for i in range(N):
            write_file(m.path("h%d" % i), b"y" * 1000)
        fams = parse(self.scrape())
        check_histograms(self, fams)
        smp = samples(fams)
        create = val(smp, "kvfs_request_duration_seconds_count", path="fuse", op="create")
        self.assertEqual(create, N)
        self.assertEqual(create, val(smp, "kvfs_requests_total", path="fuse", op="create"))

    def test_ioctl_counters_exact(self):
        try:
            kvfs = kvfstest.client()
        except Exception as e:  # the client library is not built here
            self.skipTest("the kvfs Python client cannot load: %s" % e)
        c = kvfs.Client(self.m.mnt)
        self.addCleanup(c.close)
        values = [("k%d" % i, pattern("k%d" % i, 1000 + i)) for i in range(N)]
        a = samples(parse(self.scrape()))
        r = c.put_buffers(values)
        self.assertEqual(r.ok, N, r.errors())
        look = c.lookup([k for k, _ in values] + ["missing"])
        self.assertEqual(look.ok, N)
        b = samples(parse(self.scrape()))

        def delta(name, **labels):
            return val(b, name, **labels) - val(a, name, **labels)

        put = {"path": "ioctl", "op": "put"}
        self.assertEqual(delta("kvfs_requests_total", **put), 1)
        self.assertEqual(delta("kvfs_request_duration_seconds_count", **put), 1)
        self.assertEqual(delta("kvfs_request_bytes_total", **put), sum(len(v) for _, v in values))
        self.assertEqual(delta("kvfs_ioctl_keys_total", op="put"), N)
        self.assertEqual(delta("kvfs_ioctl_failed_keys_total", op="put"), 0)
        self.assertEqual(delta("kvfs_requests_total", path="ioctl", op="lookup"), 1)
        self.assertEqual(delta("kvfs_ioctl_keys_total", op="lookup"), N + 1)
        self.assertEqual(delta("kvfs_ioctl_stage_duration_seconds_count", stage="copy_in"), 1)

    def test_bad_requests(self):
        for path in ("/", "/metric", "/metrics/x", "/stats"):
            st, _, _ = http_get(self.port, path)
            self.assertEqual(st, 404, path)
        for method in ("POST", "PUT", "DELETE"):
            st, hdr, _ = http_get(self.port, method=method)
            self.assertEqual(st, 405, method)
            self.assertIn("GET", hdr["Allow"])
        st, hdr, body = http_get(self.port, method="HEAD")
        self.assertEqual((st, body), (200, ""))
        self.assertTrue(hdr["Content-Type"].startswith("text/plain; version=0.0.4"))
        self.assertEqual(http_get(self.port, "/metrics?x=1")[0], 200)
        self.scrape()  # still serving

    def test_concurrent_scrapes_during_fio(self):
        if FIO is None:
            self.skipTest("fio is not installed")
        m = self.m
        d = m.path("fio")
        os.mkdir(d)
        out = os.path.join(m.root, "fio.json")
        done = threading.Event()
        start = threading.Barrier(201)  # 200 scrapers and this thread, once fio runs
        fio = None

        def scraper(i):
            """Scrapes at once with the other 199 as fio starts, then on
            until it ends. Returns (what went wrong or None, scrapes that
            began and ended while fio ran)."""
            start.wait(timeout=60)
            n = during = 0
            while n == 0 or not done.is_set():
                running = fio.poll() is None
                st, _, body = http_get(self.port, timeout=60)
                if st != 200 or not body.endswith("\n") or "kvfs_requests_total" not in body:
                    return "scrape %d of thread %d: %d %r" % (n, i, st, body[-200:]), during
                n += 1
                during += running and fio.poll() is None
            return None, during

        # paced (--rate) so that it lasts about 3 s however fast the machine is
        cmd = [FIO, "--output-format=json", "--output=" + out, "--name=scrape",
               "--directory=" + d, "--rw=write", "--bs=64k", "--size=24m", "--numjobs=2",
               "--nrfiles=2", "--rate=16m", "--verify=crc32c", "--do_verify=1",
               "--verify_fatal=1", "--group_reporting"]
        with concurrent.futures.ThreadPoolExecutor(max_workers=200) as ex:
            futs = [ex.submit(scraper, i) for i in range(200)]
            fio = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                start.wait(timeout=60)
                fio_out, _ = fio.communicate(timeout=120)
            finally:
                done.set()
                if fio.poll() is None:
                    fio.kill()
                    fio.wait()
            res = [f.result() for f in futs]
        bad = [r for r, _ in res if r is not None]
        during = sum(n for _, n in res)
        print("  %d scrapes while fio ran" % during)
        self.assertGreaterEqual(during, 200, "the scrapes did not overlap fio")
        self.assertEqual(bad, [])
        self.assertEqual(fio.returncode, 0, fio_out.decode(errors="replace")[-2000:])
        with open(out) as f:
            job = kvfstest.parse_fio_json(f.read())["jobs"][0]
        self.assertEqual(job["error"], 0)
        self.assertEqual(job["write"]["io_bytes"], 2 * (24 << 20))
        self.assertEqual(job["read"]["io_bytes"], 2 * (24 << 20), "fio verified every byte")
        # the daemon serves both: the mount answers, a scrape parses
        self.assertEqual(len(os.listdir(d)), 4)
        self.assertIn("kvfs_requests", parse(self.scrape()))
        self.assertIn("ops", self.m.stats())


class MetricsFileTest(kvfstest.KvfsTestCase):
    """MNT/.kvfs/metrics, which every build has (no --metrics)."""

    MOUNT_OPTS = ("--mem-size=64M",)

    def test_file_counters_and_histograms(self):
        m = self.m
        a = samples(parse(read_ctl(m)))
        for i in range(N):
            os.mkdir(m.path("d%d" % i))
        fams = parse(read_ctl(m))
        check_histograms(self, fams)
        b = samples(fams)
        mkdir = {"path": "fuse", "op": "mkdir"}
        for name in ("kvfs_requests_total", "kvfs_request_duration_seconds_count"):
            self.assertEqual(val(b, name, **mkdir) - val(a, name, **mkdir), N, name)
        self.assertIn("metrics", os.listdir(m.path(".kvfs")))
        self.assertEqual(os.stat(m.path(".kvfs", "metrics")).st_mode & 0o777, 0o444)

    def test_without_http(self):
        if http_built():
            self.skipTest("this kvfs has libmicrohttpd: test_port_in_use covers the start")
        m = kvfstest.Mount(["--mem-size=64M", "--metrics=127.0.0.1:%d" % free_port()],
                           name="nohttp")
        try:
            with self.assertRaises(AssertionError):
                m.start()
            self.assertEqual(m.returncode, 1)
            lines = [ln for ln in m.log_text().splitlines() if not ln.startswith("$ ")]
            self.assertEqual(len(lines), 1, lines)
            self.assertIn("without libmicrohttpd", lines[0])
        finally:
            m.cleanup()


class MetricsStartTest(kvfstest.KvfsTestCase):
    """Starting with --metrics: the option's forms, and a port in use."""

    def setUp(self):
        need_http(self)

    def test_port_in_use(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        self.addCleanup(s.close)
        m = kvfstest.Mount(["--mem-size=64M", "--metrics=127.0.0.1:%d" % port], name="busy")
        try:
            with self.assertRaises(AssertionError):
                m.start()
            self.assertEqual(m.returncode, 1)
            lines = [ln for ln in m.log_text().splitlines() if not ln.startswith("$ ")]
            self.assertEqual(len(lines), 1, lines)
            self.assertIn("127.0.0.1:%d" % port, lines[0])
            self.assertIn("Address already in use", lines[0])
            self.assertFalse(m.mounted())
        finally:
            m.cleanup()

    def test_three_forms(self):
        for form in ("opt", "o", "env"):
            port = free_port()
            spec = "127.0.0.1:%d" % port
            opts, env = ["--mem-size=64M"], None
            if form == "opt":
                opts.append("--metrics=" + spec)
            elif form == "o":
                opts += ["-o", "metrics=" + spec]
            else:
                env = {"KVFS_METRICS": spec}
            m = self.mount(opts, env=env, name="form-" + form)
            self.assertEqual(m.config()["metrics"], spec, form)
            st, _, body = http_get(port)
            self.assertEqual(st, 200, form)
            self.assertIn("kvfs_build_info", parse(body), form)
            m.stop()
        m = self.mount(["--mem-size=64M"], name="off")
        self.assertEqual(m.config()["metrics"], "off")
        m.stop()
        r = subprocess.run([kvfstest.KVFS, "-f", "--metrics=9100", "data", "mnt"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--metrics", r.stdout.decode())
        self.assertIn("--metrics=ADDR:PORT", kvfstest.kvfs_help())


def dashboard_metric_names():
    """The kvfs_* sample names the dashboard's queries use."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = []

    def walk(o):
        if isinstance(o, dict):
            if isinstance(o.get("expr"), str):
                exprs.append(o["expr"])
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(dash)
    q = dash["templating"]["list"]
    return dash, exprs, set(re.findall(r"\bkvfs_[a-z0-9_]+", " ".join(
        exprs + [v.get("definition", "") for v in q])))


class DashboardTest(kvfstest.KvfsTestCase):
    def setUp(self):
        pass

    def test_dashboard_names_exist(self):
        dash, exprs, names = dashboard_metric_names()
        self.assertTrue(exprs)
        var = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
        self.assertEqual(len(var), 1)
        self.assertEqual(var[0]["query"], "prometheus")
        for p in dash["panels"]:
            if p["type"] != "row":
                self.assertEqual(p["datasource"]["uid"], "${%s}" % var[0]["name"], p["title"])
        self.assertTrue(any("histogram_quantile" in e and "_bucket" in e for e in exprs))
        m = self.mount(["--mem-size=64M"], name="dash")
        # kvfs_errors_total lists the kinds seen: one
        os.mkdir(m.path("full"))
        write_file(m.path("full", "f"), b"x")
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.path("full"))
        got = {s.name for f in parse(read_ctl(m)).values() for s in f.samples}
        shared = {n for n in names if n.startswith("kvfs_shared_")}
        missing = sorted(names - shared - got)
        self.assertEqual(missing, [], "dashboard names no scrape has")
        r = subprocess.run([kvfstest.KVFS, "--version"], stdout=subprocess.PIPE, timeout=20)
        if "rados librados" not in r.stdout.decode():
            self.skipTest("kvfs built without librados: the dashboard's kvfs_shared_* names "
                          "(%s) cannot be scraped here" % ", ".join(sorted(shared)))
        # the shared tier's families, from a mount whose cluster never answers
        conf = os.path.join(m.root, "ceph.conf")
        with open(conf, "w") as f:
            f.write("[global]\nmon host = v2:127.0.0.1:%d\nauth client required = none\n"
                    "log to stderr = false\nerr to stderr = false\n" % free_port())
        r = self.mount(["--mem-size=64M", "--rados-pool=kvfs", "--rados-conf=" + conf,
                        "--rados-timeout=1s"], name="dash-rados")
        got = {s.name for f in parse(read_ctl(r)).values() for s in f.samples}
        self.assertEqual(sorted(shared - got), [], "dashboard names no scrape has")


def _skip_if():
    if text_string_to_metric_families is None:
        return "python3-prometheus-client is not installed (its parser reads the metrics)"
    return None


if __name__ == "__main__":
    kvfstest.main(skip_if=_skip_if)
