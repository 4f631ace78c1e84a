/* SPDX-License-Identifier: MIT */
/*
 * tests/ioctl/ioctl_e2e.c — the ioctl path end to end, with raw ioctls.
 *
 *   ioctl_e2e e2e DIR        regions, layouts, put/lookup/get/remove, read()
 *                            and write() cross-checks, per-key errors
 *   ioctl_e2e atomic DIR     lookups and gets racing puts of the same keys
 *   ioctl_e2e isolation DIR  a second process naming the first's regions
 *   ioctl_e2e hold DIR       registers regions, prints "ready", then puts
 *                            forever (killed by the test mid-batch)
 *   ioctl_e2e fuzz DIR N SEED [MODEL first|next|verify]
 *                            N random and adversarial ioctls checked against a
 *                            model of the keys, carried in MODEL from one mount
 *                            of the same data to the next (tests/ioctl/fuzz.c)
 *
 * DIR is a directory inside a kvfs mount. Exit status 0 when every check
 * held; a failed check prints where and exits 1. Lines "key=value" on
 * stdout report what the Python driver (tests/integration/test_ioctl.py)
 * checks against the daemon's statistics.
 */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "ioc_util.h"

#define NSEG   64
#define NBLK   512
#define PERBAT 100

int fuzz_main(const char *dir, long n, unsigned long seed, const char *model, const char *phase);

struct tally tally;

/* A layout as the test knows it: each segment's memory in this process. */
struct tlayout {
	uint32_t id;
	uint64_t block_len;
	struct kvfs_ioc_seg seg[NSEG];
	char *base[NSEG]; /* the segment's region, mapped (or owned) here */
};

static uint32_t seg_len(int i)
{
	return 256u * (1u + (uint32_t)(i * 7) % 8u);
}

/*
 * Lays NSEG segments over nr regions (segment i on region i % nr), blocks
 * packed one after the other in each region. Sets the regions' sizes.
 */
static void plan(struct tlayout *l, int nr, uint64_t stride[])
{
	memset(stride, 0, sizeof(uint64_t) * (size_t)nr);
	l->block_len = 0;
	for (int i = 0; i < NSEG; i++) {
		int r = i % nr;

		l->seg[i] = (struct kvfs_ioc_seg){.sg_base = stride[r], .sg_length = seg_len(i)};
		stride[r] += seg_len(i);
		l->block_len += seg_len(i);
	}
	for (int i = 0; i < NSEG; i++)
		l->seg[i].sg_stride = stride[i % nr];
}

/* Copies block b of a layout out of this process's view of its regions. */
static void gather(const struct tlayout *l, uint64_t b, char *out)
{
	for (int i = 0; i < NSEG; i++) {
		memcpy(out, l->base[i] + l->seg[i].sg_base + b * l->seg[i].sg_stride,
		       l->seg[i].sg_length);
		out += l->seg[i].sg_length;
	}
}

static struct kvfs_ioc_batch *batch_new(void)
{
	struct kvfs_ioc_batch *bt = malloc(sizeof(*bt));

	CHECK(bt, "out of memory");
	return bt;
}

/* Puts (or gets) blocks [first, first + n) as keys e2e/blkNNNN through layout l. */
static void put_get_blocks(int dirfd, unsigned long cmd, const struct tlayout *l, int first, int n,
			   uint32_t flags)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct bt_build b;
	char name[64];

	for (int done = 0; done < n; done += PERBAT) {
		int m = n - done < PERBAT ? n - done : PERBAT;

		bt_init(&b, bt, (uint32_t)m, 1000 + (uint64_t)done, flags);
		for (int i = 0; i < m; i++) {
			snprintf(name, sizeof(name), "e2e/blk%04d", first + done + i);
			CHECK(bt_add(&b, name, l->id, (uint64_t)(first + done + i), NULL, 0) == i,
			      "batch full at %d", i);
		}
		CHECK(ioc(dirfd, cmd, bt) == 0, "batch ioctl: %s", strerror(errno));
		CHECK(bt->bt_ok == (uint32_t)m && bt->bt_prefix == (uint32_t)m,
		      "ok %u prefix %u of %d", bt->bt_ok, bt->bt_prefix, m);
		CHECK(bt->bt_bytes == (uint64_t)m * l->block_len, "bytes %llu",
		      (unsigned long long)bt->bt_bytes);
		for (int i = 0; i < m; i++)
			CHECK(bt_key(bt, (uint32_t)i).ik_result == (int64_t)l->block_len,
			      "key %d: %lld", i, (long long)bt_key(bt, (uint32_t)i).ik_result);
	}
	free(bt);
}

/* Reads a whole file with read(); returns its size (buf holds cap bytes). */
static ssize_t read_whole(const char *dir, const char *name, char *buf, size_t cap)
{
	char path[4096];
	ssize_t n, got = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	while ((n = read(fd, buf + got, cap - (size_t)got)) > 0)
		got += n;
	close(fd);
	return n < 0 ? -errno : got;
}

static void write_whole(const char *dir, const char *name, const char *buf, size_t len)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	CHECK(write(fd, buf, len) == (ssize_t)len, "write %s", path);
	/* The kernel reports the last close later, on its own: fsync seals the value now. */
	CHECK(fsync(fd) == 0, "fsync %s", path);
	CHECK(close(fd) == 0, "close");
}

/* One batch of a single kind with the given names; returns the batch (caller frees). */
static struct kvfs_ioc_batch *run_names(int dirfd, unsigned long cmd, uint32_t flags,
					const char *const *names, int n)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct bt_build b;

	bt_init(&b, bt, (uint32_t)n, 7, flags);
	for (int i = 0; i < n; i++)
		CHECK(bt_add(&b, names[i], 0, 0, NULL, 0) == i, "add %s", names[i]);
	CHECK(ioc(dirfd, cmd, bt) == 0, "batch: %s", strerror(errno));
	return bt;
}

struct e2e {
	const char *dir;
	int dirfd;
	char shm[4][64];
	char *a, *b, *c, *p, *q; /* src: a, b (shm), p (proc); dst: c (shm), q (proc) */
	uint32_t ra, rb, rc, rp, rq;
	struct tlayout src, dst;
	char *want, *got;
};

