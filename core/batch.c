/* SPDX-License-Identifier: MIT */
/*
 * core/batch.c — one key of a batch ioctl as a store operation (see
 * core/batch.h). Everything goes through the store's public API: names are
 * walked with kv_store_lookup, values are built with kv_store_value_new and
 * published with kv_store_publish, read with kv_store_read, removed with
 * kv_store_unlink / kv_store_rmdir. Permissions are checked as the system
 * calls on the same paths would check them (core/perm.h), for every
 * caller and every mount: the kernel sees only an ioctl on a directory.
 */
#include "core/batch.h"
#include "core/perm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* iovecs handed to km_copy at a time. */
#define BATCH_IOV 64
/* Times a get reads a value again that changed between two of its pieces, before -EBUSY. */
#define GET_TRIES 3
/* Passes over a directory that keeps being refilled before rm -rf gives up. */
#define RMTREE_TRIES 4

int kv_batch_name_check(const char *name, size_t len, bool at_root)
{
	size_t start = 0;

	if (len == 0)
		return -EINVAL;
	if (len > KV_BATCH_PATH_MAX)
		return -ENAMETOOLONG;
	if (memchr(name, '\0', len))
		return -EINVAL;
	for (size_t i = 0; i <= len; i++) {
		size_t n;

		if (i < len && name[i] != '/')
			continue;
		n = i - start;
		if (n == 0)
			return -EINVAL;
		if (n > KV_NAME_MAX)
			return -ENAMETOOLONG;
		if ((n == 1 && name[start] == '.') ||
		    (n == 2 && name[start] == '.' && name[start + 1] == '.'))
			return -EINVAL;
		if (at_root && start == 0 && n == strlen(KV_RESERVED_NAME) &&
		    !memcmp(name, KV_RESERVED_NAME, n))
			return -EINVAL;
		start = i + 1;
	}
	return 0;
}

static void add_ns(struct kv_batch *b, enum kv_stage s, uint64_t t0)
{
	b->kb_ns[s] += kv_now_ns() - t0;
}

/* Asks kb_remote about name in dir before the store is asked: 0 or its -errno; 0 without one. */
static int remote_lookup(struct kv_batch *b, struct kv_inode *dir, const char *name)
{
	return b->kb_remote.br_lookup ? b->kb_remote.br_lookup(b->kb_remote.br_arg, dir, name) : 0;
}

/*
 * Copies a checked name into path and walks its directories from kb_dir:
 * sets *parent (a reference the caller drops), *pa (its attributes) and
 * *last (the last component, inside path). With mkdir, missing
 * directories are created. The caller needs search permission on every
 * directory it passes, kb_dir and the parent included, and write
 * permission where it creates one: -EACCES otherwise.
 */
static int walk(struct kv_batch *b, const char *name, size_t len, char *path, bool mkdir,
		struct kv_inode **parent, struct kv_attr *pa, const char **last)
{
	struct kv_store *st = b->kb_st;
	struct kv_inode *dir = b->kb_dir, *c;
	char *p = path, *slash;
	struct kv_attr a;
	int err;

	err = kv_batch_name_check(name, len, dir == kv_store_root(st));
	if (err)
		return err;
	memcpy(path, name, len);
	path[len] = '\0';
	err = kv_store_getattr(st, dir, pa);
	if (err)
		return err;
	kv_inode_get(dir);
	for (;;) {
		err = kv_may(&b->kb_cred, pa, X_OK);
		slash = strchr(p, '/');
		if (err || !slash)
			break;
		*slash = '\0';
		err = remote_lookup(b, dir, p);
		if (!err)
			err = kv_store_lookup(st, dir, p, &c, &a);
		if (err == -ENOENT && mkdir) {
			err = kv_may(&b->kb_cred, pa, W_OK);
			if (!err)
				err = kv_store_mkdir(st, dir, p, 0755, &b->kb_cred, &c, &a);
			if (err == -EEXIST) /* made meanwhile by someone else */
				err = kv_store_lookup(st, dir, p, &c, &a);
		}
		kv_inode_put(dir);
		if (err)
			return err;
		if (!kv_inode_is_dir(c)) {
			kv_inode_put(c);
			return -ENOTDIR;
		}
		dir = c;
		*pa = a;
		p = slash + 1;
	}
	if (err) {
		kv_inode_put(dir);
		return err;
	}
	*parent = dir;
	*last = p;
	return 0;
}

