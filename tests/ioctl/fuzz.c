/* SPDX-License-Identifier: MIT */
/*
 * tests/ioctl/fuzz.c — random and adversarial ioctls against a live daemon.
 *
 * ioctl_e2e fuzz DIR N SEED sends N ioctls built from a seeded generator:
 * unknown command numbers and sizes, known commands full of random bytes,
 * valid headers with random bodies, and structured batches and
 * registrations whose every field is drawn from valid values, boundary
 * values (0, the last valid one, one past it, UINT64_MAX) and noise. Each
 * answer must be a documented errno (or success, with documented per-key
 * results). Around the registered ranges lie guard bytes, and outside DIR
 * lie canary keys: both must be unchanged at the end, so a daemon that
 * wrote outside a registered range or escaped DIR is caught. The tally of
 * what was sent is printed for the driver to compare with the daemon's
 * statistics.
 */
#include <stdbool.h>
#include <sys/stat.h>

#include "ioc_util.h"

#define RLEN	 (256u << 10) /* registered bytes of each region */
#define NCANARY	 8
#define MAXFRESH 8 /* registrations the fuzzer keeps before unregistering */

struct fz {
	uint64_t s; /* xorshift state */
	int dirfd, rootfd, filefd, ctlfd;
	uint32_t rs, rp, layout, fresh[MAXFRESH];
	int nfresh;
	char shm[64], shm_other[64];
	char *smem, *pmem; /* 3 * RLEN each: guard, registered, guard */
	uint8_t *buf;	   /* the ioctl argument, 16 KiB */
};

static uint64_t rnd(struct fz *f)
{
	f->s ^= f->s << 13;
	f->s ^= f->s >> 7;
	f->s ^= f->s << 17;
	return f->s;
}

static uint64_t below(struct fz *f, uint64_t n)
{
	return n ? rnd(f) % n : 0;
}

/* A value for a 64-bit offset, length, block or address field. */
static uint64_t pick64(struct fz *f, uint64_t valid_end)
{
	switch (below(f, 8)) {
	case 0:
		return 0;
	case 1:
		return valid_end ? valid_end - 1 : 0;
	case 2:
		return valid_end;
	case 3:
		return valid_end + 1;
	case 4:
		return UINT64_MAX - below(f, 16);
	case 5:
		return 1ull << below(f, 64);
	case 6:
		return rnd(f);
	default:
		return below(f, valid_end + 1);
	}
}

static uint32_t pick_id(struct fz *f)
{
	switch (below(f, 6)) {
	case 0:
		return f->rs;
	case 1:
		return f->rp;
	case 2:
		return f->layout;
	case 3:
		return 0;
	case 4:
		return f->nfresh ? f->fresh[below(f, (uint64_t)f->nfresh)] : 1;
	default:
		return (uint32_t)rnd(f);
	}
}

static const char *const good_names[] = {
    "a", "b/c", "k7", "x/y/z", "deep/er/and/deeper/still", "same", "same/sub",
};

/* Writes a name into p (room for max); returns its length. */
static size_t pick_name(struct fz *f, char *p, size_t max)
{
	static const char *const bad[] = {
	    "..", ".", "../canary/c0", "a//b", "/abs", "trail/", ".kvfs", ".kvfs/stats", "a/./b",
	};
	size_t n;

	const char *pick;

	switch (below(f, 5)) {
	case 0:
	case 1:
	case 2:
		pick = below(f, 3)
			   ? good_names[below(f, sizeof(good_names) / sizeof(good_names[0]))]
			   : bad[below(f, sizeof(bad) / sizeof(bad[0]))];
		n = strlen(pick) < max ? strlen(pick) : max;
		memcpy(p, pick, n);
		return n;
	case 3: /* long components and paths */
		n = below(f, 1100) + 1;
		n = n < max ? n : max;
		memset(p, 'L', n);
		for (size_t i = 0; i < n; i += below(f, 300) + 1)
			p[i] = '/';
		return n;
	default: /* noise, NUL and '/' included */
		n = below(f, 40);
		n = n < max ? n : max;
		for (size_t i = 0; i < n; i++)
			p[i] = (char)(below(f, 4) ? 'a' + below(f, 26) : rnd(f));
		return n;
	}
}

