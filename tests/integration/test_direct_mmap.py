# SPDX-License-Identifier: MIT
"""O_DIRECT reads and writes with aligned buffers, and mmap for reading
(MAP_PRIVATE and read-only MAP_SHARED), all checked byte for byte."""

import mmap
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402

MEM = "512M"
PAGE = 4096


def aligned(n, fill=None):
    """A page-aligned buffer of n bytes (anonymous mapping)."""
    b = mmap.mmap(-1, n)
    if fill is not None:
        b[:] = fill
    return b


class DirectTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_direct_write_then_read(self):
        m = self.m
        p = m.path("d")
        size = 8 << 20
        want = bytearray(pattern("direct", size))
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            # 1 MiB pieces, out of order, then a few 4 KiB rewrites
            order = [3, 0, 7, 1, 6, 2, 5, 4]
            for i in order:
                buf = aligned(1 << 20, want[i << 20:(i + 1) << 20])
                self.assertEqual(os.pwritev(fd, [buf], i << 20), 1 << 20)
                buf.close()
            for off in (0, 4096 * 5, (3 << 20) + 8192, size - PAGE):
                piece = pattern("rewrite%d" % off, PAGE)
                want[off:off + PAGE] = piece
                buf = aligned(PAGE, piece)
                self.assertEqual(os.pwritev(fd, [buf], off), PAGE)
                buf.close()
            # two aligned buffers in one vector
            b1, b2 = aligned(PAGE, b"1" * PAGE), aligned(2 * PAGE, b"2" * 2 * PAGE)
            self.assertEqual(os.pwritev(fd, [b1, b2], 1 << 20), 3 * PAGE)
            want[1 << 20:(1 << 20) + 3 * PAGE] = b"1" * PAGE + b"2" * 2 * PAGE
        finally:
            os.close(fd)
        want = bytes(want)
        self.assertEqual(os.stat(p).st_size, size)
        self.assertEqual(read_file(p), want)  # buffered read agrees

        fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
        try:
            buf = aligned(1 << 20)
            for i in range(8):
                self.assertEqual(os.preadv(fd, [buf], i << 20), 1 << 20)
                self.assertEqual(bytes(buf), want[i << 20:(i + 1) << 20], "MiB %d" % i)
            small = aligned(PAGE)
            for off in (0, PAGE * 77, size - PAGE):
                self.assertEqual(os.preadv(fd, [small], off), PAGE)
                self.assertEqual(bytes(small), want[off:off + PAGE])
            # at and past EOF
            self.assertEqual(os.preadv(fd, [small], size), 0)
            self.assertEqual(os.preadv(fd, [buf], size - 2 * PAGE), 2 * PAGE)
            self.assertEqual(bytes(buf[:2 * PAGE]), want[-2 * PAGE:])
            buf.close()
            small.close()
        finally:
            os.close(fd)

    def test_direct_read_unaligned_size(self):
        """A file whose size is not a page multiple reads short at EOF."""
        p = self.m.path("odd")
        want = pattern("odd", 3 * PAGE + 123)
        write_file(p, want)
        fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
        try:
            buf = aligned(8 * PAGE)
            self.assertEqual(os.preadv(fd, [buf], 0), len(want))
            self.assertEqual(bytes(buf[:len(want)]), want)
            self.assertEqual(os.preadv(fd, [buf], 2 * PAGE), PAGE + 123)
            self.assertEqual(bytes(buf[:PAGE + 123]), want[2 * PAGE:])
            buf.close()
        finally:
            os.close(fd)

    def test_direct_and_buffered_mixed(self):
        """Buffered writes are seen by O_DIRECT reads and vice versa."""
        p = self.m.path("mix")
        bfd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        dfd = os.open(p, os.O_RDWR | os.O_DIRECT)
        try:
            data = pattern("mix", 16 * PAGE)
            os.write(bfd, data)
            buf = aligned(16 * PAGE)
            self.assertEqual(os.preadv(dfd, [buf], 0), 16 * PAGE)
            self.assertEqual(bytes(buf), data)
            piece = aligned(PAGE, b"D" * PAGE)
            self.assertEqual(os.pwritev(dfd, [piece], 4 * PAGE), PAGE)
            want = data[:4 * PAGE] + b"D" * PAGE + data[5 * PAGE:]
            self.assertEqual(os.pread(bfd, 16 * PAGE, 0), want)
            # extend the file through O_DIRECT
            self.assertEqual(os.pwritev(dfd, [piece], 16 * PAGE), PAGE)
            self.assertEqual(os.fstat(bfd).st_size, 17 * PAGE)
            buf.close()
            piece.close()
        finally:
            os.close(bfd)
            os.close(dfd)
        self.assertEqual(read_file(p), want + b"D" * PAGE)

    def test_direct_create_large(self):
        """A large O_DIRECT write in one call (many FUSE requests)."""
        p = self.m.path("big")
        size = 33 << 20
        data = pattern("big", size)
        buf = aligned(size, data)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        try:
            done = 0
            while done < size:
                done += os.pwritev(fd, [memoryview(buf)[done:]], done)
        finally:
            os.close(fd)
        buf.close()
        self.assertEqual(read_file(p), data)


class MmapTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    SIZE = (3 << 20) + 123

    def setUp(self):
        super().setUp()
        self.p = self.m.path("mapped")
        self.want = pattern("mmap", self.SIZE)
        write_file(self.p, self.want)

    def test_map_private_read(self):
        fd = os.open(self.p, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
            self.assertEqual(len(mm), self.SIZE)
            self.assertEqual(mm[:], self.want)
            self.assertEqual(mm[self.SIZE - 200:], self.want[-200:])
            # touch pages out of order
            for off in (2 << 20, 5, 4095, 4096, (1 << 20) + 77):
                self.assertEqual(mm[off:off + 64], self.want[off:off + 64])
            mm.close()
        finally:
            os.close(fd)

    def test_map_shared_readonly(self):
        fd = os.open(self.p, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            self.assertEqual(mm[:], self.want)
            mm2 = mmap.mmap(fd, 1 << 20, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ,
                            offset=1 << 20)
            self.assertEqual(mm2[:], self.want[1 << 20:2 << 20])
            mm2.close()
            mm.close()
        finally:
            os.close(fd)

    def test_map_private_copy_on_write(self):
        """A private writable mapping changes the process's copy only."""
        fd = os.open(self.p, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
            mm[0:5] = b"XXXXX"
            self.assertEqual(mm[0:5], b"XXXXX")
            self.assertEqual(mm[5:], self.want[5:])
            mm.close()
        finally:
            os.close(fd)
        self.assertEqual(read_file(self.p), self.want)

    def test_map_after_rewrite(self):
        """A new mapping after the key was rewritten shows the new bytes."""
        new = pattern("mmap-v2", 5000)
        tmp = self.m.path("tmp")
        write_file(tmp, new)
        os.rename(tmp, self.p)
        fd = os.open(self.p, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            self.assertEqual(mm[:], new)
            mm.close()
        finally:
            os.close(fd)
        # in place, through write(2)
        fd = os.open(self.p, os.O_WRONLY)
        os.pwrite(fd, b"ABCD", 100)
        os.close(fd)
        fd = os.open(self.p, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
            self.assertEqual(mm[:], new[:100] + b"ABCD" + new[104:])
            mm.close()
        finally:
            os.close(fd)

    def test_map_while_held_across_unlink(self):
        fd = os.open(self.p, os.O_RDONLY)
        mm = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        os.close(fd)
        try:
            os.unlink(self.p)
            self.assertEqual(mm[:], self.want)
        finally:
            mm.close()


if __name__ == "__main__":
    kvfstest.main()