static unsigned tier_flags(enum kv_tier_kind t)
{
	switch (t) {
	case KV_TIER_DRAM:
		return KV_BK_DRAM;
	case KV_TIER_SSD:
	case KV_TIER_PART: /* wholly on the SSD, not wholly in DRAM */
		return KV_BK_SSD;
	case KV_TIER_BOTH:
		return KV_BK_DRAM | KV_BK_SSD;
	default:
		return 0;
	}
}

/*
 * Finds the key (a reference in *out) and describes it in ki. mask: the
 * permission the caller needs on the key (R_OK to read it; 0 to see it).
 */
static int find(struct kv_batch *b, const char *name, size_t len, int mask, struct kv_key_info *ki,
		struct kv_inode **out)
{
	char path[KV_BATCH_PATH_MAX + 1];
	uint64_t t0 = kv_now_ns();
	struct kv_inode *dir, *ino;
	const char *last;
	struct kv_attr a;
	int err;

	ki->kki_size = 0;
	ki->kki_flags = 0;
	err = walk(b, name, len, path, false, &dir, &a, &last);
	if (!err) {
		err = remote_lookup(b, dir, last);
		if (!err)
			err = kv_store_lookup(b->kb_st, dir, last, &ino, &a);
		kv_inode_put(dir);
	}
	add_ns(b, KV_STAGE_INDEX, t0);
	if (err)
		return err;
	ki->kki_flags = KV_BK_PRESENT;
	if (kv_inode_is_dir(ino)) {
		ki->kki_flags |= KV_BK_DIR;
		kv_inode_put(ino);
		return -EISDIR;
	}
	if (!S_ISREG(kv_inode_type(ino))) {
		kv_inode_put(ino);
		return -EINVAL; /* a symlink, FIFO or socket: a name, not a key */
	}
	err = kv_may(&b->kb_cred, &a, mask);
	if (err) {
		kv_inode_put(ino);
		return err;
	}
	ki->kki_size = a.ka_size;
	ki->kki_flags |= tier_flags(a.ka_tier);
	if (a.ka_seq)
		ki->kki_flags |= KV_BK_SEALED;
	*out = ino;
	return 0;
}

void kv_batch_prefetch(struct kv_batch *b, const char *const *names, const size_t *lens, unsigned n)
{
	char(*paths)[KV_BATCH_PATH_MAX + 1];
	const char **lasts;
	struct kv_inode *run = NULL;
	unsigned from = 0, m = 0;

	if (!b->kb_remote.br_prefetch || n < 2)
		return;
	paths = malloc(n * sizeof(*paths));
	lasts = malloc(n * sizeof(*lasts));
	for (unsigned i = 0; paths && lasts && i <= n; i++) {
		struct kv_inode *dir = NULL;
		struct kv_attr a;
		const char *last;

		if (i < n && walk(b, names[i], lens[i], paths[m], false, &dir, &a, &last))
			continue;
		if (run && (i == n || dir != run)) { /* the run of keys in run ends */
			b->kb_remote.br_prefetch(b->kb_remote.br_arg, run, lasts + from, m - from);
			kv_inode_put(run);
			run = NULL;
		}
		if (i == n)
			break;
		if (!run) {
			run = dir;
			from = m;
		} else {
			kv_inode_put(dir);
		}
		lasts[m++] = last;
	}
	if (run)
		kv_inode_put(run);
	free(paths);
	free(lasts);
}

int64_t kv_batch_lookup(struct kv_batch *b, const char *name, size_t len, struct kv_key_info *ki)
{
	struct kv_inode *ino;
	int err = find(b, name, len, 0, ki, &ino);

	if (err)
		return err;
	kv_inode_put(ino);
	return (ki->kki_flags & KV_BK_SEALED) ? (int64_t)ki->kki_size : -EBUSY;
}

/*
 * Whether the caller may put a new value under name in dir (attributes
 * pa), as it may create a file there and rename it over the name: write
 * permission on dir and, when dir is sticky, ownership of what the name
 * holds now. 0, -EACCES or -EPERM.
 */
