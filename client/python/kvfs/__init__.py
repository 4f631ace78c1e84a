# SPDX-License-Identifier: MIT
"""
kvfs — the kvfs client library (libkvfs) from Python, on ctypes, standard
library only (numpy works when present, and is never needed).

    import kvfs                     # pip install ./client/python, or python3-kvfs

    with kvfs.Client("/mnt/kv/llama") as c:
        # any buffer-protocol object: bytes, bytearray, memoryview, array.array, numpy
        r = c.put_buffers([("blk0", b"..." * 1000), ("blk1", bytearray(4096))])
        assert r.ok == 2
        hits = c.lookup(["blk0", "blk1", "blk2"])          # hits.prefix == 2, hits[2] < 0
        c.lookup_prefix(["blk0", "blk1", "blk2"])           # 2
        out = bytearray(4096)
        c.get_into([("blk1", out)])                         # fills `out`

        # the fast path: name memory once, then move blocks by (name, block index)
        reg = c.alloc(layers * nblocks * block_bytes)       # shared memory (HOST_SHM)
        lay = c.layout([(reg, l * nblocks * block_bytes, block_bytes, block_bytes)
                        for l in range(layers)])            # one segment per layer
        c.put(["h%d" % b for b in range(8)], layout=lay, blocks=range(8))
        c.get(["h%d" % b for b in range(8)], layout=lay, blocks=range(8))
        c.remove(["blk0"]); c.remove_prefix("old-model")

Errors. A call that cannot run raises OSError with the errno (ENOTTY: not a
kvfs directory; EPERM: the daemon may not reach this process's memory — use
alloc() instead of register(); ...). A batch that runs returns a
BatchResult whose entries are each key's result: >= 0 on success (bytes
moved, a lookup's size, keys removed), or -errno; one bad key never fails
the batch.

Threads. A Client may be used from many threads at once; ctypes releases
the GIL during each library call, so batches from several threads run in
parallel. Buffers must not be changed by Python while a put reads them, nor
read while a get fills them.

The shared library is found, in order, at $KVFS_LIB, next to this package
(a copy shipped inside it), or by the dynamic linker (libkvfs.so.0, once
kvfs is installed).
"""

import ctypes
import ctypes.util
import errno as _errno
import os
import threading

__all__ = ["Client", "Region", "Layout", "BatchResult", "load", "PUT_NOREPLACE", "PUT_MKDIR",
           "REMOVE_RECURSIVE", "KEY_PRESENT", "KEY_SEALED", "KEY_DIR", "KEY_DRAM", "KEY_SSD",
           "LAYOUT_MAX_SEGS"]

PUT_NOREPLACE = 1  # an existing key fails with -EEXIST and keeps its value
PUT_MKDIR = 2  # create missing parent directories
REMOVE_RECURSIVE = 1  # a directory name removes it and everything below it
LAYOUT_MAX_SEGS = 256  # segments of one layout (KVFS_LAYOUT_MAX_SEGS)

# per-key flags (BatchResult.flags), as in kvfs_ioctl.h
KEY_PRESENT, KEY_SEALED, KEY_DIR, KEY_DRAM, KEY_SSD = 1, 2, 4, 8, 16


class _Segment(ctypes.Structure):
    _fields_ = [("ks_region", ctypes.c_uint32), ("ks_base", ctypes.c_uint64),
                ("ks_stride", ctypes.c_uint64), ("ks_len", ctypes.c_uint64)]


class _Iov(ctypes.Structure):
    _fields_ = [("ki_region", ctypes.c_uint32), ("ki_offset", ctypes.c_uint64),
                ("ki_len", ctypes.c_uint64)]


class _Key(ctypes.Structure):
    _fields_ = [("kk_name", ctypes.c_char_p), ("kk_layout", ctypes.c_uint32),
                ("kk_niov", ctypes.c_uint32), ("kk_block", ctypes.c_uint64),
                ("kk_iov", ctypes.POINTER(_Iov))]


class _Status(ctypes.Structure):
    _fields_ = [("ks_result", ctypes.c_int64), ("ks_size", ctypes.c_uint64),
                ("ks_flags", ctypes.c_uint32)]


