# SPDX-License-Identifier: MIT
"""kvfs as a systemd service (fs/service.c, systemd/kvfs@.service.in).

These machines do not run systemd as PID 1, so the protocol is tested, not
the manager: the daemon runs with NOTIFY_SOCKET naming a datagram socket
the test owns, as systemd passes it to a Type=notify unit.

- the first message says recovery started (STATUS=Recovering DATA_DIR);
  READY=1 comes after it, and when it comes the mount answers (a FUSE
  mount, .kvfs/stats readable), with a STATUS= of what it serves;
- STATUS= lines go on while it serves and count the keys written;
- SIGTERM (systemctl stop): STOPPING=1 before the daemon exits 0, the
  mount is gone, and a restart finds every file written (nothing lost);
- the unit passes systemd-analyze verify (and a broken one does not).
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def built_with_systemd():
    r = subprocess.run([kvfstest.KVFS, "--version"], stdout=subprocess.PIPE, timeout=20)
    return "systemd sd_notify" in r.stdout.decode()


class Notify:
    """The manager's end of the notification socket."""

    def __init__(self, test):
        self.dir = tempfile.mkdtemp(prefix="kvfs-notify-", dir="/tmp")
        test.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        test.addCleanup(self.sock.close)
        self.sock.bind(self.path)
        self.seen = []  # every message, in order

    def next(self, timeout=20.0):
        """The next message as {key: value}, or None on timeout."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536).decode()
        except socket.timeout:
            return None
        self.seen.append(data)
        return dict(line.split("=", 1) for line in data.split("\n") if "=" in line)

    def until(self, key, timeout=20.0, pred=None):
        """Messages up to and including the first with `key` (and pred true)."""
        got, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.next(max(0.1, deadline - time.monotonic()))
            if msg is None:
                break
            got.append(msg)
            if key in msg and (pred is None or pred(msg)):
                return got
        raise AssertionError("no %s in %r" % (key, self.seen))


class ServiceTest(kvfstest.KvfsTestCase):
    OPTS = ("--mem-size=64M", "--ssd-size=256M")

    def setUp(self):  # each test starts its own daemons
        if not built_with_systemd():
            self.skipTest("this kvfs was built without libsystemd (libsystemd-dev)")

    def spawn(self, notify):
        """kvfs -f under NOTIFY_SOCKET, not waited for: the messages say when it is ready."""
        m = self.mount(self.OPTS, env={"NOTIFY_SOCKET": notify.path} if notify else {},
                       name="svc", start=False)
        env = dict(os.environ)
        env.update(m.env)
        log = open(m.log_path, "ab")
        m.proc = subprocess.Popen(m.command(), stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, env=env,
                                  preexec_fn=kvfstest._set_pdeathsig)
        log.close()
        return m

    def test_ready_status_stopping(self):
        n = Notify(self)
        m = self.spawn(n)
        first = n.next()
        self.assertIsNotNone(first, m.log_text())
        self.assertEqual(first.get("STATUS"), "Recovering %s: 0 s" % m.data, n.seen)
        before = n.until("READY")
        ready = before[-1]
        self.assertEqual(ready["READY"], "1")
        # when READY=1 arrives the mount answers
        self.assertTrue(kvfstest.is_mounted(m.mnt))
        with open(os.path.join(m.mnt, ".kvfs", "stats")) as f:
            self.assertIn("keys", f.read())
        self.assertTrue(ready["STATUS"].startswith("Serving %s: 0 keys, pool " % m.mnt),
                        ready)
        self.assertTrue(all("READY" not in x for x in before[:-1]))
        for i in range(3):
            kvfstest.write_file(os.path.join(m.mnt, "k%d" % i), kvfstest.pattern("k", 5000, i))
        # the status lines go on and count them
        n.until("STATUS", timeout=3 * 5 + 5,
                pred=lambda x: x["STATUS"].startswith("Serving %s: 3 keys" % m.mnt))
        m._own_root = False  # kept for the restart
        self.addCleanup(shutil.rmtree, m.root, True)
        m.signal(signal.SIGTERM)  # systemctl stop
        stopping = n.until("STOPPING")[-1]
        self.assertEqual(stopping["STOPPING"], "1")
        self.assertEqual(m.wait_exit(), 0, m.log_text())
        self.assertFalse(kvfstest.is_mounted(m.mnt))
        self.assertNotIn("READY", "".join(n.seen[n.seen.index(
            next(x for x in n.seen if "STOPPING=1" in x)):]))
        m.cleanup()
        again = self.mount(self.OPTS, name="svc", root=m.root)
        for i in range(3):
            self.assertEqual(kvfstest.read_file(os.path.join(again.mnt, "k%d" % i)),
                             kvfstest.pattern("k", 5000, i))

    def test_without_notify_socket(self):
        m = self.spawn(None)
        m.wait_ready()
        kvfstest.write_file(os.path.join(m.mnt, "x"), b"x")

    def test_unit_verifies(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("systemd-analyze is not installed (Debian's systemd)")
        unit = os.path.join(os.path.dirname(kvfstest.KVFS), "kvfs@.service")
        self.assertTrue(os.path.exists(unit), "the build configures %s" % unit)
        d = tempfile.mkdtemp(prefix="kvfs-unit-", dir="/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        with open(unit) as f:
            text = f.read()
        self.assertIn("Type=notify", text)
        self.assertIn("Restart=on-failure", text)
        exe = [x for x in text.split("\n") if x.startswith("ExecStart=")][0].split()[0][10:]
        # verify checks the executable exists: point it at this build's kvfs

        def verify(body):
            with open(os.path.join(d, "kvfs@.service"), "w") as f:
                f.write(body.replace(exe, os.path.abspath(kvfstest.KVFS)))
            inst = os.path.join(d, "kvfs@test.service")
            if not os.path.lexists(inst):
                os.symlink("kvfs@.service", inst)
            return subprocess.run(["systemd-analyze", "verify", "--man=no", inst],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=60, cwd=d)
        r = verify(text)
        self.assertEqual((r.returncode, r.stdout.decode()), (0, ""))
        r = verify(text.replace("Type=notify", "Type=notfy"))
        self.assertIn("notfy", r.stdout.decode())


if __name__ == "__main__":
    kvfstest.main()