static int may_replace(struct kv_batch *b, struct kv_inode *dir, const struct kv_attr *pa,
		       const char *name)
{
	struct kv_inode *old;
	struct kv_attr a;
	int err = kv_may(&b->kb_cred, pa, W_OK);

	if (err || !kv_sticky_for(&b->kb_cred, pa) || remote_lookup(b, dir, name) ||
	    kv_store_lookup(b->kb_st, dir, name, &old, &a))
		return err;
	kv_inode_put(old);
	return kv_may_take(&b->kb_cred, pa, &a);
}

/* Copies m's bytes into the open object, BATCH_IOV extents at a time. */
static int fill(struct kv_obj *obj, const struct kv_batch_mem *m)
{
	struct iovec iov[BATCH_IOV];
	uint64_t off = 0, bytes;
	int n, err = 0;

	while (!err && off < m->km_len) {
		n = kv_obj_iov(obj, off, m->km_len - off, iov, BATCH_IOV, &bytes);
		err = m->km_copy(m->km_arg, true, off, iov, n);
		off += bytes;
	}
	return err;
}

/* Publishes a filled value under name in dir: put's last step. Takes over obj. */
static int publish(struct kv_batch *b, struct kv_inode *dir, const char *name, struct kv_obj *obj,
		   bool noreplace)
{
	uint64_t t0 = kv_now_ns();
	int err = kv_store_publish(b->kb_st, dir, name, obj, &b->kb_cred, noreplace, NULL);

	add_ns(b, KV_STAGE_INDEX, t0);
	if (err == 1 && b->kb_changed)
		b->kb_changed(b->kb_arg, dir, name, NULL);
	return err < 0 ? err : 0;
}

/* Removes dir/name, a non-directory the caller holds (ino), and says so. */
static int unlink_one(struct kv_batch *b, struct kv_inode *dir, const char *name,
		      struct kv_inode *ino)
{
	int err = kv_store_unlink(b->kb_st, dir, name);

	if (!err && b->kb_changed)
		b->kb_changed(b->kb_arg, dir, name, ino);
	return err;
}

/* A free slot for a copy in flight, or NULL. */
static struct kv_batch_inflight *free_slot(struct kv_batch *b)
{
	for (int i = 0; i < KV_BATCH_INFLIGHT; i++)
		if (!b->kb_inflight[i].bi_busy)
			return &b->kb_inflight[i];
	return NULL;
}

/*
 * Waits for bi's copy, publishes a put's value and lets go of what bi
 * held; the result waits in bi_err for retire_one to report.
 */
static void land(struct kv_batch *b, struct kv_batch_inflight *bi)
{
	int err;

	if (bi->bi_landed)
		return;
	err = bi->bi_wait.bw_wait(bi->bi_wait.bw_arg);
	if (bi->bi_dir) {
		if (err)
			kv_obj_put(bi->bi_obj);
		else
			err = publish(b, bi->bi_dir, bi->bi_name, bi->bi_obj, bi->bi_noreplace);
		kv_inode_put(bi->bi_dir);
	} else if (bi->bi_obj) {
		kv_obj_put(bi->bi_obj);
	} else {
		kv_read_done(&bi->bi_guard);
		kv_inode_put(bi->bi_ino);
	}
	bi->bi_landed = true;
	bi->bi_err = err;
}

static void retire_one(struct kv_batch *b, struct kv_batch_inflight *bi,
		       void (*done)(void *arg, uint64_t key, int err), void *arg)
{
	land(b, bi);
	bi->bi_busy = false;
	done(arg, bi->bi_key, bi->bi_err);
}

/*
 * Lands the puts of dir/name still in flight, oldest first, before a put
 * of that name publishes at once (its copy landed in the call, or it was
 * filled the usual way): a batch's puts of one name publish in the order
 * they were made, whichever way each was copied.
 */
static void land_name(struct kv_batch *b, struct kv_inode *dir, const char *name)
{
	for (;;) {
		struct kv_batch_inflight *old = NULL;

		for (int i = 0; i < KV_BATCH_INFLIGHT; i++) {
			struct kv_batch_inflight *bi = &b->kb_inflight[i];

			if (bi->bi_busy && !bi->bi_landed && bi->bi_dir == dir &&
			    !strcmp(bi->bi_name, name) && (!old || bi->bi_key < old->bi_key))
				old = bi;
		}
		if (!old)
			return;
		land(b, old);
	}
}