class _Summary(ctypes.Structure):
    _fields_ = [("ksum_trace", ctypes.c_uint64), ("ksum_ok", ctypes.c_size_t),
                ("ksum_prefix", ctypes.c_size_t), ("ksum_bytes", ctypes.c_uint64),
                ("ksum_ns", ctypes.c_uint64), ("ksum_ioctls", ctypes.c_uint)]


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer: lets us take the address of any buffer-protocol
    object, read-only ones included, and hold it (the object cannot be
    resized or freed while the buffer is held)."""
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_PyBUF_WRITABLE = 0x0001  # with PyBUF_SIMPLE (0): one C-contiguous run of bytes
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class _Pinned:
    """A held buffer export of a Python object: its address and length."""

    def __init__(self, obj, writable):
        self._held = False
        self._view = _PyBuffer()
        try:
            _get_buffer(obj, ctypes.byref(self._view), _PyBUF_WRITABLE if writable else 0)
        except BufferError as e:
            raise TypeError("%s: need a contiguous%s buffer (%s)"
                            % (type(obj).__name__, " writable" if writable else "", e))
        self.addr = self._view.buf or 0
        self.len = self._view.len
        self._held = True

    def release(self):
        if self._held:
            self._held = False
            _release_buffer(ctypes.byref(self._view))

    def __del__(self):
        self.release()


_lib = None
_lib_lock = threading.Lock()


def _find_library():
    env = os.environ.get("KVFS_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libkvfs.so.0", "libkvfs.so"):
        if os.path.exists(os.path.join(here, name)):
            return os.path.join(here, name)
    return ctypes.util.find_library("kvfs") or "libkvfs.so.0"


def load(path=None):
    """Loads libkvfs (from `path`, or as the module docstring says) once and
    returns the ctypes library. Called by Client; call it first to choose
    another copy of the library."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(path or _find_library(), use_errno=False)
        vp, u32, u64, sz = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
        P = ctypes.POINTER
        sig = {
            "kvfs_open": (ctypes.c_int, [ctypes.c_char_p, P(vp)]),
            "kvfs_close": (ctypes.c_int, [vp]),
            "kvfs_fd": (ctypes.c_int, [vp]),
            "kvfs_trace_next": (u64, [vp]),
            "kvfs_limits": (None, [vp, P(u32), P(u32), P(u32), P(u32)]),
            "kvfs_region_alloc": (ctypes.c_int, [vp, sz, ctypes.c_int, P(vp), P(u32)]),
            "kvfs_region_register": (ctypes.c_int, [vp, vp, sz, P(u32)]),
            "kvfs_region_unregister": (ctypes.c_int, [vp, u32]),
            "kvfs_layout_register": (ctypes.c_int, [vp, P(_Segment), sz, P(u32), P(u64)]),
            "kvfs_layout_unregister": (ctypes.c_int, [vp, u32]),
            "kvfs_lookup": (ctypes.c_int, [vp, P(ctypes.c_char_p), sz, u64, P(_Status),
                                           P(_Summary)]),
            "kvfs_lookup_prefix": (ctypes.c_int64, [vp, P(ctypes.c_char_p), sz, u64]),
            "kvfs_put": (ctypes.c_int, [vp, P(_Key), sz, ctypes.c_uint, u64, P(_Status),
                                        P(_Summary)]),
            "kvfs_get": (ctypes.c_int, [vp, P(_Key), sz, u64, P(_Status), P(_Summary)]),
            "kvfs_put_event": (ctypes.c_int, [vp, P(_Key), sz, ctypes.c_uint, ctypes.c_char_p,
                                              u64, P(_Status), P(_Summary)]),
            "kvfs_remove": (ctypes.c_int, [vp, P(ctypes.c_char_p), sz, ctypes.c_uint, u64,
                                           P(_Status), P(_Summary)]),
            "kvfs_remove_prefix": (ctypes.c_int64, [vp, ctypes.c_char_p, u64]),
            "kvfs_register_device": (ctypes.c_int, [vp, vp, sz, P(u32)]),
            "kvfs_device_note": (ctypes.c_char_p, []),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib = lib
        return lib


def _check(rc, what):
    if rc < 0:
        raise OSError(-rc, "%s: %s" % (what, os.strerror(-rc)))
    return rc


def _name(n):
    b = os.fsencode(n)
    if b"\0" in b:
        raise ValueError("a key name cannot hold a NUL byte: %r" % (n,))
    return b


class BatchResult:
    """The outcome of one batch call. Indexing and iteration give each key's
    result (>= 0: success, < 0: -errno); `sizes` and `flags` are per key
    (value sizes where the daemon knows them, KEY_* bits); `ok` counts the
    successes, `prefix` the leading run of them (for lookup: how many leading
    blocks are stored), `bytes` the value bytes moved or found, `trace` the
    trace id the call carried, `ns` the daemon's time, `ioctls` how many
    ioctls the library sent."""

    def __init__(self, results, sizes, flags, nbytes, trace, ns, ioctls):
        self.results, self.sizes, self.flags = results, sizes, flags
        self.ok = sum(1 for r in results if r >= 0)
        self.prefix = next((i for i, r in enumerate(results) if r < 0), len(results))
        self.bytes, self.trace, self.ns, self.ioctls = nbytes, trace, ns, ioctls

    @classmethod
    def _from_c(cls, st, n, summary):
        return cls([st[i].ks_result for i in range(n)], [st[i].ks_size for i in range(n)],
                   [st[i].ks_flags for i in range(n)], summary.ksum_bytes, summary.ksum_trace,
                   summary.ksum_ns, summary.ksum_ioctls)

    @classmethod
    def _merge(cls, parts, trace):
        return cls([r for p in parts for r in p.results], [x for p in parts for x in p.sizes],
                   [x for p in parts for x in p.flags], sum(p.bytes for p in parts), trace,
                   sum(p.ns for p in parts), sum(p.ioctls for p in parts))

    def __len__(self):
        return len(self.results)

    def __getitem__(self, i):
        return self.results[i]

    def __iter__(self):
        return iter(self.results)

    def errors(self):
        """{index: errno name} of the keys that failed."""
        return {i: _errno.errorcode.get(-r, str(-r)) for i, r in enumerate(self.results) if r < 0}

    def __repr__(self):
        return "BatchResult(keys=%d, ok=%d, prefix=%d, bytes=%d, trace=%#x)" % (
            len(self.results), self.ok, self.prefix, self.bytes, self.trace)


class Region:
    """A registered range of memory: `id` (what layouts and iovs name),
    `kind` ("shm" from Client.alloc, "proc" from Client.register, "device"
    from Client.register_device), `size`,
    and for "shm" `buffer`, a writable memoryview of the shared memory —
    valid until the region is unregistered or the Client closed. `writable`
    is False for read-only memory (register(bytes, writable=False)): get()
    refuses to fill it."""

    def __init__(self, client, rid, kind, size, addr=None, pinned=None, writable=True):
        self.client, self.id, self.kind, self.size = client, rid, kind, size
        self.addr, self.writable = addr, writable
        self._pinned = pinned
        self.buffer = None
        if kind == "shm":
            self.buffer = memoryview((ctypes.c_char * size).from_address(addr)).cast("B")

    def unregister(self):
        self.client.unregister(self)

    def __repr__(self):
        return "Region(id=%d, kind=%s, size=%d)" % (self.id, self.kind, self.size)


class Layout:
    """A registered layout: `id`, `nblocks` (blocks inside every region), `block_len`."""

    def __init__(self, client, lid, nblocks, block_len, writable=True):
        self.client, self.id, self.nblocks, self.block_len = client, lid, nblocks, block_len
        self.writable = writable  # False when a segment lies in read-only memory

    def unregister(self):
        self.client.unregister_layout(self)

    def __repr__(self):
        return "Layout(id=%d, nblocks=%d, block_len=%d)" % (self.id, self.nblocks, self.block_len)


def _bytes_view(obj, writable):
    """A flat byte view of a contiguous buffer-protocol object."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError("%s does not support the buffer protocol" % type(obj).__name__)
    if writable and mv.readonly:
        raise TypeError("%s: need a writable buffer" % type(obj).__name__)
    if not mv.c_contiguous:
        raise TypeError("%s: need a C-contiguous buffer" % type(obj).__name__)
    return mv if (mv.format == "B" and mv.ndim == 1) else mv.cast("B")


def _rid(r):
    return r.id if isinstance(r, Region) else int(r)


class Client:
    """An open kvfs directory (`path`: the mount or any directory in it;
    key names are relative to it). Use as a context manager, or call
    close(). Raises OSError(ENOTTY) when `path` is not in a kvfs mount."""

    def __init__(self, path, lib=None):
        self._lib = load(lib)
        self._h = ctypes.c_void_p()
        _check(self._lib.kvfs_open(os.fsencode(path), ctypes.byref(self._h)), str(path))
        self._regions = {}
        self._lock = threading.Lock()  # guards _regions

    # -- handle --

    def close(self):
        """Releases every region and layout (shared memory from alloc() is
        unmapped) and closes the directory."""
        if self._h:
            h, self._h = self._h, ctypes.c_void_p()
            with self._lock:
                regions, self._regions = list(self._regions.values()), {}
            rc = self._lib.kvfs_close(h)
            for r in regions:
                if r._pinned:
                    r._pinned.release()
                r.buffer = None
            _check(rc, "kvfs_close")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def fileno(self):
        """The directory fd the handle holds (do not close it)."""
        return self._lib.kvfs_fd(self._h)

    def trace_next(self):
        """A fresh trace id, unique within the process."""
        return self._lib.kvfs_trace_next(self._h)

    def limits(self):
        """{'max_keys', 'max_segs', 'max_regions', 'path_max'} the daemon reported."""
        v = [ctypes.c_uint32() for _ in range(4)]
        self._lib.kvfs_limits(self._h, *[ctypes.byref(x) for x in v])
        return dict(zip(("max_keys", "max_segs", "max_regions", "path_max"),
                        [x.value for x in v]))

    # -- regions and layouts --

    def alloc(self, size, numa_node=-1):
        """Allocates `size` bytes (rounded up to pages) of NUMA-local,
        page-aligned shared memory and registers it (HOST_SHM): the fastest
        kind. Returns a Region; write and read it through region.buffer."""
        addr, rid = ctypes.c_void_p(), ctypes.c_uint32()
        _check(self._lib.kvfs_region_alloc(self._h, size, numa_node, ctypes.byref(addr),
                                           ctypes.byref(rid)), "kvfs_region_alloc")
        page = os.sysconf("SC_PAGE_SIZE")
        r = Region(self, rid.value, "shm", (size + page - 1) // page * page, addr.value)
        with self._lock:
            self._regions[r.id] = r
        return r

    def register(self, obj, writable=True):
        """Registers the memory of any contiguous buffer-protocol object
        (bytearray, memoryview, array.array, mmap, numpy array; bytes with
        writable=False, for puts only) as a HOST_PROC region, which the daemon
        reads and writes in place. The object is held (not resizable) until
        unregister(). Raises OSError(EPERM) when the daemon may not reach
        this process (see kvfs.h: ptrace rules) — use alloc() then."""
        p = _Pinned(obj, writable)
        if p.len == 0:
            p.release()
            raise ValueError("cannot register an empty buffer")
        rid = ctypes.c_uint32()
        rc = self._lib.kvfs_region_register(self._h, ctypes.c_void_p(p.addr), p.len,
                                            ctypes.byref(rid))
        if rc < 0:
            p.release()
            _check(rc, "kvfs_region_register")
        r = Region(self, rid.value, "proc", p.len, p.addr, p, writable)
        with self._lock:
            self._regions[r.id] = r
        return r

    def register_device(self, ptr, nbytes):
        """Registers `nbytes` of CUDA device memory at device address `ptr`
        (an int: a torch.Tensor's data_ptr() and nbytes, say) as a CUDA_IPC
        or CUDA_VMM region; libkvfs finds the allocation and its device.
        Synchronise the stream that wrote the memory before a put. Raises
        OSError(EOPNOTSUPP or ENODEV) with the reason where device memory
        cannot be registered (no CUDA in libkvfs or in the daemon, no driver)."""
        if nbytes <= 0:
            raise ValueError("cannot register an empty range")
        rid = ctypes.c_uint32()
        rc = self._lib.kvfs_register_device(self._h, ctypes.c_void_p(ptr), nbytes,
                                            ctypes.byref(rid))
        if rc < 0:
            note = self._lib.kvfs_device_note().decode()
            if rc == -_errno.EOPNOTSUPP and not note:
                note = "the daemon serves no device regions (--gpu=off, or no device there)"
            raise OSError(-rc, "kvfs_register_device: %s%s" % (
                os.strerror(-rc), ": " + note if note else ""))
        r = Region(self, rid.value, "device", nbytes, ptr)
        with self._lock:
            self._regions[r.id] = r
        return r

    def unregister(self, region):
        """Unregisters a Region (or region id); shared memory is unmapped."""
        rid = _rid(region)
        _check(self._lib.kvfs_region_unregister(self._h, rid), "kvfs_region_unregister")
        with self._lock:
            r = self._regions.pop(rid, None)
        if r is not None:
            if r._pinned:
                r._pinned.release()
            r.buffer = None

    def layout(self, segments):
        """Registers a layout: `segments` is a list of (region, base, stride,
        length); block b is the concatenation of [base + b*stride, +length) of
        each segment's region. Returns a Layout."""
        segs = (_Segment * len(segments))()
        total = 0
        for i, (reg, base, stride, length) in enumerate(segments):
            segs[i] = _Segment(_rid(reg), base, stride, length)
            total += length
        lid, nblocks = ctypes.c_uint32(), ctypes.c_uint64()
        _check(self._lib.kvfs_layout_register(self._h, segs, len(segments), ctypes.byref(lid),
                                              ctypes.byref(nblocks)), "kvfs_layout_register")
        writable = all(getattr(seg[0], "writable", True) for seg in segments)
        return Layout(self, lid.value, nblocks.value, total, writable)

    def unregister_layout(self, layout):
        """Unregisters a Layout (or layout id)."""
        lid = layout.id if isinstance(layout, Layout) else int(layout)
        _check(self._lib.kvfs_layout_unregister(self._h, lid), "kvfs_layout_unregister")

    # -- batches --

    def lookup(self, names, trace=0):
        """Which of `names` hold a complete value: result = size or -errno
        (-ENOENT absent, -EBUSY still being written); .prefix = leading hits."""
        names = [_name(n) for n in names]
        arr = (ctypes.c_char_p * len(names))(*names)
        st, s = (_Status * max(len(names), 1))(), _Summary()
        _check(self._lib.kvfs_lookup(self._h, arr, len(names), trace, st, ctypes.byref(s)),
               "kvfs_lookup")
        return BatchResult._from_c(st, len(names), s)

    def lookup_prefix(self, names, trace=0):
        """How many leading `names` are stored (a prompt's cached prefix);
        stops asking the daemon at the first miss."""
        names = [_name(n) for n in names]
        arr = (ctypes.c_char_p * max(len(names), 1))(*names)
        return _check(self._lib.kvfs_lookup_prefix(self._h, arr, len(names), trace),
                      "kvfs_lookup_prefix")

    def _keys(self, names, layout, blocks, iovs, fill=False):
        iovs = None if iovs is None else [list(lst) for lst in iovs]
        if fill and (not getattr(layout, "writable", True) or any(
                not getattr(r, "writable", True) for lst in (iovs or ()) for r, _, _ in lst)):
            raise ValueError("get into read-only memory")
        names = [_name(n) for n in names]
        n = len(names)
        keys = (_Key * max(n, 1))()
        keep = [names]
        if layout is not None:
            lid = layout.id if isinstance(layout, Layout) else int(layout)
            blocks = list(range(n)) if blocks is None else list(blocks)
            if len(blocks) != n:
                raise ValueError("%d names but %d blocks" % (n, len(blocks)))
            for i in range(n):
                keys[i] = _Key(names[i], lid, 0, blocks[i], None)
        elif iovs is not None:
            if len(iovs) != n:
                raise ValueError("%d names but %d iov lists" % (n, len(iovs)))
            for i, lst in enumerate(iovs):
                arr = (_Iov * len(lst))(*[_Iov(_rid(r), o, ln) for r, o, ln in lst])
                keep.append(arr)
                keys[i] = _Key(names[i], 0, len(lst), 0,
                               ctypes.cast(arr, ctypes.POINTER(_Iov)))
        else:
            raise ValueError("give layout= (and blocks=) or iovs=")
        return keys, n, keep

    def put(self, names, layout=None, blocks=None, iovs=None, flags=0, trace=0, event=None):
        """Stores each name's memory as its new value, atomically per key.
        Memory by layout (block blocks[i], default i) or by iovs[i], a list
        of (region, offset, length). flags: PUT_NOREPLACE, PUT_MKDIR.
        event: the 64 bytes of a cudaIpcEventHandle_t recorded after the work
        that produced device memory: the daemon's copies wait for it instead
        of the caller synchronising first (kvfs_put_event).
        result = bytes stored or -errno."""
        keys, n, _keep = self._keys(names, layout, blocks, iovs)
        st, s = (_Status * max(n, 1))(), _Summary()
        if event is not None:
            event = bytes(event)
            if len(event) != 64:
                raise ValueError("a CUDA IPC event handle is 64 bytes, not %d" % len(event))
            _check(self._lib.kvfs_put_event(self._h, keys, n, flags, event, trace, st,
                                            ctypes.byref(s)), "kvfs_put_event")
            return BatchResult._from_c(st, n, s)
        _check(self._lib.kvfs_put(self._h, keys, n, flags, trace, st, ctypes.byref(s)),
               "kvfs_put")
        return BatchResult._from_c(st, n, s)

    def get(self, names, layout=None, blocks=None, iovs=None, trace=0):
        """Copies each name's value into its memory (layout or iovs as for
        put); the memory's length must equal the value's size (-EMSGSIZE
        otherwise, with sizes[i] the value's size). result = bytes or -errno."""
        keys, n, _keep = self._keys(names, layout, blocks, iovs, fill=True)
        st, s = (_Status * max(n, 1))(), _Summary()
        _check(self._lib.kvfs_get(self._h, keys, n, trace, st, ctypes.byref(s)), "kvfs_get")
        return BatchResult._from_c(st, n, s)

    _STAGE_MAX = 64 << 20  # bytes of one staging region

    def _staged(self, items, writable, trace, run):
        """Runs a put or get of (name, buffer) pairs through staging shared
        memory: one region per call (per 64 MiB of buffers), whatever the
        number of buffers, so many small buffers or many threads never run
        into the daemon's regions-per-process limit."""
        items = [(n, _bytes_view(o, writable)) for n, o in items]
        trace = trace or self.trace_next()
        parts, i = [], 0
        while i < len(items) or not parts:
            j, total = i, 0
            while j < len(items) and (j == i or total + items[j][1].nbytes <= self._STAGE_MAX):
                total += items[j][1].nbytes
                j += 1
            chunk, offs, off = items[i:j], [], 0
            for _, v in chunk:
                offs.append(off)
                off += v.nbytes
            reg = self.alloc(max(total, 1))
            try:
                parts.append(run(reg, chunk, offs, trace))
            finally:
                self.unregister(reg)
            i = j
        return BatchResult._merge(parts, trace)

    @staticmethod
    def _iovs(reg, chunk, offs):
        return [[(reg, o, v.nbytes)] if v.nbytes else [] for (_, v), o in zip(chunk, offs)]

    def put_buffers(self, items, flags=0, trace=0):
        """Stores (name, buffer) pairs: any contiguous buffer-protocol objects
        (bytes, bytearray, memoryview, array.array, numpy arrays). The bytes
        are copied into one staging shared-memory region per call, so any
        number of buffers works; to store from memory without that copy,
        register() it once and put() with iovs or a layout. An empty buffer
        fails its key with -EINVAL: the daemon takes no key without memory,
        so an empty value is made with open()/close() instead."""
        def run(reg, chunk, offs, tr):
            for (_, v), o in zip(chunk, offs):
                reg.buffer[o:o + v.nbytes] = v
            return self.put([n for n, _ in chunk], iovs=self._iovs(reg, chunk, offs),
                            flags=flags, trace=tr)
        return self._staged(items, False, trace, run)

    def get_into(self, items, trace=0):
        """Fills (name, writable buffer) pairs with the names' values; each
        buffer must be exactly the value's size (-EMSGSIZE otherwise, and the
        buffer is left alone). Staged like put_buffers."""
        def run(reg, chunk, offs, tr):
            r = self.get([n for n, _ in chunk], iovs=self._iovs(reg, chunk, offs), trace=tr)
            for (_, v), o, res in zip(chunk, offs, r.results):
                if res >= 0:
                    v[:] = reg.buffer[o:o + v.nbytes]
            return r
        return self._staged(items, True, trace, run)

    def remove(self, names, recursive=False, trace=0):
        """Removes names as unlink() would (recursive: directories as rm -rf).
        result = keys removed or -errno."""
        names = [_name(n) for n in names]
        arr = (ctypes.c_char_p * max(len(names), 1))(*names)
        st, s = (_Status * max(len(names), 1))(), _Summary()
        _check(self._lib.kvfs_remove(self._h, arr, len(names), REMOVE_RECURSIVE if recursive
                                     else 0, trace, st, ctypes.byref(s)), "kvfs_remove")
        return BatchResult._from_c(st, len(names), s)

    def remove_prefix(self, prefix, trace=0):
        """Removes the directory `prefix` and every key below it. Returns the
        number of keys removed; raises OSError (ENOENT, ENOTDIR, ...)."""
        return _check(self._lib.kvfs_remove_prefix(self._h, _name(prefix), trace),
                      "kvfs_remove_prefix(%s)" % prefix)