static void e2e_regions(struct e2e *e)
{
	uint64_t ss[3], ds[2], nblocks;

	plan(&e->src, 3, ss);
	plan(&e->dst, 2, ds);
	for (int i = 0; i < 3; i++)
		snprintf(e->shm[i], sizeof(e->shm[i]), "/kvfs-e2e-%d-%d", (int)getpid(), i);
	e->a = shm_make(e->shm[0], ss[0] * NBLK);
	e->b = shm_make(e->shm[1], ss[1] * NBLK);
	e->c = shm_make(e->shm[2], ds[0] * NBLK);
	e->p = aligned_alloc(4096, (ss[2] * NBLK + 4095) / 4096 * 4096);
	e->q = aligned_alloc(4096, (ds[1] * NBLK + 4095) / 4096 * 4096);
	CHECK(e->p && e->q, "out of memory");
	fill_rand(e->a, ss[0] * NBLK, 1);
	fill_rand(e->b, ss[1] * NBLK, 2);
	fill_rand(e->p, ss[2] * NBLK, 3);
	CHECK(reg_shm(e->dirfd, e->shm[0], 0, ss[0] * NBLK, &e->ra) == 0, "reg a: %s",
	      strerror(errno));
	CHECK(reg_shm(e->dirfd, e->shm[1], 0, ss[1] * NBLK, &e->rb) == 0, "reg b");
	CHECK(reg_shm(e->dirfd, e->shm[2], 0, ds[0] * NBLK, &e->rc) == 0, "reg c");
	CHECK(reg_proc(e->dirfd, e->p, ss[2] * NBLK, &e->rp) == 0, "reg p: %s", strerror(errno));
	CHECK(reg_proc(e->dirfd, e->q, ds[1] * NBLK, &e->rq) == 0, "reg q: %s", strerror(errno));
	for (int i = 0; i < NSEG; i++) {
		uint32_t sr[3] = {e->ra, e->rb, e->rp}, dr[2] = {e->rc, e->rq};
		char *sb[3] = {e->a, e->b, e->p}, *db[2] = {e->c, e->q};

		e->src.seg[i].sg_region = sr[i % 3];
		e->src.base[i] = sb[i % 3];
		e->dst.seg[i].sg_region = dr[i % 2];
		e->dst.base[i] = db[i % 2];
	}
	CHECK(reg_layout(e->dirfd, e->src.seg, NSEG, &e->src.id, &e->src.block_len, &nblocks) == 0,
	      "src layout: %s", strerror(errno));
	CHECK(nblocks == NBLK, "src nblocks %llu", (unsigned long long)nblocks);
	CHECK(reg_layout(e->dirfd, e->dst.seg, NSEG, &e->dst.id, &e->dst.block_len, &nblocks) == 0,
	      "dst layout");
	CHECK(nblocks == NBLK && e->dst.block_len == e->src.block_len, "dst layout shape");
	e->want = malloc(e->src.block_len * 2);
	e->got = malloc(e->src.block_len * 2);
	CHECK(e->want && e->got, "out of memory");
}

/*
 * A value larger than the daemon's read piece (8 MiB): all of region a as
 * one key, put before the blocks (so a small pool has evicted it by the
 * time it is fetched, into process memory). Returns 1 when it came from the
 * SSD. Run before e2e_get_all, which overwrites q.
 */
static int e2e_big_put(struct e2e *e, uint64_t *len)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_iov iov = {.iv_region = e->ra, .iv_length = e->src.seg[0].sg_stride * NBLK};
	struct bt_build b;

	*len = iov.iv_length;
	CHECK(*len > (8u << 20), "region a holds %llu bytes", (unsigned long long)*len);
	bt_init(&b, bt, 1, 1500, KVFS_PUT_MKDIR);
	bt_add(&b, "e2e/big", 0, 0, &iov, 1);
	CHECK(ioc(e->dirfd, KVFS_IOC_PUT, bt) == 0 && bt_key(bt, 0).ik_result == (int64_t)*len,
	      "big put: %lld", (long long)bt_key(bt, 0).ik_result);
	free(bt);
	return 0;
}

static int e2e_big_get(struct e2e *e, uint64_t len)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_iov iov = {.iv_region = e->rq, .iv_length = len};
	struct bt_build b;
	struct kvfs_ioc_key k;

	CHECK(len <= e->dst.seg[1].sg_stride * NBLK, "q too small");
	bt_init(&b, bt, 1, 1600, 0);
	bt_add(&b, "e2e/big", 0, 0, &iov, 1);
	CHECK(ioc(e->dirfd, KVFS_IOC_GET, bt) == 0, "big get");
	k = bt_key(bt, 0);
	CHECK(k.ik_result == (int64_t)len, "big get: %lld", (long long)k.ik_result);
	CHECK(!memcmp(e->q, e->a, len), "big value differs");
	free(bt);
	return !(k.ik_flags & KVFS_KEY_DRAM) && (k.ik_flags & KVFS_KEY_SSD);
}

/* Lookup with hits, a miss in the middle, a directory, and the prefix count. */
static void e2e_lookup(struct e2e *e)
{
	static char names[302][32];
	const char *np[302];
	struct kvfs_ioc_batch *bt;

	for (int i = 0; i < 300; i++)
		snprintf(names[i < 200 ? i : i + 1], sizeof(names[0]), "e2e/blk%04d", i);
	snprintf(names[200], sizeof(names[0]), "e2e/missing");
	snprintf(names[301], sizeof(names[0]), "e2e");
	for (int i = 0; i < 302; i++)
		np[i] = names[i];
	bt = run_names(e->dirfd, KVFS_IOC_LOOKUP, 0, np, 302);
	CHECK(bt->bt_prefix == 200, "prefix %u", bt->bt_prefix);
	CHECK(bt->bt_ok == 300, "ok %u", bt->bt_ok);
	CHECK(bt->bt_bytes == 300 * e->src.block_len, "bytes");
	for (int i = 0; i < 302; i++) {
		struct kvfs_ioc_key k = bt_key(bt, (uint32_t)i);

		if (i == 200)
			CHECK(k.ik_result == -ENOENT && k.ik_flags == 0, "miss: %lld",
			      (long long)k.ik_result);
		else if (i == 301)
			CHECK(k.ik_result == -EISDIR && (k.ik_flags & KVFS_KEY_DIR), "dir: %lld",
			      (long long)k.ik_result);
		else
			CHECK(k.ik_result == (int64_t)e->src.block_len &&
				  k.ik_size == e->src.block_len &&
				  (k.ik_flags & (KVFS_KEY_PRESENT | KVFS_KEY_SEALED)) ==
				      (KVFS_KEY_PRESENT | KVFS_KEY_SEALED),
			      "hit %d: %lld flags %x", i, (long long)k.ik_result, k.ik_flags);
	}
	free(bt);
}

/* Gets every block into the destination layout and compares every byte; counts SSD hits. */
static int e2e_get_all(struct e2e *e)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct bt_build b;
	char name[64];
	int ssd = 0;

	memset(e->c, 0, 1);
	for (int done = 0; done < NBLK; done += 128) {
		bt_init(&b, bt, 128, 2000 + (uint64_t)done, 0);
		for (int i = 0; i < 128; i++) {
			snprintf(name, sizeof(name), "e2e/blk%04d", done + i);
			bt_add(&b, name, e->dst.id, (uint64_t)(done + i), NULL, 0);
		}
		CHECK(ioc(e->dirfd, KVFS_IOC_GET, bt) == 0, "get: %s", strerror(errno));
		CHECK(bt->bt_ok == 128, "get ok %u", bt->bt_ok);
		for (int i = 0; i < 128; i++) {
			struct kvfs_ioc_key k = bt_key(bt, (uint32_t)i);

			CHECK(k.ik_result == (int64_t)e->src.block_len, "get %d: %lld", done + i,
			      (long long)k.ik_result);
			ssd += !(k.ik_flags & KVFS_KEY_DRAM) && (k.ik_flags & KVFS_KEY_SSD);
		}
	}
	for (int blk = 0; blk < NBLK; blk++) {
		gather(&e->src, (uint64_t)blk, e->want);
		gather(&e->dst, (uint64_t)blk, e->got);
		CHECK(!memcmp(e->want, e->got, e->src.block_len), "block %d differs", blk);
	}
	free(bt);
	return ssd;
}