/*
 * Starts filling obj from m with km_copy_start when a slot is free and
 * the value is one iov list. Returns 1 when the copy is in flight (the
 * slot then holds obj, a reference on dir and the name, to publish at
 * kv_batch_retire), 0 when it landed already, -EAGAIN when it was not
 * tried (the caller fills as usual), or the copy's error. obj stays the
 * caller's unless 1 is returned.
 */
static int put_start(struct kv_batch *b, struct kv_obj *obj, const struct kv_batch_mem *m,
		     struct kv_inode *dir, const char *name, bool noreplace)
{
	struct kv_batch_inflight *bi = m->km_copy_start ? free_slot(b) : NULL;
	struct iovec iov[BATCH_IOV];
	struct kv_batch_wait w = {0};
	uint64_t bytes;
	int n, err;

	if (!bi)
		return -EAGAIN;
	n = kv_obj_iov(obj, 0, m->km_len, iov, BATCH_IOV, &bytes);
	if (bytes != m->km_len)
		return -EAGAIN;
	err = m->km_copy_start(m->km_arg, true, iov, n, &w);
	if (err || !w.bw_wait)
		return err;
	kv_inode_get(dir);
	*bi = (struct kv_batch_inflight){.bi_wait = w,
					 .bi_key = b->kb_key,
					 .bi_bytes = m->km_len,
					 .bi_busy = true,
					 .bi_obj = obj,
					 .bi_dir = dir,
					 .bi_noreplace = noreplace};
	snprintf(bi->bi_name, sizeof(bi->bi_name), "%s", name);
	return 1;
}

int64_t kv_batch_put(struct kv_batch *b, const char *name, size_t len, unsigned flags,
		     const struct kv_batch_mem *m, struct kv_key_info *ki)
{
	char path[KV_BATCH_PATH_MAX + 1];
	struct kv_inode *dir;
	struct kv_attr pa;
	struct kv_obj *obj;
	const char *last;
	uint64_t t0 = kv_now_ns();
	int err;

	ki->kki_size = m->km_len;
	ki->kki_flags = 0;
	err = walk(b, name, len, path, flags & KV_BATCH_MKDIR, &dir, &pa, &last);
	if (!err) {
		err = may_replace(b, dir, &pa, last);
		if (err)
			kv_inode_put(dir);
	}
	add_ns(b, KV_STAGE_INDEX, t0);
	if (err)
		return err;
	t0 = kv_now_ns();
	err = kv_store_value_new(b->kb_st, m->km_len, dir, last, &obj);
	if (!err) {
		err = put_start(b, obj, m, dir, last, flags & KV_BATCH_NOREPLACE);
		if (err == -EAGAIN)
			err = fill(obj, m);
		if (err < 0)
			kv_obj_put(obj);
	}
	add_ns(b, KV_STAGE_COPY_IN, t0);
	if (!err) { /* landed already; 1: published when kv_batch_retire sees it land */
		land_name(b, dir, last);
		err = publish(b, dir, last, obj, flags & KV_BATCH_NOREPLACE);
	}
	if (err >= 0)
		ki->kki_flags = KV_BK_PRESENT | KV_BK_SEALED | KV_BK_DRAM;
	kv_inode_put(dir);
	return err < 0 ? err : (int64_t)m->km_len;
}

/*
 * A sealed value only on the SSD, of the memory's size, into memory the
 * daemon can address with 4 KiB alignment: one O_DIRECT read straight
 * there. -EAGAIN when any of that does not hold (the caller reads through
 * a buffer instead).
 */
static int get_direct(struct kv_batch *b, struct kv_inode *ino, const struct kv_batch_mem *m,
		      struct kv_key_info *ki)
{
	struct iovec iov[BATCH_IOV];
	uint64_t t0;
	int n, err;

	if (!m->km_direct || ki->kki_size != m->km_len ||
	    (ki->kki_flags & (KV_BK_SEALED | KV_BK_DRAM | KV_BK_SSD)) != (KV_BK_SEALED | KV_BK_SSD))
		return -EAGAIN;
	n = m->km_direct(m->km_arg, iov, BATCH_IOV);
	if (n <= 0)
		return -EAGAIN;
	t0 = kv_now_ns();
	err = kv_store_read_direct(b->kb_st, ino, iov, n, m->km_len);
	add_ns(b, KV_STAGE_SSD_READ, t0);
	if (!err) {
		ki->kki_flags = (ki->kki_flags & ~(unsigned)KV_BK_DRAM) | KV_BK_SSD;
		b->kb_direct++;
	}
	return err;
}