static bool key_errno_ok(int64_t r)
{
	switch (-r) {
	case EINVAL:
	case ENAMETOOLONG:
	case EBADF:
	case EPERM:
	case EFAULT:
	case ENOENT:
	case ENOTDIR:
	case EISDIR:
	case EIO:
	case ENOSPC:
	case EEXIST:
	case EBUSY:
	case EMSGSIZE:
	case ENOTEMPTY:
	case ENOMEM:
		return true;
	default:
		return false;
	}
}

static bool ioctl_errno_ok(int err)
{
	switch (-err) {
	case ENOTTY:
	case EINVAL:
	case EPROTO:
	case E2BIG:
	case ENOTDIR:
	case EBADF:
	case EPERM:
	case EBUSY:
	case EFAULT:
	case EOPNOTSUPP:
	case EMFILE:
	case ENOENT:
	case ENAMETOOLONG:
	case ESRCH:
	case EACCES:
	case ENOSPC:
	case ENOMEM:
	case ENODEV: /* a device region naming no device of the daemon's */
		return true;
	default:
		return false;
	}
}

static const unsigned long cmds[] = {
    KVFS_IOC_VERSION,
    KVFS_IOC_REGION_REGISTER,
    KVFS_IOC_REGION_UNREGISTER,
    KVFS_IOC_LAYOUT_REGISTER,
    KVFS_IOC_LAYOUT_UNREGISTER,
    KVFS_IOC_LOOKUP,
    KVFS_IOC_PUT,
    KVFS_IOC_GET,
    KVFS_IOC_REMOVE,
};

/* A batch whose every field is drawn from valid, boundary and noise values. */
static void gen_batch(struct fz *f, unsigned long cmd, struct kvfs_ioc_batch *bt)
{
	uint32_t nkeys = below(f, 8) ? (uint32_t)below(f, 300) + 1 : (uint32_t)rnd(f);
	uint32_t cap = nkeys <= KVFS_BATCH_MAX_KEYS ? nkeys : 1,
		 heap = cap * sizeof(struct kvfs_ioc_key);

	memset(bt, 0, sizeof(*bt));
	hdr_init(&bt->bt_hdr, sizeof(*bt), rnd(f));
	bt->bt_nkeys = nkeys;
	/* Mostly the flags the command takes (so that batches run), sometimes any. */
	bt->bt_flags = below(f, 10) == 0	? (uint32_t)rnd(f)
		       : cmd == KVFS_IOC_PUT	? (uint32_t)below(f, 4)
		       : cmd == KVFS_IOC_REMOVE ? (uint32_t)below(f, 2)
						: 0;
	if (!below(f, 20))
		bt->bt_hdr.ih_version = (uint32_t)rnd(f);
	for (uint32_t i = 0; i < cap; i++) {
		struct kvfs_ioc_key k = {0};
		size_t room = heap < KVFS_BATCH_DATA_SIZE ? KVFS_BATCH_DATA_SIZE - heap : 0;

		if (below(f, 3)) {
			k.ik_layout = below(f, 2) ? f->layout : pick_id(f);
			k.ik_block = pick64(f, RLEN / 4096);
		} else if (room > 64) {
			uint16_t niov = (uint16_t)(below(f, 6) ? below(f, 4) + 1 : below(f, 400));
			uint32_t off = (heap + 7) & ~7u;

			if (below(f, 10) == 0)
				off += (uint32_t)below(f, 8);
			k.ik_iov_off = (uint16_t)off;
			k.ik_niov = niov;
			for (uint16_t v = 0;
			     v < niov && off + (v + 1) * 24u <= KVFS_BATCH_DATA_SIZE; v++) {
				struct kvfs_ioc_iov iv = {
				    .iv_region = pick_id(f),
				    .iv_pad = below(f, 30) ? 0 : (uint32_t)rnd(f),
				    .iv_offset = pick64(f, RLEN),
				    .iv_length = below(f, 3) ? below(f, 8192) + 1 : pick64(f, RLEN),
				};

				memcpy(bt->bt_data + off + v * 24u, &iv, sizeof(iv));
				heap = off + (v + 1) * 24u;
			}
		}
		room = heap < KVFS_BATCH_DATA_SIZE ? KVFS_BATCH_DATA_SIZE - heap : 0;
		k.ik_name_off = (uint16_t)heap;
		k.ik_name_len = (uint16_t)pick_name(f, (char *)bt->bt_data + heap, room);
		heap += k.ik_name_len;
		if (!below(f, 15)) { /* point the name anywhere, even into the keys */
			k.ik_name_off = (uint16_t)rnd(f);
			k.ik_name_len = (uint16_t)rnd(f);
		}
		memcpy(bt->bt_data + i * sizeof(k), &k, sizeof(k));
	}
}