/*
 * Gets the first blocks into one shared-memory region at 4 KiB-aligned
 * offsets (a block is a multiple of 4 KiB): what lets the daemon read an
 * SSD-only value straight into client memory. Compares every byte.
 */
static void e2e_aligned(struct e2e *e)
{
	struct kvfs_ioc_batch *bt = batch_new();
	const int n = 16;
	uint64_t len = e->src.block_len * (uint64_t)n;
	char shm[64], *mem, name[64];
	struct bt_build b;
	uint32_t rd;

	CHECK(e->src.block_len % 4096 == 0, "block length %llu", (unsigned long long)len);
	snprintf(shm, sizeof(shm), "/kvfs-e2e-%d-aligned", (int)getpid());
	mem = shm_make(shm, len);
	CHECK(reg_shm(e->dirfd, shm, 0, len, &rd) == 0, "aligned region");
	bt_init(&b, bt, (uint32_t)n, 2500, 0);
	for (int i = 0; i < n; i++) {
		struct kvfs_ioc_iov iov = {.iv_region = rd,
					   .iv_offset = (uint64_t)i * e->src.block_len,
					   .iv_length = e->src.block_len};

		snprintf(name, sizeof(name), "e2e/blk%04d", i);
		bt_add(&b, name, 0, 0, &iov, 1);
	}
	CHECK(ioc(e->dirfd, KVFS_IOC_GET, bt) == 0 && bt->bt_ok == (uint32_t)n, "aligned get %u",
	      bt->bt_ok);
	for (int i = 0; i < n; i++) {
		gather(&e->src, (uint64_t)i, e->want);
		CHECK(!memcmp(e->want, mem + (uint64_t)i * e->src.block_len, e->src.block_len),
		      "aligned get of block %d differs", i);
	}
	CHECK(unreg(e->dirfd, KVFS_IOC_REGION_UNREGISTER, rd) == 0, "unreg aligned");
	munmap(mem, len);
	shm_unlink(shm);
	free(bt);
}

/* ioctl-put keys read back through read(); file-written keys come back through ioctl get. */
static void e2e_cross(struct e2e *e)
{
	struct kvfs_ioc_batch *bt = batch_new();
	uint64_t half = e->src.block_len / 2;
	struct kvfs_ioc_iov iov[2] = {
	    {.iv_region = e->rc, .iv_offset = 0, .iv_length = half},
	    {.iv_region = e->rq, .iv_offset = 0, .iv_length = e->src.block_len - half},
	};
	struct bt_build b;
	char name[64];

	for (int blk = 0; blk < NBLK; blk++) {
		snprintf(name, sizeof(name), "e2e/blk%04d", blk);
		gather(&e->src, (uint64_t)blk, e->want);
		CHECK(read_whole(e->dir, name, e->got, e->src.block_len + 1) ==
			  (ssize_t)e->src.block_len,
		      "read %s", name);
		CHECK(!memcmp(e->want, e->got, e->src.block_len), "read() of %s differs", name);
	}
	for (int f = 0; f < 20; f++) {
		snprintf(name, sizeof(name), "e2e/file%02d", f);
		fill_rand(e->want, e->src.block_len, 100 + (uint64_t)f);
		write_whole(e->dir, name, e->want, e->src.block_len);
		bt_init(&b, bt, 1, 3000 + (uint64_t)f, 0);
		bt_add(&b, name, 0, 0, iov, 2);
		CHECK(ioc(e->dirfd, KVFS_IOC_GET, bt) == 0, "get file");
		CHECK(bt_key(bt, 0).ik_result == (int64_t)e->src.block_len, "get %s: %lld", name,
		      (long long)bt_key(bt, 0).ik_result);
		CHECK(!memcmp(e->want, e->c, half) &&
			  !memcmp(e->want + half, e->q, e->src.block_len - half),
		      "ioctl get of written %s differs", name);
	}
	/* An explicit range list over three regions, into a new directory. */
	{
		struct kvfs_ioc_iov x[3] = {
		    {.iv_region = e->ra, .iv_offset = 5, .iv_length = 1000},
		    {.iv_region = e->rp, .iv_offset = 77, .iv_length = 3000},
		    {.iv_region = e->rb, .iv_offset = 0, .iv_length = 1},
		};

		bt_init(&b, bt, 1, 4000, KVFS_PUT_MKDIR);
		bt_add(&b, "e2e/x/y/explicit", 0, 0, x, 3);
		CHECK(ioc(e->dirfd, KVFS_IOC_PUT, bt) == 0 && bt_key(bt, 0).ik_result == 4001,
		      "explicit put: %lld", (long long)bt_key(bt, 0).ik_result);
		memcpy(e->want, e->a + 5, 1000);
		memcpy(e->want + 1000, e->p + 77, 3000);
		memcpy(e->want + 4000, e->b, 1);
		CHECK(read_whole(e->dir, "e2e/x/y/explicit", e->got, 8192) == 4001 &&
			  !memcmp(e->want, e->got, 4001),
		      "explicit key read back");
	}
	free(bt);
}

/* A put over a key the kernel has cached is seen by the next open(). */
static void e2e_replace(struct e2e *e)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct bt_build b;
	struct stat st;
	char path[4096];

	snprintf(path, sizeof(path), "%s/e2e/blk0100", e->dir);
	CHECK(stat(path, &st) == 0, "stat");
	bt_init(&b, bt, 1, 5000, 0);
	bt_add(&b, "e2e/blk0100", e->src.id, 5, NULL, 0);
	CHECK(ioc(e->dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == 1, "replace put");
	gather(&e->src, 5, e->want);
	CHECK(read_whole(e->dir, "e2e/blk0100", e->got, e->src.block_len + 1) ==
		      (ssize_t)e->src.block_len &&
		  !memcmp(e->want, e->got, e->src.block_len),
	      "replaced key reads the new bytes");
	bt_init(&b, bt, 1, 5001, KVFS_PUT_NOREPLACE);
	bt_add(&b, "e2e/blk0100", e->src.id, 6, NULL, 0);
	CHECK(ioc(e->dirfd, KVFS_IOC_PUT, bt) == 0 && bt_key(bt, 0).ik_result == -EEXIST,
	      "noreplace: %lld", (long long)bt_key(bt, 0).ik_result);
	free(bt);
}