static int get_start(struct kv_batch *b, struct kv_inode *ino, const struct kv_batch_mem *m,
		     const struct iovec *iov, int n, struct kv_read_guard *guard);

/* Whether every piece of iov is aligned to 4 KiB, address and length: O_DIRECT lands there. */
static bool page_aligned(const struct iovec *iov, int n)
{
	for (int i = 0; i < n; i++)
		if ((uintptr_t)iov[i].iov_base % KV_PAGE_SIZE || iov[i].iov_len % KV_PAGE_SIZE)
			return false;
	return true;
}

/*
 * A sealed value only on the SSD, of the memory's size, into memory that
 * get_direct could not read into (a device, a process's pages): one
 * O_DIRECT read into staging taken from the pool (pinned for a device's
 * DMA), and the copy from there left in flight, so that the next key's
 * read overlaps it.
 * Returns 1 when the copy is in flight (a slot of kb_inflight holds the
 * staging), 0 when it is done, -EAGAIN when any of that does not hold or
 * there is no free slot (the caller reads as usual), or an error.
 */
static int get_staged(struct kv_batch *b, struct kv_inode *ino, const struct kv_batch_mem *m,
		      struct kv_key_info *ki)
{
	struct kv_batch_inflight *bi = m->km_copy_start ? free_slot(b) : NULL;
	struct iovec iov[BATCH_IOV];
	struct kv_batch_wait w = {0};
	struct kv_obj *stage;
	uint64_t bytes, t0;
	int n, err;

	if (!bi || ki->kki_size != m->km_len || m->km_len % KV_PAGE_SIZE ||
	    (ki->kki_flags & (KV_BK_SEALED | KV_BK_DRAM | KV_BK_SSD)) !=
		(KV_BK_SEALED | KV_BK_SSD) ||
	    kv_store_stage_new(b->kb_st, m->km_len, &stage))
		return -EAGAIN;
	n = kv_obj_iov(stage, 0, m->km_len, iov, BATCH_IOV, &bytes);
	err = bytes == m->km_len && page_aligned(iov, n) ? 0 : -EAGAIN;
	t0 = kv_now_ns();
	if (!err)
		err = kv_store_read_direct(b->kb_st, ino, iov, n, m->km_len);
	add_ns(b, KV_STAGE_SSD_READ, t0);
	t0 = kv_now_ns();
	if (!err)
		err = m->km_copy_start(m->km_arg, false, iov, n, &w);
	add_ns(b, KV_STAGE_COPY_OUT, t0);
	if (err || !w.bw_wait) {
		kv_obj_put(stage);
		return err;
	}
	*bi = (struct kv_batch_inflight){.bi_wait = w,
					 .bi_key = b->kb_key,
					 .bi_bytes = m->km_len,
					 .bi_busy = true,
					 .bi_obj = stage};
	ki->kki_flags = (ki->kki_flags & ~(unsigned)KV_BK_DRAM) | KV_BK_SSD;
	return 1;
}

/*
 * Reads the value with kv_store_read, piece by piece (an SSD read covers
 * KV_READ_EXTENTS extents at most, so no value needs a buffer its whole
 * size), and copies each piece into m. The first piece names the version
 * (struct kv_read_guard): its whole size is checked against the memory
 * before anything is copied, and every later piece must be of the same
 * version (a new version always gets a higher sequence number).
 * Returns 1 when the copy is in flight (get_start: the slot holds ino's
 * reference), 0 when it is done, -EAGAIN when the value changed between
 * two pieces (read it again), or -EBUSY (being written), -EMSGSIZE (the
 * memory is not the value's size, *ki says the size), -errno.
 */
static int get_read(struct kv_batch *b, struct kv_inode *ino, const struct kv_batch_mem *m,
		    struct kv_key_info *ki)
{
	struct iovec iov[BATCH_IOV];
	struct kv_read_guard guard;
	uint64_t t0, off = 0, bytes, size = 0, seq = 0;
	int n, err = 0;