/*
 * A registration. Ranges that could succeed lie inside the middle third of
 * the fuzzer's buffers (so the guards stay unregistered); the others are
 * out of range, overflowing, unmapped or someone else's.
 */
/*
 * Turns rg into a device registration (CUDA_IPC or CUDA_VMM): a UUID that
 * names no device, is zero or is noise; a handle of noise, zero or all
 * ones; an fd of the fuzzer's (no CUDA handle), none, negative or huge;
 * offsets and lengths drawn like the host kinds'; now and then a host
 * field or the pad set. With or without a device in the daemon each must
 * fail with a documented errno, never succeed: no handle here is real.
 */
static void gen_device_region(struct fz *f, struct kvfs_ioc_region *rg)
{
	uint64_t c = below(f, 8);

	memset((char *)rg + sizeof(rg->rg_hdr), 0, sizeof(*rg) - sizeof(rg->rg_hdr));
	rg->rg_kind = below(f, 2) ? KVFS_REGION_CUDA_IPC : KVFS_REGION_CUDA_VMM;
	rg->rg_offset = pick64(f, RLEN);
	rg->rg_length = pick64(f, RLEN);
	if (c < 5)
		for (int i = 0; i < 16; i++)
			rg->rg_dev_uuid[i] = (uint8_t)rnd(f);
	else if (c == 5)
		memset(rg->rg_dev_uuid, 0xff, 16);
	c = below(f, 6);
	if (rg->rg_kind == KVFS_REGION_CUDA_IPC || c == 5)
		for (int i = 0; i < 64; i++)
			rg->rg_ipc_handle[i] = c < 3 ? (uint8_t)rnd(f) : c == 4 ? 0xff : 0;
	c = below(f, 6);
	if (rg->rg_kind == KVFS_REGION_CUDA_VMM || c == 5)
		rg->rg_fd = c < 2    ? f->dirfd
			    : c == 2 ? -1 - (int32_t)below(f, 3)
			    : c == 3 ? (int32_t)(rnd(f) >> 34)
				     : f->filefd;
	if (!below(f, 12))
		rg->rg_addr = (uintptr_t)f->pmem;
	if (!below(f, 12))
		snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s", f->shm);
	if (!below(f, 12))
		rg->rg_pad = 1;
}