/* Per-key errors do not fail the batch; each key gets its own errno. */
static void e2e_errors(struct e2e *e)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_iov big = {
	    .iv_region = e->ra, .iv_offset = UINT64_MAX - 10, .iv_length = 20};
	struct kvfs_ioc_iov bad = {.iv_region = 77777, .iv_length = 1};
	char longname[300];
	struct bt_build b;
	struct {
		const char *name;
		uint32_t layout;
		uint64_t block;
		const struct kvfs_ioc_iov *iov;
		int64_t want;
	} cases[] = {
	    {"e2e/blk0001", e->dst.id, 1, NULL, (int64_t)e->src.block_len},
	    {"e2e/blk0001", 99999, 1, NULL, -EBADF},
	    {"e2e/blk0001", e->dst.id, NBLK, NULL, -EFAULT},
	    {"e2e/blk0001", e->dst.id, UINT64_MAX, NULL, -EFAULT},
	    {"e2e/blk0001", 0, 0, &big, -EFAULT},
	    {"e2e/blk0001", 0, 0, &bad, -EBADF},
	    {"e2e/nope", e->dst.id, 1, NULL, -ENOENT},
	    {"e2e/x/y/explicit", e->dst.id, 1, NULL, -EMSGSIZE},
	    {"../blk0001", e->dst.id, 1, NULL, -EINVAL},
	    {"e2e//blk0001", e->dst.id, 1, NULL, -EINVAL},
	    {"e2e/blk0001/", e->dst.id, 1, NULL, -EINVAL},
	    {"e2e/./blk0001", e->dst.id, 1, NULL, -EINVAL},
	    {longname, e->dst.id, 1, NULL, -ENAMETOOLONG},
	    {"e2e/blk0002/x", e->dst.id, 1, NULL, -ENOTDIR},
	    {"e2e", e->dst.id, 1, NULL, -EISDIR},
	    {"e2e/blk0003", e->dst.id, 3, NULL, (int64_t)e->src.block_len},
	};
	int n = (int)(sizeof(cases) / sizeof(cases[0]));

	memset(longname, 'z', sizeof(longname));
	memcpy(longname, "e2e/", 4);
	longname[sizeof(longname) - 1] = '\0';
	bt_init(&b, bt, (uint32_t)n, 6000, 0);
	for (int i = 0; i < n; i++)
		bt_add(&b, cases[i].name, cases[i].layout, cases[i].block, cases[i].iov,
		       cases[i].iov ? 1 : 0);
	CHECK(ioc(e->dirfd, KVFS_IOC_GET, bt) == 0, "error batch");
	for (int i = 0; i < n; i++)
		CHECK(bt_key(bt, (uint32_t)i).ik_result == cases[i].want,
		      "case %d (%s): %lld != %lld", i, cases[i].name,
		      (long long)bt_key(bt, (uint32_t)i).ik_result, (long long)cases[i].want);
	CHECK(bt->bt_ok == 2 && bt->bt_prefix == 1, "ok %u prefix %u", bt->bt_ok, bt->bt_prefix);
	printf("key_errors=%d\n", n - 2);
	free(bt);
}