	do {
		t0 = kv_now_ns();
		n = kv_store_read(b->kb_st, ino, off, UINT64_MAX, iov, BATCH_IOV, &bytes, &guard);
		if (n < 0)
			return n;
		add_ns(b, guard.krg_buf[0] ? KV_STAGE_SSD_READ : KV_STAGE_INDEX, t0);
		if (off == 0) {
			size = guard.krg_size;
			seq = guard.krg_seq;
			ki->kki_size = size;
			ki->kki_flags &= ~(unsigned)(KV_BK_DRAM | KV_BK_SSD);
			ki->kki_flags |=
			    guard.krg_buf[0] || guard.krg_ra[0] ? KV_BK_SSD : KV_BK_DRAM;
			if (guard.krg_locked)
				err = -EBUSY;
			else if (size != m->km_len)
				err = -EMSGSIZE;
		} else if (guard.krg_locked || guard.krg_seq != seq) {
			err = -EAGAIN;
		}
		if (!err && bytes == 0 && off < size)
			err = -EAGAIN; /* shorter than its version says: changed meanwhile */
		t0 = kv_now_ns();
		if (!err && off == 0 && bytes == size) {
			int r = get_start(b, ino, m, iov, n, &guard);

			if (r == 1) {
				add_ns(b, KV_STAGE_COPY_OUT, t0);
				return 1; /* the copy and the version are now kb_inflight's */
			}
			if (r != -EAGAIN) { /* copied already, or failed */
				add_ns(b, KV_STAGE_COPY_OUT, t0);
				kv_read_done(&guard);
				return r;
			}
		}
		if (!err)
			err = m->km_copy(m->km_arg, false, off, iov, n);
		add_ns(b, KV_STAGE_COPY_OUT, t0);
		kv_read_done(&guard);
		off += bytes;
	} while (!err && off < size);
	return err;
}

int64_t kv_batch_get(struct kv_batch *b, const char *name, size_t len, const struct kv_batch_mem *m,
		     struct kv_key_info *ki)
{
	struct kv_inode *ino;
	int err;

	err = find(b, name, len, R_OK, ki, &ino);
	if (err)
		return err;
	err = get_direct(b, ino, m, ki);
	if (err == -EAGAIN)
		err = get_staged(b, ino, m, ki);
	if (err != -EAGAIN) { /* 1: the staging copy is in flight, holding no reference */
		kv_inode_put(ino);
		return err < 0 ? err : (int64_t)m->km_len;
	}
	for (int i = 0; err == -EAGAIN && i < GET_TRIES; i++)
		err = get_read(b, ino, m, ki);
	if (err == -EAGAIN)
		err = -EBUSY; /* rewritten under every try */
	if (err != 1)	      /* 1: the reference is the copy in flight's */
		kv_inode_put(ino);
	return err < 0 ? err : (int64_t)m->km_len;
}

/*
 * Starts the copy of a whole value (one iov list) with km_copy_start when a
 * slot of kb_inflight is free. Returns 1 when the copy is in flight (the
 * slot then holds the guard and the inode reference), 0 when it is done
 * already, -EAGAIN when it was not tried (no km_copy_start, no free slot:
 * the caller copies as usual), or the copy's error (nothing in flight).
 */
static int get_start(struct kv_batch *b, struct kv_inode *ino, const struct kv_batch_mem *m,
		     const struct iovec *iov, int n, struct kv_read_guard *guard)
{
	struct kv_batch_inflight *bi = m->km_copy_start ? free_slot(b) : NULL;
	struct kv_batch_wait w = {0};
	int err;

	if (!bi)
		return -EAGAIN;
	err = m->km_copy_start(m->km_arg, false, iov, n, &w);
	if (err || !w.bw_wait)
		return err;
	*bi = (struct kv_batch_inflight){.bi_wait = w,
					 .bi_key = b->kb_key,
					 .bi_bytes = m->km_len,
					 .bi_busy = true,
					 .bi_guard = *guard,
					 .bi_ino = ino};
	return 1;
}