static void gen_region(struct fz *f, struct kvfs_ioc_region *rg)
{
	static const char *const names[] = {"", "/", "noslash", "/a/b", "/..", "/nonexistent"};
	static const uint64_t far[] = {3 * RLEN, 3 * RLEN + 1, 1ull << 63, UINT64_MAX - 4096,
				       UINT64_MAX};
	uint64_t in = below(f, RLEN);

	memset(rg, 0, sizeof(*rg));
	hdr_init(&rg->rg_hdr, sizeof(*rg), rnd(f));
	rg->rg_kind = below(f, 4) ? (uint32_t)below(f, 2) + 1 : (uint32_t)below(f, 8);
	if (below(f, 3)) {
		rg->rg_length = below(f, RLEN - in) + 1;
	} else {
		in = 0;
		/* Past the object's end, or overflowing (a process range must overflow). */
		rg->rg_length = rg->rg_kind == KVFS_REGION_HOST_SHM && below(f, 2)
				    ? 2 * RLEN + 1
				    : UINT64_MAX - below(f, 2);
	}
	if (rg->rg_kind == KVFS_REGION_HOST_SHM) {
		uint64_t c = below(f, 10);

		rg->rg_offset = below(f, 4) ? RLEN + in : far[below(f, 5)];
		if (c < 4)
			snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s", f->shm);
		else if (c < 6)
			snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s", f->shm_other);
		else if (c < 9)
			snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s",
				 names[below(f, 6)]);
		else
			memset(rg->rg_shm_name, 'n', sizeof(rg->rg_shm_name));
	} else {
		uint64_t c = below(f, 6);

		rg->rg_addr = c < 3    ? (uintptr_t)f->pmem + RLEN + in
			      : c == 3 ? 0xffffffffff600000ull + below(f, 4096)
			      : c == 4 ? below(f, 1 << 16)
				       : rnd(f) | 1ull << 63;
	}
	if (!below(f, 10))
		rg->rg_pad = (uint32_t)rnd(f);
	if (!below(f, 10))
		rg->rg_ipc_handle[below(f, 64)] = 1;
	if (!below(f, 4))
		gen_device_region(f, rg);
}

static void gen_layout(struct fz *f, struct kvfs_ioc_layout *ly)
{
	memset(ly, 0, sizeof(*ly));
	hdr_init(&ly->ly_hdr, sizeof(*ly), rnd(f));
	ly->ly_nsegs = below(f, 6) ? (uint32_t)below(f, 8) + 1 : (uint32_t)pick64(f, 256);
	for (uint32_t i = 0; i < ly->ly_nsegs && i < KVFS_LAYOUT_MAX_SEGS; i++)
		ly->ly_segs[i] = (struct kvfs_ioc_seg){
		    .sg_region = pick_id(f),
		    .sg_pad = below(f, 20) ? 0 : 1,
		    .sg_base = below(f, 2) ? below(f, RLEN) : pick64(f, RLEN),
		    .sg_stride = below(f, 2) ? 4096 : pick64(f, RLEN),
		    .sg_length = below(f, 2) ? 4096 : pick64(f, RLEN),
		};
	if (!below(f, 10))
		ly->ly_id = 1;
}

static void unreg_any(struct fz *f, int fd, uint32_t id)
{
	struct kvfs_ioc_id x = {.id_hdr = {sizeof(x), KVFS_IOC_ABI_VERSION, 0}, .id_id = id};

	ioc(fd, KVFS_IOC_LAYOUT_UNREGISTER, &x);
	ioc(fd, KVFS_IOC_REGION_UNREGISTER, &x);
}

/* Keeps what a random registration made, unregistering the oldest beyond MAXFRESH. */
static void keep_fresh(struct fz *f, int fd, uint32_t id)
{
	if (f->nfresh == MAXFRESH) {
		unreg_any(f, fd, f->fresh[0]);
		memmove(f->fresh, f->fresh + 1, (MAXFRESH - 1) * sizeof(f->fresh[0]));
		f->nfresh--;
	}
	f->fresh[f->nfresh++] = id;
}

static int pick_fd(struct fz *f, unsigned long cmd)
{
	uint64_t c = below(f, 20);
	bool destructive = cmd == KVFS_IOC_PUT || cmd == KVFS_IOC_REMOVE;

	if (c == 0)
		return f->filefd;
	if (c == 1)
		return f->ctlfd;
	if (c == 2 && !destructive)
		return f->rootfd; /* names there must not escape into the canaries: reads only */
	return f->dirfd;
}