/* Remove by names, then a whole prefix (a directory) with and without recursion. */
static void e2e_remove(struct e2e *e)
{
	static const char *const names[] = {"e2e/blk0000", "e2e/blk0001", "e2e/blk0002",
					    "e2e/nothere"};
	struct kvfs_ioc_batch *bt;
	struct bt_build b;
	char name[64], path[4096];
	struct stat st;

	snprintf(path, sizeof(path), "%s/e2e/blk0000", e->dir);
	CHECK(stat(path, &st) == 0, "stat before remove");
	bt = run_names(e->dirfd, KVFS_IOC_REMOVE, 0, names, 4);
	CHECK(bt->bt_ok == 3 && bt_key(bt, 3).ik_result == -ENOENT, "remove by name");
	for (int i = 0; i < 3; i++)
		CHECK(bt_key(bt, (uint32_t)i).ik_result == 1, "removed one key");
	free(bt);
	CHECK(stat(path, &st) == -1 && errno == ENOENT, "removed key still visible");
	bt = run_names(e->dirfd, KVFS_IOC_LOOKUP, 0, names, 3);
	CHECK(bt->bt_ok == 0 && bt->bt_prefix == 0, "removed keys still found");
	free(bt);

	bt = batch_new();
	bt_init(&b, bt, 30, 7000, KVFS_PUT_MKDIR);
	for (int i = 0; i < 30; i++) {
		snprintf(name, sizeof(name), "e2e/pfx/%c/k%02d", 'a' + i % 3, i);
		bt_add(&b, name, e->src.id, (uint64_t)i, NULL, 0);
	}
	CHECK(ioc(e->dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == 30, "prefix put %u", bt->bt_ok);
	free(bt);
	{
		static const char *const pfx[] = {"e2e/pfx"};

		bt = run_names(e->dirfd, KVFS_IOC_REMOVE, 0, pfx, 1);
		CHECK(bt_key(bt, 0).ik_result == -EISDIR, "directory without recursive");
		free(bt);
		bt = run_names(e->dirfd, KVFS_IOC_REMOVE, KVFS_REMOVE_RECURSIVE, pfx, 1);
		CHECK(bt_key(bt, 0).ik_result == 30, "prefix removed %lld keys",
		      (long long)bt_key(bt, 0).ik_result);
		free(bt);
	}
	snprintf(path, sizeof(path), "%s/e2e/pfx", e->dir);
	CHECK(stat(path, &st) == -1 && errno == ENOENT, "removed prefix still visible");
}

static int e2e_main(const char *dir)
{
	struct e2e e = {.dir = dir};
	struct kvfs_ioc_version v;
	uint64_t big;
	int ssd;

	e.dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(e.dirfd >= 0, "open %s: %s", dir, strerror(errno));
	memset(&v, 0, sizeof(v));
	hdr_init(&v.vr_hdr, sizeof(v), 0);
	v.vr_hdr.ih_version = 12345; /* the version query takes any */
	CHECK(ioc(e.dirfd, KVFS_IOC_VERSION, &v) == 0, "version: %s", strerror(errno));
	CHECK(v.vr_abi == KVFS_IOC_ABI_VERSION && (v.vr_kinds & (1u << KVFS_REGION_HOST_SHM)) &&
		  (v.vr_kinds & (1u << KVFS_REGION_HOST_PROC)) &&
		  v.vr_max_keys == KVFS_BATCH_MAX_KEYS && !strncmp(v.vr_daemon, "kvfs ", 5),
	      "version reply");
	printf("daemon_pid=%u\n", v.vr_daemon_pid);
	e2e_regions(&e);
	e2e_big_put(&e, &big);
	put_get_blocks(e.dirfd, KVFS_IOC_PUT, &e.src, 0, NBLK, KVFS_PUT_MKDIR);
	printf("big_ssd=%d\n", e2e_big_get(&e, big));
	e2e_lookup(&e);
	ssd = e2e_get_all(&e);
	printf("ssd_served=%d\n", ssd);
	e2e_aligned(&e);
	e2e_cross(&e);
	e2e_replace(&e);
	e2e_errors(&e);
	e2e_remove(&e);
	/* A region a layout uses stays; then the layouts go, then the regions. */
	CHECK(unreg(e.dirfd, KVFS_IOC_REGION_UNREGISTER, e.ra) == -EBUSY, "busy region");
	CHECK(unreg(e.dirfd, KVFS_IOC_LAYOUT_UNREGISTER, e.src.id) == 0, "unreg layout");
	CHECK(unreg(e.dirfd, KVFS_IOC_LAYOUT_UNREGISTER, e.src.id) == -EBADF, "stale layout id");
	CHECK(unreg(e.dirfd, KVFS_IOC_REGION_UNREGISTER, e.ra) == 0, "unreg region");
	CHECK(unreg(e.dirfd, KVFS_IOC_REGION_UNREGISTER, e.ra) == -EBADF, "stale region id");
	printf("block_len=%llu\n", (unsigned long long)e.src.block_len);
	for (int i = 0; i < 3; i++)
		shm_unlink(e.shm[i]);
	close(e.dirfd);
	tally_print();
	printf("ok\n");
	return 0;
}

/* --- atomicity --- */

#define AVAL  (4u << 20)
#define AITER 120

struct atomic_ctx {
	int dirfd;
	uint32_t layout;     /* block 0: version A, block 1: version B */
	const char *va, *vb; /* the two versions, in this process */
	_Atomic bool done;
	_Atomic uint64_t gets, mixed, fresh_checked;
	_Atomic int fresh_put; /* fresh keys whose put returned */
};

static void *atomic_writer(void *arg)
{
	struct atomic_ctx *a = arg;
	struct kvfs_ioc_batch *bt = batch_new();
	struct bt_build b;
	char name[64];

	for (int i = 0; i < AITER; i++) {
		bt_init(&b, bt, 2, 8000 + (uint64_t)i, KVFS_PUT_MKDIR);
		bt_add(&b, "atom/x", a->layout, (uint64_t)(i % 2), NULL, 0);
		snprintf(name, sizeof(name), "atom/new%03d", i);
		bt_add(&b, name, a->layout, 0, NULL, 0);
		CHECK(ioc(a->dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == 2, "atomic put %d", i);
		a->fresh_put = i + 1;
	}
	a->done = true;
	free(bt);
	return NULL;
}

struct atomic_reader {
	struct atomic_ctx *a;
	char *buf; /* HOST_PROC region of AVAL bytes */
	uint32_t region;
};

/* Gets "atom/x" over and over: every successful get holds exactly one version. */
static void *atomic_get(void *arg)
{
	struct atomic_reader *r = arg;
	struct atomic_ctx *a = r->a;
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_iov iov = {.iv_region = r->region, .iv_length = AVAL};
	struct bt_build b;

	while (!a->done) {
		bt_init(&b, bt, 1, 9000, 0);
		bt_add(&b, "atom/x", 0, 0, &iov, 1);
		CHECK(ioc(a->dirfd, KVFS_IOC_GET, bt) == 0, "atomic get");
		if (bt_key(bt, 0).ik_result == -ENOENT)
			continue;
		CHECK(bt_key(bt, 0).ik_result == AVAL, "get result %lld",
		      (long long)bt_key(bt, 0).ik_result);
		a->gets++;
		if (memcmp(r->buf, a->va, AVAL) && memcmp(r->buf, a->vb, AVAL))
			a->mixed++;
	}
	free(bt);
	return NULL;
}

/*
 * Looks up all fresh keys: every key counted must be complete (its get
 * returns all of version A), the leading run must cover every put that
 * returned before the lookup was sent, and a key found past a missing one
 * must have been put while the lookup ran (the writer's puts go in order,
 * and the lookup reads its names one after the other: on a slow machine
 * several puts land while it walks them).
 */
static void *atomic_lookup(void *arg)
{
	struct atomic_reader *r = arg;
	struct atomic_ctx *a = r->a;
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_iov iov = {.iv_region = r->region, .iv_length = AVAL};
	struct bt_build b;
	char name[64];

	while (!a->done) {
		int before = a->fresh_put, after;
		uint32_t hits;

		bt_init(&b, bt, AITER, 9500, 0);
		for (int i = 0; i < AITER; i++) {
			snprintf(name, sizeof(name), "atom/new%03d", i);
			bt_add(&b, name, 0, 0, NULL, 0);
		}
		CHECK(ioc(a->dirfd, KVFS_IOC_LOOKUP, bt) == 0, "atomic lookup");
		after = a->fresh_put;
		hits = bt->bt_prefix;
		for (uint32_t i = hits; i < AITER; i++) /* the put in flight may show too */
			CHECK(bt_key(bt, i).ik_result < 0 || i <= (uint32_t)after,
			      "fresh keys appear in order: key %u found, %d put, prefix %u", i, after,
			      hits);
		CHECK(hits >= (uint32_t)before, "lookup missed completed puts: %u < %d", hits,
		      before);
		for (uint32_t i = 0; i < hits; i++)
			CHECK(bt_key(bt, i).ik_size == AVAL, "a counted key has size %llu",
			      (unsigned long long)bt_key(bt, i).ik_size);
		if (!hits)
			continue;
		snprintf(name, sizeof(name), "atom/new%03u", hits - 1);
		bt_init(&b, bt, 1, 9600, 0);
		bt_add(&b, name, 0, 0, &iov, 1);
		CHECK(ioc(a->dirfd, KVFS_IOC_GET, bt) == 0 && bt_key(bt, 0).ik_result == AVAL,
		      "get of a counted key: %lld", (long long)bt_key(bt, 0).ik_result);
		CHECK(!memcmp(r->buf, a->va, AVAL), "a counted key is incomplete");
		a->fresh_checked++;
	}
	free(bt);
	return NULL;
}

static int atomic_main(const char *dir)
{
	struct atomic_ctx a = {0};
	struct atomic_reader rd[3];
	pthread_t w, t[3];
	char shm[64];
	char *src;
	uint32_t rs, nblocks_id;
	struct kvfs_ioc_seg seg;
	uint64_t blen, nblocks;

	a.dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(a.dirfd >= 0, "open %s", dir);
	snprintf(shm, sizeof(shm), "/kvfs-atomic-%d", (int)getpid());
	src = shm_make(shm, 2 * AVAL);
	fill_rand(src, AVAL, 11);
	fill_rand(src + AVAL, AVAL, 12);
	a.va = src;
	a.vb = src + AVAL;
	CHECK(reg_shm(a.dirfd, shm, 0, 2 * AVAL, &rs) == 0, "reg shm");
	seg = (struct kvfs_ioc_seg){.sg_region = rs, .sg_stride = AVAL, .sg_length = AVAL};
	CHECK(reg_layout(a.dirfd, &seg, 1, &nblocks_id, &blen, &nblocks) == 0 && nblocks == 2,
	      "layout");
	a.layout = nblocks_id;
	for (int i = 0; i < 3; i++) {
		rd[i].a = &a;
		rd[i].buf = aligned_alloc(4096, AVAL);
		CHECK(rd[i].buf && reg_proc(a.dirfd, rd[i].buf, AVAL, &rd[i].region) == 0,
		      "reader region");
	}
	pthread_create(&t[0], NULL, atomic_get, &rd[0]);
	pthread_create(&t[1], NULL, atomic_get, &rd[1]);
	pthread_create(&t[2], NULL, atomic_lookup, &rd[2]);
	pthread_create(&w, NULL, atomic_writer, &a);
	pthread_join(w, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("gets=%llu\nmixed=%llu\nfresh_checked=%llu\n", (unsigned long long)a.gets,
	       (unsigned long long)a.mixed, (unsigned long long)a.fresh_checked);
	CHECK(a.mixed == 0, "%llu gets returned a mix of two versions",
	      (unsigned long long)a.mixed);
	CHECK(a.gets > 0, "no get overlapped the puts");
	shm_unlink(shm);
	close(a.dirfd);
	printf("ok\n");
	return 0;
}

/* --- isolation --- */

/* Reads "regions": N from the stats file. */
static long stats_regions(const char *stats)
{
	static char buf[1 << 16];
	int fd = open(stats, O_RDONLY);
	ssize_t n, got = 0;
	const char *p;

	CHECK(fd >= 0, "open %s", stats);
	while ((n = read(fd, buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
		got += n;
	close(fd);
	buf[got] = '\0';
	p = strstr(buf, "\"regions\": ");
	CHECK(p, "no regions in stats");
	return strtol(p + strlen("\"regions\": "), NULL, 10);
}

static int isolation_child(int inherited, const char *dir, const char *shm, uint32_t rs,
			   uint32_t rp, uint32_t layout)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_iov iov = {.iv_region = rs, .iv_length = 4096};
	struct kvfs_ioc_seg seg = {.sg_region = rp, .sg_stride = 4096, .sg_length = 4096};
	struct bt_build b;
	uint32_t id, mine;
	uint64_t blen, nb;
	int fd = open(dir, O_RDONLY | O_DIRECTORY);

	CHECK(fd >= 0, "child open");
	for (int k = 0; k < 2; k++) {
		int f = k ? fd : inherited;

		bt_init(&b, bt, 3, 9900, 0);
		bt_add(&b, "iso/k0", layout, 0, NULL, 0);
		bt_add(&b, "iso/k0", 0, 0, &iov, 1);
		bt_add(&b, "iso/nope", layout, 0, NULL, 0);
		CHECK(ioc(f, KVFS_IOC_GET, bt) == 0, "child get");
		for (int i = 0; i < 2; i++)
			CHECK(bt_key(bt, (uint32_t)i).ik_result == -EPERM, "child get key %d: %lld",
			      i, (long long)bt_key(bt, (uint32_t)i).ik_result);
		bt_init(&b, bt, 1, 9901, 0);
		bt_add(&b, "iso/k1", layout, 0, NULL, 0);
		CHECK(ioc(f, KVFS_IOC_PUT, bt) == 0 && bt_key(bt, 0).ik_result == -EPERM,
		      "child put with the parent's layout");
		CHECK(unreg(f, KVFS_IOC_REGION_UNREGISTER, rs) == -EPERM,
		      "child unregisters region");
		CHECK(unreg(f, KVFS_IOC_LAYOUT_UNREGISTER, layout) == -EPERM, "child unreg layout");
		CHECK(reg_layout(f, &seg, 1, &id, &blen, &nb) == -EPERM,
		      "child layout over parent's");
	}
	/* Its own region works, on the parent's open file and on its own. */
	CHECK(reg_shm(inherited, shm, 0, 4096, &mine) == 0, "child's own region");
	CHECK(reg_shm(fd, shm, 4096, 4096, &id) == 0, "child's own region 2");
	iov.iv_region = mine;
	bt_init(&b, bt, 1, 9902, 0);
	bt_add(&b, "iso/k0", 0, 0, &iov, 1);
	CHECK(ioc(fd, KVFS_IOC_GET, bt) == 0 && bt_key(bt, 0).ik_result == -EMSGSIZE,
	      "child get into its own region reaches the value: %lld",
	      (long long)bt_key(bt, 0).ik_result);
	free(bt);
	return 0; /* exits without unregistering anything */
}

static int isolation_main(const char *dir, const char *stats)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_seg segs[2];
	struct bt_build b;
	char shm[64], *mem, *pm;
	uint32_t rs, rp, layout, id;
	uint64_t blen, nb;
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY), fd2, st;
	long base;
	pid_t pid;

	CHECK(dirfd >= 0, "open");
	base = stats_regions(stats);
	snprintf(shm, sizeof(shm), "/kvfs-iso-%d", (int)getpid());
	mem = shm_make(shm, 1 << 20);
	pm = aligned_alloc(4096, 1 << 20);
	fill_rand(mem, 1 << 20, 21);
	fill_rand(pm, 1 << 20, 22);
	CHECK(reg_shm(dirfd, shm, 0, 1 << 20, &rs) == 0, "reg shm");
	CHECK(reg_proc(dirfd, pm, 1 << 20, &rp) == 0, "reg proc");
	segs[0] = (struct kvfs_ioc_seg){.sg_region = rs, .sg_stride = 65536, .sg_length = 65536};
	segs[1] = (struct kvfs_ioc_seg){.sg_region = rp, .sg_stride = 65536, .sg_length = 65536};
	CHECK(reg_layout(dirfd, segs, 2, &layout, &blen, &nb) == 0 && nb == 16, "layout");
	bt_init(&b, bt, 1, 9800, KVFS_PUT_MKDIR);
	bt_add(&b, "iso/k0", layout, 0, NULL, 0);
	CHECK(ioc(dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == 1, "parent put");
	CHECK(stats_regions(stats) == base + 2, "two regions");

	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0)
		_exit(isolation_child(dirfd, dir, shm, rs, rp, layout));
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
	/* The child's region on its own fd went with that fd; the one on ours goes by its pidfd. */
	CHECK(reg_shm(dirfd, shm, 0, 4096, &id) == 0, "register (reaps)");
	for (int i = 0; i < 500 && stats_regions(stats) != base + 3; i++)
		usleep(10000);
	CHECK(stats_regions(stats) == base + 3, "child's regions released: %ld",
	      stats_regions(stats) - base);
	CHECK(unreg(dirfd, KVFS_IOC_REGION_UNREGISTER, id) == 0, "unreg");

	/* Ours still work after the child's attempts. */
	bt_init(&b, bt, 1, 9803, 0);
	bt_add(&b, "iso/k1", layout, 1, NULL, 0);
	CHECK(ioc(dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == 1, "parent put after child");

	/* Closing the fd a region was registered on releases it. */
	fd2 = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(reg_proc(fd2, pm, 4096, &id) == 0, "reg on fd2");
	close(fd2);
	for (int i = 0; i < 500 && unreg(dirfd, KVFS_IOC_REGION_UNREGISTER, id) != -EBADF; i++)
		usleep(10000);
	CHECK(unreg(dirfd, KVFS_IOC_REGION_UNREGISTER, id) == -EBADF, "released with its fd");
	CHECK(stats_regions(stats) == base + 2, "regions after fd close");
	shm_unlink(shm);
	free(bt);
	close(dirfd);
	printf("ok\n");
	return 0;
}

/* --- a client that dies mid-batch --- */

static int hold_main(const char *dir)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_seg segs[2];
	struct bt_build b;
	const uint64_t half = 4u << 20;
	char shm[64], *mem, *pm, name[64];
	uint32_t rs, rp, layout;
	uint64_t blen, nb;
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY);

	CHECK(dirfd >= 0, "open");
	snprintf(shm, sizeof(shm), "/kvfs-hold-%d", (int)getpid());
	mem = shm_make(shm, half);
	shm_unlink(shm); /* the mapping stays; nothing left behind when killed */
	pm = aligned_alloc(4096, half);
	fill_rand(mem, half, 31);
	fill_rand(pm, half, 32);
	CHECK(reg_shm(dirfd, shm, 0, half, &rs) == -ENOENT, "an unlinked object cannot be named");
	mem = shm_make(shm, half);
	fill_rand(mem, half, 31);
	CHECK(reg_shm(dirfd, shm, 0, half, &rs) == 0, "reg shm");
	shm_unlink(shm);
	CHECK(reg_proc(dirfd, pm, half, &rp) == 0, "reg proc");
	segs[0] = (struct kvfs_ioc_seg){.sg_region = rs, .sg_stride = 0, .sg_length = half};
	segs[1] = (struct kvfs_ioc_seg){.sg_region = rp, .sg_stride = 0, .sg_length = half};
	CHECK(reg_layout(dirfd, segs, 2, &layout, &blen, &nb) == 0 && nb == UINT64_MAX, "layout");
	printf("ready\n");
	fflush(stdout);
	for (uint64_t round = 0;; round++) {
		bt_init(&b, bt, 16, round, KVFS_PUT_MKDIR);
		for (int i = 0; i < 16; i++) {
			snprintf(name, sizeof(name), "hold/k%02d", i);
			bt_add(&b, name, layout, round, NULL, 0);
		}
		CHECK(ioc(dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == 16, "hold put");
	}
}

/* --- a micro-benchmark: ioctl get against memcpy, batch lookup against stat() --- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define BLAYERS 32
#define BSEG	(64u << 10)
#define BKEYS	64
#define BROUNDS 8
#define BNAMES	1000

static int bench_main(const char *dir)
{
	struct kvfs_ioc_batch *bt = batch_new();
	struct kvfs_ioc_seg seg[BLAYERS];
	const uint64_t blk = (uint64_t)BLAYERS * BSEG, total = blk * BKEYS;
	char shm[2][64], name[64], path[4096], *src, *dst;
	uint32_t rs, rd, ls, ld, id;
	uint64_t blen, nb;
	struct bt_build b;
	struct stat st;
	double t, t_put, t_get, t_memcpy, t_lookup, t_stat_cold, t_stat_warm;
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY);

	CHECK(dirfd >= 0, "open");
	for (int i = 0; i < 2; i++)
		snprintf(shm[i], sizeof(shm[i]), "/kvfs-bench-%d-%d", (int)getpid(), i);
	src = shm_make(shm[0], total);
	dst = shm_make(shm[1], total);
	fill_rand(src, total, 5);
	memset(dst, 1, total);
	CHECK(reg_shm(dirfd, shm[0], 0, total, &rs) == 0 &&
		  reg_shm(dirfd, shm[1], 0, total, &rd) == 0,
	      "regions");
	/* A vLLM-like cache: one tensor per layer, block b's slice at b * 64 KiB of each. */
	for (int l = 0; l < BLAYERS; l++)
		seg[l] = (struct kvfs_ioc_seg){.sg_region = rs,
					       .sg_base = (uint64_t)l * BSEG * BKEYS,
					       .sg_stride = BSEG,
					       .sg_length = BSEG};
	CHECK(reg_layout(dirfd, seg, BLAYERS, &ls, &blen, &nb) == 0 && blen == blk, "layout");
	for (int l = 0; l < BLAYERS; l++)
		seg[l].sg_region = rd;
	CHECK(reg_layout(dirfd, seg, BLAYERS, &ld, &blen, &nb) == 0, "layout");
	bt_init(&b, bt, BKEYS, 1, KVFS_PUT_MKDIR);
	for (int k = 0; k < BKEYS; k++) {
		snprintf(name, sizeof(name), "bench/b%02d", k);
		bt_add(&b, name, ls, (uint64_t)k, NULL, 0);
	}
	CHECK(ioc(dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == BKEYS, "put");
	t = now_s();
	for (int r = 0; r < BROUNDS; r++) /* replaces the keys, as a rename over them would */
		CHECK(ioc(dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == BKEYS, "put");
	t_put = now_s() - t;
	t = now_s();
	for (int r = 0; r < BROUNDS; r++) {
		bt_init(&b, bt, BKEYS, 2, 0);
		for (int k = 0; k < BKEYS; k++) {
			snprintf(name, sizeof(name), "bench/b%02d", k);
			bt_add(&b, name, ld, (uint64_t)k, NULL, 0);
		}
		CHECK(ioc(dirfd, KVFS_IOC_GET, bt) == 0 && bt->bt_ok == BKEYS, "get");
	}
	t_get = now_s() - t;
	CHECK(!memcmp(src, dst, total), "get bytes");
	t = now_s();
	for (int r = 0; r < BROUNDS; r++)
		memcpy(dst, src, total);
	t_memcpy = now_s() - t;

	/* 1000 small keys, made by ioctl: the kernel has never looked them up. */
	for (int done = 0; done < BNAMES; done += 125) {
		struct kvfs_ioc_iov iov = {.iv_region = rs, .iv_length = 4096};

		bt_init(&b, bt, 125, 3, KVFS_PUT_MKDIR);
		for (int k = 0; k < 125; k++) {
			snprintf(name, sizeof(name), "names/%016x", done + k);
			CHECK(bt_add(&b, name, 0, 0, &iov, 1) == k, "fits");
		}
		CHECK(ioc(dirfd, KVFS_IOC_PUT, bt) == 0 && bt->bt_ok == 125, "small put");
	}
	t = now_s();
	for (int done = 0; done < BNAMES; done += 250) {
		bt_init(&b, bt, 250, 4, 0);
		for (int k = 0; k < 250; k++) {
			snprintf(name, sizeof(name), "names/%016x", done + k);
			CHECK(bt_add(&b, name, 0, 0, NULL, 0) == k, "fits");
		}
		CHECK(ioc(dirfd, KVFS_IOC_LOOKUP, bt) == 0 && bt->bt_ok == 250, "lookup");
	}
	t_lookup = now_s() - t;
	t = now_s();
	for (int k = 0; k < BNAMES; k++) {
		snprintf(path, sizeof(path), "%s/names/%016x", dir, k);
		CHECK(stat(path, &st) == 0, "stat");
	}
	t_stat_cold = now_s() - t;
	t = now_s();
	for (int k = 0; k < BNAMES; k++) {
		snprintf(path, sizeof(path), "%s/names/%016x", dir, k);
		CHECK(stat(path, &st) == 0, "stat");
	}
	t_stat_warm = now_s() - t;
	printf("put_gib_s=%.2f get_gib_s=%.2f memcpy_gib_s=%.2f get_vs_memcpy=%.2f\n",
	       (double)total * BROUNDS / t_put / (1 << 30),
	       (double)total * BROUNDS / t_get / (1 << 30),
	       (double)total * BROUNDS / t_memcpy / (1 << 30), t_memcpy / t_get);
	printf("lookup_1000_us=%.0f stat_1000_uncached_us=%.0f stat_1000_cached_us=%.0f "
	       "lookup_vs_uncached_stat=%.1f lookup_vs_cached_stat=%.1f\n",
	       t_lookup * 1e6, t_stat_cold * 1e6, t_stat_warm * 1e6, t_stat_cold / t_lookup,
	       t_stat_warm / t_lookup);
	(void)id;
	shm_unlink(shm[0]);
	shm_unlink(shm[1]);
	free(bt);
	close(dirfd);
	return 0;
}

/* Registers a device region as given; returns 0 or -errno (unregistering what succeeded). */
static int dev_reg(int fd, uint32_t kind, const uint8_t *uuid, uint8_t handle_byte, int32_t rfd,
		   uint64_t off, uint64_t len)
{
	struct kvfs_ioc_region rg;
	int err;

	memset(&rg, 0, sizeof(rg));
	hdr_init(&rg.rg_hdr, sizeof(rg), 0);
	rg.rg_kind = kind;
	rg.rg_offset = off;
	rg.rg_length = len;
	rg.rg_fd = rfd;
	if (uuid)
		memcpy(rg.rg_dev_uuid, uuid, 16);
	memset(rg.rg_ipc_handle, handle_byte, sizeof(rg.rg_ipc_handle));
	err = ioc(fd, KVFS_IOC_REGION_REGISTER, &rg);
	if (!err)
		unreg(fd, KVFS_IOC_REGION_UNREGISTER, rg.rg_id);
	return err;
}

/*
 * Device registrations that must fail, each with its documented errno,
 * whether or not the daemon has a device: the struct checks come first;
 * then a daemon without CUDA in force says EOPNOTSUPP, one with CUDA says
 * ENODEV for a UUID of no device of its own. Prints cuda=0|1.
 */
static int devregs_main(const char *dir)
{
	static const uint8_t nodev[16] = {0xde, 0xad, 0xbe, 0xef, 1, 2,	 3,  4,
					  5,	6,    7,    8,	  9, 10, 11, 12};
	struct kvfs_ioc_version v;
	int fd = open(dir, O_RDONLY | O_DIRECTORY), wellformed;
	bool cuda;

	CHECK(fd >= 0, "open %s", dir);
	memset(&v, 0, sizeof(v));
	hdr_init(&v.vr_hdr, sizeof(v), 0);
	CHECK(ioc(fd, KVFS_IOC_VERSION, &v) == 0, "version");
	cuda = v.vr_kinds & (1u << KVFS_REGION_CUDA_IPC);
	CHECK(!!(v.vr_kinds & (1u << KVFS_REGION_CUDA_VMM)) == cuda, "kinds %#x", v.vr_kinds);
	wellformed = cuda ? -ENODEV : -EOPNOTSUPP;
	/* CUDA_IPC */
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_IPC, NULL, 7, 0, 0, 4096) == -EINVAL, "no uuid");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_IPC, nodev, 0, 0, 0, 4096) == -EINVAL, "no handle");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_IPC, nodev, 7, 3, 0, 4096) == -EINVAL, "ipc with fd");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_IPC, nodev, 7, 0, 0, 0) == -EINVAL, "length 0");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_IPC, nodev, 7, 0, UINT64_MAX, 2) == -EFAULT, "overflow");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_IPC, nodev, 7, 0, 0, 4096) == wellformed,
	      "unknown uuid");
	/* CUDA_VMM */
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_VMM, NULL, 0, fd, 0, 4096) == -EINVAL, "no uuid");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_VMM, nodev, 7, fd, 0, 4096) == -EINVAL, "vmm handle");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_VMM, nodev, 0, -1, 0, 4096) == -EBADF, "fd -1");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_VMM, nodev, 0, fd, 1, UINT64_MAX) == -EFAULT,
	      "overflow");
	CHECK(dev_reg(fd, KVFS_REGION_CUDA_VMM, nodev, 0, fd, 0, 4096) == wellformed,
	      "unknown uuid");
	/* A put that asks to wait for a CUDA event: made-up handle, or no CUDA at all. */
	{
		struct kvfs_ioc_batch *bt = calloc(1, sizeof(*bt));
		struct kvfs_ioc_key k = {.ik_name_off = sizeof(k), .ik_name_len = 2};

		CHECK(bt, "calloc");
		hdr_init(&bt->bt_hdr, sizeof(*bt), 0);
		bt->bt_nkeys = 1;
		bt->bt_flags = KVFS_PUT_WAIT_EVENT;
		memcpy(bt->bt_data, &k, sizeof(k));
		memcpy(bt->bt_data + sizeof(k), "ev", 2);
		memset(bt->bt_data + KVFS_BATCH_EVENT_OFF, 0x5a, KVFS_BATCH_EVENT_SIZE);
		CHECK(ioc(fd, KVFS_IOC_PUT, bt) == (cuda ? -EINVAL : -EOPNOTSUPP), "event put");
		bt->bt_flags = KVFS_PUT_WAIT_EVENT;
		CHECK(ioc(fd, KVFS_IOC_GET, bt) == -EINVAL, "a get takes no event");
		free(bt);
	}
	printf("cuda=%d\n", cuda);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "bench"))
		return bench_main(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "e2e"))
		return e2e_main(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "atomic"))
		return atomic_main(argv[2]);
	if (argc >= 4 && !strcmp(argv[1], "isolation"))
		return isolation_main(argv[2], argv[3]);
	if (argc >= 3 && !strcmp(argv[1], "devregs"))
		return devregs_main(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "hold"))
		return hold_main(argv[2]);
	if (argc >= 5 && !strcmp(argv[1], "fuzz"))
		return fuzz_main(argv[2], strtol(argv[3], NULL, 10), strtoul(argv[4], NULL, 10),
				 argc >= 7 ? argv[5] : NULL, argc >= 7 ? argv[6] : NULL);
	fprintf(stderr, "usage: ioctl_e2e e2e|atomic|isolation|hold|devregs|fuzz DIR "
			"[N SEED [MODEL first|next|verify]]\n");
	return 2;
}
