# SPDX-License-Identifier: MIT
"""Runs the fio job files of examples/fio against a kvfs mount, scaled down
through the KVFS_FIO_* environment variables the job files read, and checks
that every job verified its data without error. A block corrupted between
the write and the read job must make fio fail: proof that the verification
really reads through the mount.

Scale: set KVFS_FIO_NRFILES, KVFS_FIO_FILESIZE, KVFS_FIO_SIZE, KVFS_FIO_JOBS
(and KVFS_FIO_MEM for the mount's --mem-size) in the environment to override
the small CI defaults below. Skipped (77) when fio is not installed."""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "fio"))
FIO = shutil.which("fio")

# CI defaults (the job files' real defaults are in examples/fio/README.md)
DEFAULTS = {
    "KVFS_FIO_NRFILES": "4",
    "KVFS_FIO_FILESIZE": "16m",
    "KVFS_FIO_SIZE": "32m",
    "KVFS_FIO_JOBS": "2",
}
SMALLFILES_NRFILES = os.environ.get("KVFS_FIO_SMALL_NRFILES", "150")
MEM = os.environ.get("KVFS_FIO_MEM", "1G")
FIO_TIMEOUT = 240


def fio_env(directory, direct, **over):
    env = dict(os.environ)
    for k, v in DEFAULTS.items():
        env.setdefault(k, v)
    env["KVFS_FIO_DIR"] = directory
    env["KVFS_FIO_DIRECT"] = "1" if direct else "0"
    env.update(over)
    return env


class FioTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def run_fio(self, jobfile, direct=False, section=None, expect_ok=True, **env_over):
        d = self.m.path("fio")
        os.makedirs(d, exist_ok=True)
        out = os.path.join(self.m.root, "fio-%s.json" % os.path.basename(jobfile))
        cmd = [FIO, "--output-format=json", "--output=" + out]
        if section:
            cmd.append("--section=" + section)
        cmd.append(os.path.join(JOBS_DIR, jobfile))
        try:
            r = subprocess.run(cmd, env=fio_env(d, direct, **env_over), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=FIO_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError("fio %s did not finish in %ds" % (jobfile, FIO_TIMEOUT))
        msgs = r.stdout.decode(errors="replace")
        try:
            with open(out) as f:
                text = f.read()
        except OSError:
            text = ""
        if expect_ok:
            self.assertEqual(r.returncode, 0, "fio %s failed (%d):\n%s\n%s"
                             % (jobfile, r.returncode, msgs[-3000:], text[:1500]))
        doc = kvfstest.parse_fio_json(text) if text.strip() else None
        return r.returncode, doc, msgs

    def check_jobs(self, doc, names):
        jobs = doc["jobs"]
        self.assertTrue(jobs, "fio ran no jobs")
        self.assertEqual({j["jobname"] for j in jobs}, set(names))
        for j in jobs:
            self.assertEqual(j["error"], 0, "%s: error %d" % (j["jobname"], j["error"]))
            opts = dict(doc.get("global options", {}), **j.get("job options", {}))
            self.assertEqual(opts.get("verify"), "crc32c", j["jobname"])
        return jobs

    def by_name(self, jobs, name):
        return [j for j in jobs if j["jobname"] == name]

    def _seq(self, direct):
        nrfiles = int(os.environ.get("KVFS_FIO_NRFILES", DEFAULTS["KVFS_FIO_NRFILES"]))
        njobs = int(os.environ.get("KVFS_FIO_JOBS", DEFAULTS["KVFS_FIO_JOBS"]))
        fsize = kvfstest.parse_size(os.environ.get("KVFS_FIO_FILESIZE",
                                                   DEFAULTS["KVFS_FIO_FILESIZE"]).upper())
        rc, doc, _ = self.run_fio("seq.fio", direct=direct)
        jobs = self.check_jobs(doc, ["seq-write", "seq-read"])
        per_job = nrfiles * fsize
        for j in self.by_name(jobs, "seq-write"):
            self.assertEqual(j["write"]["io_bytes"], per_job)
            # do_verify: everything written was read back and checked
            self.assertEqual(j["read"]["io_bytes"], per_job)
        for j in self.by_name(jobs, "seq-read"):
            self.assertEqual(j["read"]["io_bytes"], per_job)
        self.assertEqual(len(self.by_name(jobs, "seq-read")), njobs)
        # the files are there, with their sizes
        names = sorted(os.listdir(self.m.path("fio")))
        self.assertEqual(len(names), nrfiles * njobs)
        for n in names:
            self.assertEqual(os.stat(self.m.path("fio", n)).st_size, fsize, n)
        return names

    def test_seq_buffered(self):
        names = self._seq(direct=False)

        # corrupt one block in the middle of one file: the read job must fail
        victim = self.m.path("fio", names[-1])
        fd = os.open(victim, os.O_WRONLY)
        os.pwrite(fd, b"\0" * 4096, (1 << 20) + 8192)
        os.close(fd)
        rc, doc, msgs = self.run_fio("seq.fio", section="seq-read", expect_ok=False)
        self.assertNotEqual(rc, 0, "fio did not notice a corrupted block")
        self.assertTrue(doc is not None and any(j["error"] != 0 for j in doc["jobs"]),
                        "no job reported the corruption:\n%s" % msgs)

    def test_seq_direct(self):
        self._seq(direct=True)

    def test_randread(self):
        for direct in (True, False):
            rc, doc, _ = self.run_fio("randread.fio", direct=direct)
            jobs = self.check_jobs(doc, ["layout", "randread"])
            size = kvfstest.parse_size(os.environ.get("KVFS_FIO_SIZE",
                                                      DEFAULTS["KVFS_FIO_SIZE"]).upper())
            (layout,) = self.by_name(jobs, "layout")
            self.assertEqual(layout["write"]["io_bytes"], size)
            readers = self.by_name(jobs, "randread")
            for j in readers:
                self.assertEqual(j["read"]["io_bytes"], size)
                self.assertEqual(j["read"]["total_ios"], size // 4096)
            self.assertEqual(os.stat(self.m.path("fio", "kvfs-randread.dat")).st_size, size)
            os.unlink(self.m.path("fio", "kvfs-randread.dat"))

    def test_smallfiles(self):
        for direct in (False, True):
            rc, doc, _ = self.run_fio("smallfiles.fio", direct=direct,
                                      KVFS_FIO_NRFILES=SMALLFILES_NRFILES)
            jobs = self.check_jobs(doc, ["smallfiles"])
            names = os.listdir(self.m.path("fio"))
            njobs = int(os.environ.get("KVFS_FIO_JOBS", DEFAULTS["KVFS_FIO_JOBS"]))
            self.assertEqual(len(names), int(SMALLFILES_NRFILES) * njobs)
            total = 0
            for n in names:
                s = os.stat(self.m.path("fio", n)).st_size
                self.assertTrue(4096 <= s <= 65536 and s % 4096 == 0, "%s: %d bytes" % (n, s))
                total += s
            self.assertEqual(total, sum(j["write"]["io_bytes"] for j in jobs))
            for j in jobs:
                self.assertEqual(j["read"]["io_bytes"], j["write"]["io_bytes"])
            subprocess.run(["rm", "-rf", self.m.path("fio")], check=True)


if __name__ == "__main__":
    kvfstest.main(skip_reason=None if FIO else "fio is not installed")