static void one(struct fz *f, long i)
{
	unsigned long cmd = cmds[below(f, sizeof(cmds) / sizeof(cmds[0]))];
	uint64_t how = below(f, 10);
	int fd = pick_fd(f, cmd), err;

	if (how == 0) { /* an unknown number or size in our type, or a known one's neighbour */
		cmd =
		    _IOC(below(f, 4), KVFS_IOC_MAGIC, below(f, 3) ? below(f, 0x20) : below(f, 256),
			 below(f, 2) ? below(f, 16384) : _IOC_SIZE(cmd) + 8 * below(f, 3) - 8);
		for (size_t k = 0; k < 64; k++)
			f->buf[k] = (uint8_t)rnd(f);
	} else if (how == 1) { /* a known command, random bytes */
		for (size_t k = 0; k < _IOC_SIZE(cmd); k++)
			f->buf[k] = (uint8_t)rnd(f);
	} else if (cmd == KVFS_IOC_LOOKUP || cmd == KVFS_IOC_PUT || cmd == KVFS_IOC_GET ||
		   cmd == KVFS_IOC_REMOVE) {
		gen_batch(f, cmd, (struct kvfs_ioc_batch *)f->buf);
	} else if (cmd == KVFS_IOC_REGION_REGISTER) {
		gen_region(f, (struct kvfs_ioc_region *)f->buf);
	} else if (cmd == KVFS_IOC_LAYOUT_REGISTER) {
		gen_layout(f, (struct kvfs_ioc_layout *)f->buf);
	} else {
		struct kvfs_ioc_id *x = (struct kvfs_ioc_id *)f->buf;

		memset(f->buf, 0, 64);
		hdr_init(&x->id_hdr, sizeof(*x), rnd(f));
		x->id_id = pick_id(f);
		/* Never drop the fuzzer's own fixtures. */
		if (x->id_id == f->rs || x->id_id == f->rp || x->id_id == f->layout)
			x->id_id ^= 1u << 31;
		x->id_pad = below(f, 10) ? 0 : 1;
	}
	if (how != 0 && !below(f, 30))
		((struct kvfs_ioc_hdr *)f->buf)->ih_size = (uint32_t)rnd(f);
	err = ioc(fd, cmd, f->buf);
	CHECK(err == 0 || ioctl_errno_ok(err), "ioctl %ld (cmd %#lx): unexpected %s", i, cmd,
	      strerror(-err));
	if (err)
		return;
	if (cmd == KVFS_IOC_REGION_REGISTER) {
		uint32_t kind = ((struct kvfs_ioc_region *)f->buf)->rg_kind;

		CHECK(kind != KVFS_REGION_CUDA_IPC && kind != KVFS_REGION_CUDA_VMM,
		      "ioctl %ld: a made-up device registration succeeded", i);
		keep_fresh(f, fd, ((struct kvfs_ioc_region *)f->buf)->rg_id);
	} else if (cmd == KVFS_IOC_LAYOUT_REGISTER)
		keep_fresh(f, fd, ((struct kvfs_ioc_layout *)f->buf)->ly_id);
	else if (_IOC_NR(cmd) >= 0x10 && _IOC_NR(cmd) <= 0x13) {
		const struct kvfs_ioc_batch *bt = (const struct kvfs_ioc_batch *)f->buf;

		for (uint32_t k = 0; k < bt->bt_nkeys; k++) {
			int64_t r = bt_key(bt, k).ik_result;

			CHECK(r >= 0 || key_errno_ok(r), "ioctl %ld key %u: unexpected %lld", i, k,
			      (long long)r);
		}
	}
}

static void canary_name(char *p, size_t n, const char *dir, int i)
{
	snprintf(p, n, "%s/../canary/c%d", dir, i);
}