void kv_batch_retire(struct kv_batch *b, bool all, void (*done)(void *arg, uint64_t key, int err),
		     void *arg)
{
	/* Values in flight are pool memory nobody else can have: an eighth of a small pool. */
	uint64_t cap = kv_pool_size(kv_store_pool(b->kb_st)) / 8;

	if (cap > KV_BATCH_INFLIGHT_BYTES)
		cap = KV_BATCH_INFLIGHT_BYTES;
	for (;;) {
		struct kv_batch_inflight *old = NULL;
		uint64_t bytes = 0;
		int busy = 0;

		/* oldest first: puts of one name publish in the order they were made */
		for (int i = 0; i < KV_BATCH_INFLIGHT; i++) {
			struct kv_batch_inflight *bi = &b->kb_inflight[i];

			if (!bi->bi_busy)
				continue;
			busy++;
			bytes += bi->bi_landed ? 0 : bi->bi_bytes;
			if (!old || bi->bi_key < old->bi_key)
				old = bi;
		}
		if (!old || (!all && busy < KV_BATCH_INFLIGHT && bytes <= cap))
			return;
		retire_one(b, old, done, arg);
	}
}

/*
 * Removes dir/name and everything below it, as rm -rf would: the caller
 * may write dir (attributes da); a directory is emptied when the caller
 * may read, write and search it. Returns the keys removed, or -errno: the
 * first refusal met below, or why dir/name itself stayed.
 */
static int64_t rm_tree(struct kv_batch *b, struct kv_inode *dir, const struct kv_attr *da,
		       const char *name)
{
	struct kv_store *st = b->kb_st;
	struct kv_dir_snap snap;
	struct kv_inode *c;
	struct kv_attr a;
	int64_t keys = 0, r;
	int err, denied = 0;

	err = kv_store_lookup(st, dir, name, &c, &a);
	if (err)
		return err;
	err = kv_may_take(&b->kb_cred, da, &a);
	if (err || !kv_inode_is_dir(c)) {
		if (!err)
			err = unlink_one(b, dir, name, c);
		kv_inode_put(c);
		return err ? err : S_ISREG(a.ka_mode);
	}
	for (int pass = 0; pass < RMTREE_TRIES && !denied; pass++) {
		err = kv_store_readdir(st, c, &snap);
		if (err)
			break;
		if (snap.kds_count)
			denied = kv_may(&b->kb_cred, &a, R_OK | W_OK | X_OK);
		for (uint32_t i = 0; i < snap.kds_count && !denied; i++) {
			r = rm_tree(b, c, &a, snap.kds_ent[i].kde_name);
			if (r > 0)
				keys += r;
			else if (r == -EACCES || r == -EPERM)
				denied = (int)r;
		}
		kv_dir_snap_free(&snap);
		err = denied ? denied : kv_store_rmdir(st, dir, name);
		if (!err && b->kb_changed)
			b->kb_changed(b->kb_arg, dir, name, c);
		if (err != -ENOTEMPTY)
			break;
	}
	kv_inode_put(c);
	return err && err != -ENOENT ? err : keys;
}

int64_t kv_batch_remove(struct kv_batch *b, const char *name, size_t len, bool recursive)
{
	char path[KV_BATCH_PATH_MAX + 1];
	struct kv_inode *dir, *ino;
	struct kv_attr pa, a;
	const char *last;
	uint64_t t0 = kv_now_ns();
	int64_t r;
	int err;

	err = walk(b, name, len, path, false, &dir, &pa, &last);
	if (err)
		return err;
	err = remote_lookup(b, dir, last);
	if (!err)
		err = kv_store_lookup(b->kb_st, dir, last, &ino, &a);
	if (err) {
		kv_inode_put(dir);
		return err;
	}
	err = kv_may(&b->kb_cred, &pa, W_OK);
	if (!err)
		err = kv_may_take(&b->kb_cred, &pa, &a);
	if (!err && S_ISDIR(a.ka_mode) && !recursive)
		err = -EISDIR;
	r = err;
	if (!err && S_ISDIR(a.ka_mode)) {
		r = rm_tree(b, dir, &pa, last);
	} else if (!err) {
		err = unlink_one(b, dir, last, ino);
		r = err ? err : S_ISREG(a.ka_mode); /* a symlink, FIFO or socket: no key */
	}
	add_ns(b, KV_STAGE_INDEX, t0);
	kv_inode_put(ino);
	kv_inode_put(dir);
	return r;
}