int fuzz_main(const char *dir, long n, unsigned long seed)
{
	struct fz f = {.s = seed * 2654435761u + 88172645463325252ull};
	struct kvfs_ioc_seg segs[2];
	uint64_t blen, nb;
	char path[4096];
	char *guard_s, *guard_p, *canary;
	int fd;

	f.dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(f.dirfd >= 0, "open %s", dir);
	snprintf(path, sizeof(path), "%s/..", dir);
	f.rootfd = open(path, O_RDONLY | O_DIRECTORY);
	snprintf(path, sizeof(path), "%s/fuzzfile", dir);
	f.filefd = open(path, O_RDWR | O_CREAT, 0644);
	snprintf(path, sizeof(path), "%s/../.kvfs/stats", dir);
	f.ctlfd = open(path, O_RDONLY);
	CHECK(f.rootfd >= 0 && f.filefd >= 0 && f.ctlfd >= 0, "fuzz fds");
	f.buf = aligned_alloc(4096, 16384);
	CHECK(f.buf, "out of memory");

	/* Canary keys beside DIR: nothing in DIR may reach them. */
	snprintf(path, sizeof(path), "%s/../canary", dir);
	mkdir(path, 0755);
	canary = malloc(65536);
	for (int i = 0; i < NCANARY; i++) {
		canary_name(path, sizeof(path), dir, i);
		fill_rand(canary, 65536, 500 + (uint64_t)i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		CHECK(fd >= 0 && write(fd, canary, 65536) == 65536 && close(fd) == 0, "canary");
	}

	/* Two regions, each with a guard of RLEN bytes on either side. */
	snprintf(f.shm, sizeof(f.shm), "/kvfs-fuzz-%d", (int)getpid());
	snprintf(f.shm_other, sizeof(f.shm_other), "/kvfs-fuzz-other-%d", (int)getpid());
	f.smem = shm_make(f.shm, 3 * RLEN);
	shm_make(f.shm_other, RLEN);
	fd = shm_open(f.shm_other, O_RDWR, 0);
	CHECK(fd >= 0 && fchown(fd, 65534, 65534) == 0, "chown the other user's object");
	close(fd);
	f.pmem = aligned_alloc(4096, 3 * RLEN);
	CHECK(f.pmem, "out of memory");
	fill_rand(f.smem, 3 * RLEN, 41);
	fill_rand(f.pmem, 3 * RLEN, 42);
	guard_s = malloc(3 * RLEN);
	guard_p = malloc(3 * RLEN);
	memcpy(guard_s, f.smem, 3 * RLEN);
	memcpy(guard_p, f.pmem, 3 * RLEN);
	CHECK(reg_shm(f.dirfd, f.shm, RLEN, RLEN, &f.rs) == 0, "reg shm");
	CHECK(reg_proc(f.dirfd, f.pmem + RLEN, RLEN, &f.rp) == 0, "reg proc");
	segs[0] = (struct kvfs_ioc_seg){.sg_region = f.rs, .sg_stride = 4096, .sg_length = 4096};
	segs[1] = (struct kvfs_ioc_seg){.sg_region = f.rp, .sg_stride = 4096, .sg_length = 4096};
	CHECK(reg_layout(f.dirfd, segs, 2, &f.layout, &blen, &nb) == 0, "fuzz layout");

	for (long i = 0; i < n; i++)
		one(&f, i);

	/* The daemon wrote nothing outside the registered ranges, nothing beside DIR. */
	CHECK(!memcmp(guard_s, f.smem, RLEN) &&
		  !memcmp(guard_s + 2 * RLEN, f.smem + 2 * RLEN, RLEN),
	      "a shared-memory guard changed");
	CHECK(!memcmp(guard_p, f.pmem, RLEN) &&
		  !memcmp(guard_p + 2 * RLEN, f.pmem + 2 * RLEN, RLEN),
	      "a process-memory guard changed");
	for (int i = 0; i < NCANARY; i++) {
		char *got = malloc(65537);
		ssize_t m, k = 0;

		canary_name(path, sizeof(path), dir, i);
		fill_rand(canary, 65536, 500 + (uint64_t)i);
		fd = open(path, O_RDONLY);
		CHECK(fd >= 0, "canary %d gone", i);
		while ((m = read(fd, got + k, 65537 - (size_t)k)) > 0)
			k += m;
		close(fd);
		CHECK(k == 65536 && !memcmp(got, canary, 65536), "canary %d changed", i);
		free(got);
	}
	shm_unlink(f.shm);
	shm_unlink(f.shm_other);
	close(f.filefd);
	close(f.ctlfd);
	close(f.rootfd);
	close(f.dirfd);
	tally_print();
	printf("ok\n");
	return 0;
}
