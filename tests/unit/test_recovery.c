/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_recovery.c — the store's persistence (core/store.h with a
 * data directory): what kv_store_destroy leaves (offloaded values, a
 * checkpoint) and what kv_store_create brings back from it (checkpoint,
 * journal, bucket tails), on real O_DIRECT files in a temporary directory
 * under /tmp.
 *
 * The state of a store is compared as a sorted listing of its tree: every
 * path with its type, mode, owner, times, size and a hash of its bytes;
 * file contents are also compared byte for byte with what was written.
 *
 * A crash is simulated without killing anything: the data directory is
 * copied while the store is alive (metadata first, then the buckets, so
 * the copy is a state the disk could have been in), and a second store
 * recovers from the copy. The journal of such a copy is then torn at
 * several offsets.
 *
 * The threaded test (label "concurrency") runs under TSan too. Threads
 * never call cmocka's assertions (they longjmp): every helper returns 0 or
 * a negative errno (-EBADMSG: bytes differ), and the threads count
 * failures, which the main thread checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "core/store.h"
#include "pattern.h"
#include "core/persist.h"   /* kv_persist_stop: checkpoints after replay */
#include "core/store_int.h" /* ks_ckpt_lock, ks_journal */

#define KIB	 1024u
#define MIB	 (1024u * KIB)
#define MAXIOV	 64
#define READ_MAX (4u * MIB)
#define MAXPATH	 256

static struct kv_cred cred;

/* ---- the temporary directory ---- */

struct fix {
	char f_root[64]; /* /tmp/kvfs-recovery-XXXXXX, removed at the end */
	struct kv_config f_cfg;
};

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static bool direct_ok(const char *dir)
{
	char probe[96];
	int fd;

	snprintf(probe, sizeof(probe), "%s/probe", dir);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	close(fd);
	unlink(probe);
	return true;
}

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	strcpy(f->f_root, "/tmp/kvfs-recovery-XXXXXX");
	if (!mkdtemp(f->f_root)) {
		free(f);
		return -1;
	}
	kv_config_defaults(&f->f_cfg);
	f->f_cfg.kc_mem_size = 32 * MIB;
	f->f_cfg.kc_ssd_size = 1ull << 30;
	f->f_cfg.kc_ssd_size_auto = false;
	f->f_cfg.kc_bucket_size = 4 * MIB;
	f->f_cfg.kc_flush_delay_ns = 1000 * 1000;
	cred.kc_uid = getuid();
	cred.kc_gid = getgid();
	*state = f;
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	int rc = nftw(f->f_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);

	free(f);
	return rc ? -1 : 0;
}

/* The fixture, skipping the test (loudly) where /tmp takes no O_DIRECT files. */
static struct fix *fix_of(void **state)
{
	struct fix *f = *state;

	if (!direct_ok(f->f_root)) {
		print_message("SKIP: %s takes no O_DIRECT files\n", f->f_root);
		skip();
	}
	return f;
}

/* Makes the data directory f_root/name; returns its O_DIRECTORY fd. */
static int ddir(struct fix *f, const char *name)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", f->f_root, name);
	assert_true(mkdir(path, 0700) == 0 || errno == EEXIST);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

static struct kv_store *store_open(struct fix *f, int dirfd)
{
	struct kv_store *st = NULL;

	assert_int_equal(kv_store_create(&st, &f->f_cfg, dirfd), 0);
	assert_non_null(st);
	return st;
}

static struct kv_store_usage usage(struct kv_store *st)
{
	struct kv_store_usage u;

	kv_store_usage(st, &u);
	return u;
}

/* ---- copying a data directory (a crash image) ---- */

static int copy_file(int src, int dst, const char *name)
{
	int in = openat(src, name, O_RDONLY | O_CLOEXEC), out, err = 0;
	char *buf = malloc(MIB);
	ssize_t n;

	if (in < 0 || !buf) {
		free(buf);
		if (in >= 0)
			close(in);
		return -EIO;
	}
	out = openat(dst, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		err = -errno;
	while (!err && (n = read(in, buf, MIB)) > 0)
		if (write(out, buf, (size_t)n) != n)
			err = -EIO;
	if (out >= 0 && fsync(out) < 0)
		err = -errno;
	if (out >= 0)
		close(out);
	close(in);
	free(buf);
	return err;
}

/*
 * Copies the tree under src into dst: the files of a directory first, then
 * its subdirectories, so the journal is copied before the buckets it
 * points into.
 */
static void copy_tree(int src, int dst)
{
	for (int pass = 0; pass < 2; pass++) {
		/* A description of its own: a dup would share (and move) src's position. */
		DIR *d = fdopendir(openat(src, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		struct dirent *de;

		assert_non_null(d);
		while ((de = readdir(d))) {
			struct stat sb;

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			if (fstatat(src, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
				continue; /* gone meanwhile (a dropped journal) */
			if (pass == 0 && S_ISREG(sb.st_mode)) {
				int err = copy_file(src, dst, de->d_name);

				assert_true(err == 0 || faccessat(src, de->d_name, F_OK, 0) < 0);
			} else if (pass == 1 && S_ISDIR(sb.st_mode)) {
				int s2 =
					openat(src, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
				    d2;

				assert_true(s2 >= 0);
				assert_true(mkdirat(dst, de->d_name, 0700) == 0 || errno == EEXIST);
				d2 = openat(dst, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				assert_true(d2 >= 0);
				copy_tree(s2, d2);
				close(s2);
				close(d2);
			}
		}
		closedir(d);
	}
}

/* The newest journal.<gen> of a data directory. */
static uint64_t newest_journal(int dirfd, char *name, size_t len)
{
	DIR *d = fdopendir(openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	struct dirent *de;
	uint64_t max = 0;
	bool any = false;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char *end;
		uint64_t g;

		if (strncmp(de->d_name, "journal.", 8))
			continue;
		g = strtoull(de->d_name + 8, &end, 10);
		if (!*end && (!any || g > max)) {
			max = g;
			any = true;
		}
	}
	closedir(d);
	assert_true(any);
	snprintf(name, len, "journal.%" PRIu64, max);
	return max;
}

static uint64_t fsize(int dirfd, const char *name)
{
	struct stat sb;

	assert_int_equal(fstatat(dirfd, name, &sb, 0), 0);
	return (uint64_t)sb.st_size;
}

static int truncate_at(int dirfd, const char *name, uint64_t size)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 || fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

/* ---- values ---- */

/* A value of len bytes, the pattern of seed: byte i is byte i % 8 of word i / 8. */
static char *value_of(uint64_t seed, uint64_t len)
{
	char *p = malloc(len + 8);

	if (p)
		pattern(p, seed, 0, len);
	return p;
}

/* ---- the namespace, through the store API (0 or -errno; no cmocka in here) ---- */

/*
 * Resolves a path ("" is the root) to an inode with one lookup reference
 * (drop it with kv_store_forget).
 */
static int resolve(struct kv_store *st, const char *path, struct kv_inode **out)
{
	struct kv_inode *dir = kv_store_root(st);
	char buf[MAXPATH], *save = NULL, *comp;

	kv_inode_get(dir);
	snprintf(buf, sizeof(buf), "%s", path);
	for (comp = strtok_r(buf, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		struct kv_inode *c;
		struct kv_attr a;
		int err = kv_store_lookup(st, dir, comp, &c, &a);

		kv_store_forget(st, dir, 1);
		if (err)
			return err;
		dir = c;
	}
	*out = dir;
	return 0;
}

/* The parent of path (with a reference) and its last component. */
static int parent(struct kv_store *st, const char *path, struct kv_inode **dir, const char **name)
{
	char buf[MAXPATH];
	const char *slash = strrchr(path, '/');

	if (!slash) {
		*name = path;
		return resolve(st, "", dir);
	}
	snprintf(buf, sizeof(buf), "%.*s", (int)(slash - path), path);
	*name = slash + 1;
	return resolve(st, buf, dir);
}

/* Writes buf[0, len) into an open ino in up to three pieces, the last one first. */
static int write_pieces(struct kv_store *st, struct kv_inode *ino, const char *buf, uint64_t len)
{
	uint64_t a = len / 3, b = len / 3 * 2;
	int err = 0;

	if (len - b)
		err = kv_store_write(st, ino, b, buf + b, len - b);
	if (!err && a)
		err = kv_store_write(st, ino, 0, buf, a);
	if (!err && b - a)
		err = kv_store_write(st, ino, a, buf + a, b - a);
	return err;
}

/* Creates a file holding buf[0, len); with do_fsync, fsyncs it before the last close. */
static int create_file(struct kv_store *st, const char *path, mode_t mode, const char *buf,
		       uint64_t len, bool do_fsync)
{
	struct kv_inode *dir, *ino;
	struct kv_attr a;
	const char *name;
	int err = parent(st, path, &dir, &name);

	if (err)
		return err;
	err = kv_store_create_open(st, dir, name, mode, &cred, &ino, &a);
	kv_store_forget(st, dir, 1);
	if (err)
		return err;
	err = write_pieces(st, ino, buf, len);
	if (!err && do_fsync)
		err = kv_store_fsync(st, ino);
	kv_store_release(st, ino, O_WRONLY);
	kv_store_forget(st, ino, 1);
	return err;
}

/* Replaces a file's bytes with buf[0, len) (open with O_TRUNC, write, close). */
static int overwrite_file(struct kv_store *st, const char *path, const char *buf, uint64_t len)
{
	struct kv_inode *ino;
	int err = resolve(st, path, &ino);

	if (err)
		return err;
	err = kv_store_open(st, ino, O_WRONLY | O_TRUNC);
	if (!err) {
		err = write_pieces(st, ino, buf, len);
		kv_store_release(st, ino, O_WRONLY);
	}
	kv_store_forget(st, ino, 1);
	return err;
}

static int fsync_path(struct kv_store *st, const char *path)
{
	struct kv_inode *ino;
	int err = resolve(st, path, &ino);

	if (err)
		return err;
	err = kv_store_fsync(st, ino);
	kv_store_forget(st, ino, 1);
	return err;
}

/*
 * Makes a node at path: a directory (S_IFDIR), a FIFO or socket of mode, or
 * with a target a symlink to it.
 */
static int make_path(struct kv_store *st, const char *path, mode_t mode, const char *target)
{
	struct kv_inode *dir, *ino;
	struct kv_attr a;
	const char *name;
	int err = parent(st, path, &dir, &name);

	if (err)
		return err;
	if (target)
		err = kv_store_symlink(st, dir, name, target, &cred, &ino, &a);
	else if (S_ISDIR(mode))
		err = kv_store_mkdir(st, dir, name, mode & 07777, &cred, &ino, &a);
	else
		err = kv_store_mknod(st, dir, name, mode, &cred, &ino, &a);
	kv_store_forget(st, dir, 1);
	if (!err)
		kv_store_forget(st, ino, 1);
	return err;
}

static int mkdir_path(struct kv_store *st, const char *path, mode_t mode)
{
	return make_path(st, path, S_IFDIR | mode, NULL);
}

static int unlink_path(struct kv_store *st, const char *path, bool is_dir)
{
	struct kv_inode *dir;
	const char *name;
	int err = parent(st, path, &dir, &name);

	if (err)
		return err;
	err = is_dir ? kv_store_rmdir(st, dir, name) : kv_store_unlink(st, dir, name);
	kv_store_forget(st, dir, 1);
	return err;
}

static int rename_path(struct kv_store *st, const char *from, const char *to, unsigned flags)
{
	struct kv_inode *od, *nd;
	const char *on, *nn;
	int err = parent(st, from, &od, &on);

	if (err)
		return err;
	err = parent(st, to, &nd, &nn);
	if (!err) {
		err = kv_store_rename(st, od, on, nd, nn, flags);
		kv_store_forget(st, nd, 1);
	}
	kv_store_forget(st, od, 1);
	return err;
}

static int setattr_path(struct kv_store *st, const char *path, const struct kv_setattr *sa)
{
	struct kv_inode *ino;
	struct kv_attr a;
	int err = resolve(st, path, &ino);

	if (err)
		return err;
	err = kv_store_setattr(st, ino, sa, &a);
	kv_store_forget(st, ino, 1);
	return err;
}

/*
 * Reads a whole file of `size` bytes through kv_store_read into a new
 * buffer. Every iovec is copied out before kv_read_done: one that points
 * at bytes read from the SSD is freed by it.
 */
static int read_ino(struct kv_store *st, struct kv_inode *ino, uint64_t size, char **out)
{
	char *buf = malloc(size ? size : 1);
	uint64_t off = 0;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		struct iovec iov[MAXIOV];
		struct kv_read_guard g;
		uint64_t bytes = 0, got = 0, want = size - off < READ_MAX ? size - off : READ_MAX;
		int n = kv_store_read(st, ino, off, off < size ? want : 1, iov, MAXIOV, &bytes, &g);

		if (n < 0) {
			free(buf);
			return n;
		}
		for (int i = 0; i < n; i++) {
			if (off + got + iov[i].iov_len > size)
				break;
			memcpy(buf + off + got, iov[i].iov_base, iov[i].iov_len);
			got += iov[i].iov_len;
		}
		kv_read_done(&g);
		if (got != bytes || (off < size && bytes == 0) || (off == size && bytes != 0)) {
			free(buf);
			return -EBADMSG;
		}
		if (off == size)
			break;
		off += bytes;
	}
	*out = buf;
	return 0;
}

/* Reads the file at path: its bytes and size. */
static int read_path(struct kv_store *st, const char *path, char **buf, uint64_t *len)
{
	struct kv_inode *ino;
	struct kv_attr a;
	int err = resolve(st, path, &ino);

	if (err)
		return err;
	err = kv_store_getattr(st, ino, &a);
	if (!err && !S_ISREG(a.ka_mode))
		err = -EISDIR;
	if (!err)
		err = read_ino(st, ino, a.ka_size, buf);
	if (!err)
		*len = a.ka_size;
	kv_store_forget(st, ino, 1);
	return err;
}

/* 0 when the file at path holds exactly want[0, len); -ENOENT when there is none. */
static int check_file(struct kv_store *st, const char *path, const char *want, uint64_t len)
{
	char *buf = NULL;
	uint64_t n = 0;
	int err = read_path(st, path, &buf, &n);

	if (err)
		return err;
	if (n != len || (len && memcmp(buf, want, len)))
		err = -EBADMSG;
	free(buf);
	return err;
}

/* ---- listings ---- */

struct lent {
	char l_path[MAXPATH];
	mode_t l_mode;
	uid_t l_uid;
	gid_t l_gid;
	struct timespec l_atime, l_mtime;
	uint64_t l_size;
	uint64_t l_hash; /* of the bytes, for files */
};

struct listing {
	unsigned ls_n, ls_max;
	struct lent *ls_e;
};

static void list_dir(struct kv_store *st, struct kv_inode *dir, const char *prefix,
		     struct listing *ls)
{
	struct kv_dir_snap snap;

	assert_int_equal(kv_store_readdir(st, dir, &snap), 0);
	for (uint32_t i = 0; i < snap.kds_count; i++) {
		struct kv_inode *c;
		struct kv_attr a;
		struct lent *e;

		assert_int_equal(kv_store_lookup(st, dir, snap.kds_ent[i].kde_name, &c, &a), 0);
		if (ls->ls_n == ls->ls_max) {
			ls->ls_max = ls->ls_max ? 2 * ls->ls_max : 64;
			ls->ls_e = realloc(ls->ls_e, ls->ls_max * sizeof(*ls->ls_e));
			assert_non_null(ls->ls_e);
		}
		e = &ls->ls_e[ls->ls_n++];
		memset(e, 0, sizeof(*e));
		snprintf(e->l_path, sizeof(e->l_path), "%s%s", prefix, snap.kds_ent[i].kde_name);
		e->l_mode = a.ka_mode;
		e->l_uid = a.ka_uid;
		e->l_gid = a.ka_gid;
		e->l_atime = a.ka_atime;
		e->l_mtime = a.ka_mtime;
		if (S_ISDIR(a.ka_mode)) {
			char sub[MAXPATH + 2];

			snprintf(sub, sizeof(sub), "%s/", e->l_path);
			list_dir(st, c, sub, ls);
		} else if (S_ISLNK(a.ka_mode)) {
			const char *target;

			e->l_size = a.ka_size;
			assert_int_equal(kv_store_readlink(st, c, &target), 0);
			assert_int_equal(strlen(target), a.ka_size);
			e->l_hash = XXH3_64bits(target, a.ka_size);
		} else if (S_ISREG(a.ka_mode)) {
			char *buf = NULL;

			e->l_size = a.ka_size;
			assert_int_equal(read_ino(st, c, a.ka_size, &buf), 0);
			e->l_hash = XXH3_64bits(buf, a.ka_size);
			free(buf);
		}
		kv_store_forget(st, c, 1);
	}
	kv_dir_snap_free(&snap);
}

static int lent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lent *)a)->l_path, ((const struct lent *)b)->l_path);
}

/* Every path below the root, sorted, with its attributes and a hash of its bytes. */
static struct listing list_tree(struct kv_store *st)
{
	struct listing ls = {0};

	list_dir(st, kv_store_root(st), "", &ls);
	if (ls.ls_n)
		qsort(ls.ls_e, ls.ls_n, sizeof(*ls.ls_e), lent_cmp);
	return ls;
}

static bool ts_eq(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/*
 * Compares two listings: paths, types, modes, owners, sizes and bytes; file
 * mtimes and atimes; directory mtimes when dir_times. Returns false and
 * says what differs first in msg when they are not the same tree.
 */
static bool listing_same(const struct listing *a, const struct listing *b, bool dir_times,
			 char *msg, size_t size)
{
	for (unsigned i = 0; i < a->ls_n && i < b->ls_n; i++) {
		const struct lent *x = &a->ls_e[i], *y = &b->ls_e[i];
		bool dir = S_ISDIR(x->l_mode);

		if (strcmp(x->l_path, y->l_path))
			snprintf(msg, size, "entry %u: %s, then %s", i, x->l_path, y->l_path);
		else if (x->l_mode != y->l_mode)
			snprintf(msg, size, "%s: mode 0%o, then 0%o", x->l_path, x->l_mode,
				 y->l_mode);
		else if (x->l_uid != y->l_uid || x->l_gid != y->l_gid)
			snprintf(msg, size, "%s: owner %u:%u, then %u:%u", x->l_path, x->l_uid,
				 x->l_gid, y->l_uid, y->l_gid);
		else if (x->l_size != y->l_size || x->l_hash != y->l_hash)
			snprintf(msg, size, "%s: %" PRIu64 " bytes, then %" PRIu64 " (or others)",
				 x->l_path, x->l_size, y->l_size);
		else if ((!dir || dir_times) && !ts_eq(x->l_mtime, y->l_mtime))
			snprintf(msg, size, "%s: mtime %lld.%09ld, then %lld.%09ld", x->l_path,
				 (long long)x->l_mtime.tv_sec, x->l_mtime.tv_nsec,
				 (long long)y->l_mtime.tv_sec, y->l_mtime.tv_nsec);
		else if (!dir && !ts_eq(x->l_atime, y->l_atime))
			snprintf(msg, size, "%s: atime %lld.%09ld, then %lld.%09ld", x->l_path,
				 (long long)x->l_atime.tv_sec, x->l_atime.tv_nsec,
				 (long long)y->l_atime.tv_sec, y->l_atime.tv_nsec);
		else
			continue;
		return false;
	}
	if (a->ls_n != b->ls_n) {
		snprintf(msg, size, "%u entries, then %u (first extra: %s)", a->ls_n, b->ls_n,
			 a->ls_n > b->ls_n ? a->ls_e[b->ls_n].l_path : b->ls_e[a->ls_n].l_path);
		return false;
	}
	return true;
}

static void listing_eq(const struct listing *a, const struct listing *b, bool dir_times)
{
	char msg[2 * MAXPATH + 64];

	if (!listing_same(a, b, dir_times, msg, sizeof(msg)))
		fail_msg("%s", msg);
}

static void listing_free(struct listing *ls)
{
	free(ls->ls_e);
	ls->ls_e = NULL;
	ls->ls_n = ls->ls_max = 0;
}

/* ---- a model of the files: what each must hold ---- */

struct mfile {
	char mf_path[MAXPATH];
	char *mf_buf;
	uint64_t mf_len;
	bool mf_alive;
};

struct model {
	unsigned m_n;
	struct mfile m_f[128];
};

static struct mfile *model_find(struct model *m, const char *path)
{
	for (unsigned i = 0; i < m->m_n; i++)
		if (m->m_f[i].mf_alive && !strcmp(m->m_f[i].mf_path, path))
			return &m->m_f[i];
	return NULL;
}

/* Creates path in the store with the pattern of seed, and in the model. */
static void m_create(struct kv_store *st, struct model *m, const char *path, mode_t mode,
		     uint64_t seed, uint64_t len, bool do_fsync)
{
	struct mfile *f = &m->m_f[m->m_n++];

	assert_true(m->m_n <= 128);
	snprintf(f->mf_path, sizeof(f->mf_path), "%s", path);
	f->mf_buf = value_of(seed, len);
	assert_non_null(f->mf_buf);
	f->mf_len = len;
	f->mf_alive = true;
	assert_int_equal(create_file(st, path, mode, f->mf_buf, len, do_fsync), 0);
}

static void m_unlink(struct kv_store *st, struct model *m, const char *path)
{
	struct mfile *f = model_find(m, path);

	assert_non_null(f);
	assert_int_equal(unlink_path(st, path, false), 0);
	f->mf_alive = false;
}

static void m_rename(struct kv_store *st, struct model *m, const char *from, const char *to,
		     unsigned flags)
{
	struct mfile *src = model_find(m, from), *dst = model_find(m, to);

	assert_int_equal(rename_path(st, from, to, flags), 0);
	if (flags & RENAME_EXCHANGE) {
		assert_non_null(dst);
		snprintf(dst->mf_path, sizeof(dst->mf_path), "%s", from);
	} else if (dst) {
		dst->mf_alive = false;
	}
	if (src) {
		snprintf(src->mf_path, sizeof(src->mf_path), "%s", to);
		return;
	}
	/* A directory: move every file below it. */
	for (unsigned i = 0; i < m->m_n; i++) {
		struct mfile *f = &m->m_f[i];
		size_t n = strlen(from);
		char np[MAXPATH];

		if (f->mf_alive && !strncmp(f->mf_path, from, n) && f->mf_path[n] == '/') {
			snprintf(np, sizeof(np), "%s%s", to, f->mf_path + n);
			snprintf(f->mf_path, sizeof(f->mf_path), "%s", np);
		}
	}
}

/* Checks every live file of the model is in the store, exact. */
static void model_check(struct kv_store *st, const struct model *m)
{
	for (unsigned i = 0; i < m->m_n; i++) {
		const struct mfile *f = &m->m_f[i];
		int err;

		if (!f->mf_alive)
			continue;
		err = check_file(st, f->mf_path, f->mf_buf, f->mf_len);
		if (err)
			fail_msg("%s: %s", f->mf_path, strerror(-err));
	}
}

/* The model's live files are exactly the files of the listing. */
static void model_is_listing(const struct model *m, const struct listing *ls)
{
	unsigned files = 0, alive = 0;

	for (unsigned i = 0; i < ls->ls_n; i++)
		files += S_ISREG(ls->ls_e[i].l_mode);
	for (unsigned i = 0; i < m->m_n; i++)
		alive += m->m_f[i].mf_alive;
	assert_int_equal(files, alive);
}

static void model_free(struct model *m)
{
	for (unsigned i = 0; i < m->m_n; i++)
		free(m->m_f[i].mf_buf);
	m->m_n = 0;
}

/* ---- a namespace with a bit of everything ---- */

static struct kv_setattr sa_mode(mode_t mode)
{
	return (struct kv_setattr){.ksa_valid = KV_SET_MODE, .ksa_mode = mode};
}

/*
 * Builds directories and files of awkward sizes, then renames (plain, over
 * an existing key, a whole directory, an exchange), unlinks, rmdirs,
 * overwrites, truncates, chmods, chowns, sets times and fsyncs.
 */
static void build_namespace(struct kv_store *st, struct model *m)
{
	struct kv_setattr sa;
	char path[MAXPATH];

	assert_int_equal(mkdir_path(st, "a", 0755), 0);
	assert_int_equal(mkdir_path(st, "a/b", 0700), 0);
	assert_int_equal(mkdir_path(st, "a/b/c", 0711), 0);
	assert_int_equal(mkdir_path(st, "empty", 0750), 0);
	assert_int_equal(mkdir_path(st, "gone", 0755), 0);
	assert_int_equal(mkdir_path(st, "m", 0755), 0);
	m_create(st, m, "f0", 0644, 1, 0, false);
	m_create(st, m, "a/f1", 0640, 2, 1, false);
	m_create(st, m, "a/b/f2", 0644, 3, 4095, true);
	m_create(st, m, "a/b/c/f3", 0600, 4, 65537, false);
	m_create(st, m, "f4", 0644, 5, 300000, false);
	m_create(st, m, "f5", 0644, 6, MIB + 3, false);
	for (unsigned i = 0; i < 12; i++) {
		snprintf(path, sizeof(path), "m/k%u", i);
		m_create(st, m, path, 0644, 100 + i, 100 + i * 4099, i == 11);
	}

	/* A sparse file: one write at 10000 into an empty file. */
	{
		struct mfile *f = &m->m_f[m->m_n++];
		struct kv_inode *ino;

		snprintf(f->mf_path, sizeof(f->mf_path), "a/sparse");
		f->mf_len = 15000;
		f->mf_buf = calloc(1, f->mf_len);
		f->mf_alive = true;
		assert_non_null(f->mf_buf);
		memcpy(f->mf_buf + 10000, m->m_f[4].mf_buf, 5000);
		assert_int_equal(create_file(st, "a/sparse", 0644, "", 0, false), 0);
		assert_int_equal(resolve(st, "a/sparse", &ino), 0);
		assert_int_equal(kv_store_open(st, ino, O_WRONLY), 0);
		assert_int_equal(kv_store_write(st, ino, 10000, m->m_f[4].mf_buf, 5000), 0);
		kv_store_release(st, ino, O_WRONLY);
		kv_store_forget(st, ino, 1);
	}

	m_rename(st, m, "a/f1", "a/b/f1r", 0);
	m_rename(st, m, "f4", "f5", 0); /* over an existing key */
	m_rename(st, m, "a/b/c", "cdir", 0);
	m_rename(st, m, "m/k0", "m/k1", RENAME_EXCHANGE);
	m_unlink(st, m, "m/k2");
	m_unlink(st, m, "m/k3");
	assert_int_equal(unlink_path(st, "gone", true), 0);

	/* Overwrite; truncate; unlink and create again under the same name. */
	{
		struct mfile *f = model_find(m, "m/k4");

		free(f->mf_buf);
		f->mf_len = 7777;
		f->mf_buf = value_of(400, f->mf_len);
		assert_int_equal(overwrite_file(st, "m/k4", f->mf_buf, f->mf_len), 0);
		f = model_find(m, "m/k5");
		f->mf_len = 50;
		sa = (struct kv_setattr){.ksa_valid = KV_SET_SIZE, .ksa_size = 50};
		assert_int_equal(setattr_path(st, "m/k5", &sa), 0);
	}
	m_unlink(st, m, "m/k6");
	m_create(st, m, "m/k6", 0600, 600, 3000, false);

	/* A file written, fsynced while open, written again, closed. */
	{
		struct mfile *f = model_find(m, "m/k9");
		struct kv_inode *ino;
		char *more = value_of(900, 5000);

		assert_non_null(more);
		assert_int_equal(resolve(st, "m/k9", &ino), 0);
		assert_int_equal(kv_store_open(st, ino, O_WRONLY), 0);
		assert_int_equal(kv_store_write(st, ino, f->mf_len, more, 5000), 0);
		assert_int_equal(kv_store_fsync(st, ino), 0);
		assert_int_equal(kv_store_write(st, ino, 0, more, 100), 0);
		kv_store_release(st, ino, O_WRONLY);
		kv_store_forget(st, ino, 1);
		f->mf_buf = realloc(f->mf_buf, f->mf_len + 5000);
		assert_non_null(f->mf_buf);
		memcpy(f->mf_buf + f->mf_len, more, 5000);
		memcpy(f->mf_buf, more, 100);
		f->mf_len += 5000;
		free(more);
	}

	/* Attributes, of files and directories. */
	sa = sa_mode(0600);
	assert_int_equal(setattr_path(st, "a/b/f2", &sa), 0);
	sa = (struct kv_setattr){
	    .ksa_valid = KV_SET_UID | KV_SET_GID, .ksa_uid = 1234, .ksa_gid = 5678};
	assert_int_equal(setattr_path(st, "m/k7", &sa), 0);
	sa = (struct kv_setattr){
	    .ksa_valid = KV_SET_ATIME | KV_SET_MTIME,
	    .ksa_atime = {.tv_sec = 1000000000, .tv_nsec = 1},
	    .ksa_mtime = {.tv_sec = 1234567890, .tv_nsec = 123456789},
	};
	assert_int_equal(setattr_path(st, "m/k8", &sa), 0);
	sa = sa_mode(04751);
	assert_int_equal(setattr_path(st, "m/k10", &sa), 0);
	sa = sa_mode(0750);
	assert_int_equal(setattr_path(st, "a/b", &sa), 0);
	sa = (struct kv_setattr){.ksa_valid = KV_SET_UID | KV_SET_GID | KV_SET_MTIME,
				 .ksa_uid = 4321,
				 .ksa_gid = 8765,
				 .ksa_mtime = {.tv_sec = 1500000000, .tv_nsec = 5}};
	assert_int_equal(setattr_path(st, "empty", &sa), 0);

	assert_int_equal(fsync_path(st, "f0"), 0);
	assert_int_equal(fsync_path(st, "a"), 0);
	assert_int_equal(fsync_path(st, ""), 0);
}

/* ---- tests ---- */

/*
 * A clean shutdown and a start on the same directory, twice: the tree
 * comes back the same — paths, types, modes, owners, times, sizes, bytes —
 * and so do the store's counters.
 */
static void test_clean_restart(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	struct kv_store *st = store_open(f, dfd);
	struct model m = {0};
	struct listing before, after;
	struct kv_store_usage u0, u1;

	assert_int_equal(usage(st).ku_recovered_keys, 0);
	assert_true(usage(st).ku_ssd);
	build_namespace(st, &m);
	model_check(st, &m);
	before = list_tree(st);
	model_is_listing(&m, &before);
	u0 = usage(st);
	kv_store_destroy(st);

	for (int round = 0; round < 2; round++) {
		st = store_open(f, dfd);
		after = list_tree(st);
		listing_eq(&before, &after, true);
		model_check(st, &m);
		u1 = usage(st);
		assert_int_equal(u1.ku_keys, u0.ku_keys);
		assert_int_equal(u1.ku_dirs, u0.ku_dirs);
		assert_int_equal(u1.ku_bytes, u0.ku_bytes);
		assert_int_equal(u1.ku_recovered_keys, u0.ku_keys);
		assert_int_equal(u1.ku_torn_buckets, 0);
		assert_int_equal(u1.ku_open, 0);
		assert_true(u1.ku_last_seq >= u0.ku_last_seq);
		/* Deleted and renamed-away names stay gone. */
		for (const char *const *p =
			 (const char *const[]){"a/f1", "f4", "a/b/c", "gone", "m/k2", "m/k3", NULL};
		     *p; p++) {
			struct kv_inode *ino;

			assert_int_equal(resolve(st, *p, &ino), -ENOENT);
		}
		listing_free(&after);
		kv_store_destroy(st);
	}
	listing_free(&before);
	model_free(&m);
	close(dfd);
}

/* After a restart, a new value of an old key gets a newer sequence number and wins. */
static void test_restart_then_write(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	struct kv_store *st = store_open(f, dfd);
	char *v1 = value_of(1, 5000), *v2 = value_of(2, 3000);
	uint64_t seq;

	assert_int_equal(create_file(st, "k", 0644, v1, 5000, false), 0);
	seq = usage(st).ku_last_seq;
	kv_store_destroy(st);

	st = store_open(f, dfd);
	assert_true(usage(st).ku_last_seq >= seq);
	assert_int_equal(check_file(st, "k", v1, 5000), 0);
	assert_int_equal(overwrite_file(st, "k", v2, 3000), 0);
	assert_true(usage(st).ku_last_seq > seq);
	assert_int_equal(create_file(st, "k2", 0644, v1, 10, false), 0);
	kv_store_destroy(st);

	st = store_open(f, dfd);
	assert_int_equal(check_file(st, "k", v2, 3000), 0);
	assert_int_equal(check_file(st, "k2", v1, 10), 0);
	kv_store_destroy(st);
	free(v1);
	free(v2);
	close(dfd);
}

/* Times before 1970 (touch -d 1960-01-01) come back as they were set. */
static void test_pre_epoch_times(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	struct kv_store *st = store_open(f, dfd);
	struct kv_setattr sa = {
	    .ksa_valid = KV_SET_ATIME | KV_SET_MTIME,
	    .ksa_atime = {.tv_sec = -1, .tv_nsec = 999999999},
	    .ksa_mtime = {.tv_sec = -315619200, .tv_nsec = 500000000},
	};
	struct kv_inode *ino;
	struct kv_attr a;

	assert_int_equal(create_file(st, "old", 0644, "x", 1, false), 0);
	assert_int_equal(setattr_path(st, "old", &sa), 0);
	kv_store_destroy(st);

	st = store_open(f, dfd);
	assert_int_equal(resolve(st, "old", &ino), 0);
	assert_int_equal(kv_store_getattr(st, ino, &a), 0);
	kv_store_forget(st, ino, 1);
	kv_store_destroy(st);
	close(dfd);
	if (!ts_eq(a.ka_mtime, sa.ksa_mtime) || !ts_eq(a.ka_atime, sa.ksa_atime))
		fail_msg("set mtime %lld.%09ld atime %lld.%09ld; recovered mtime %lld.%09ld atime "
			 "%lld.%09ld",
			 (long long)sa.ksa_mtime.tv_sec, sa.ksa_mtime.tv_nsec,
			 (long long)sa.ksa_atime.tv_sec, sa.ksa_atime.tv_nsec,
			 (long long)a.ka_mtime.tv_sec, a.ka_mtime.tv_nsec,
			 (long long)a.ka_atime.tv_sec, a.ka_atime.tv_nsec);
}

/* The root's own mode and owner (chmod/chown of the mount point) survive a restart. */
static void test_root_attrs(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	struct kv_store *st = store_open(f, dfd);
	struct kv_setattr sa = {.ksa_valid = KV_SET_MODE | KV_SET_UID | KV_SET_GID,
				.ksa_mode = 0710,
				.ksa_uid = 4242,
				.ksa_gid = 4343};
	struct kv_attr a;

	assert_int_equal(setattr_path(st, "", &sa), 0);
	assert_int_equal(kv_store_getattr(st, kv_store_root(st), &a), 0);
	assert_int_equal(a.ka_mode, S_IFDIR | 0710);
	assert_int_equal(mkdir_path(st, "d", 0755), 0);
	kv_store_destroy(st);

	st = store_open(f, dfd);
	assert_int_equal(kv_store_getattr(st, kv_store_root(st), &a), 0);
	kv_store_destroy(st);
	close(dfd);
	if (a.ka_mode != (S_IFDIR | 0710) || a.ka_uid != 4242 || a.ka_gid != 4343)
		fail_msg("root set to 0%o %u:%u, recovered as 0%o %u:%u", S_IFDIR | 0710, 4242,
			 4343, a.ka_mode, a.ka_uid, a.ka_gid);
}

/* Second-phase operations on a recovered tree, for the replay test. */
static void more_ops(struct kv_store *st, struct model *m)
{
	struct kv_setattr sa;

	m_rename(st, m, "a/b/f2", "a/f2moved", 0);
	m_rename(st, m, "m/k7", "m/k8", 0); /* over an existing key */
	m_rename(st, m, "cdir", "a/b/cdir2", 0);
	m_unlink(st, m, "m/k10");
	assert_int_equal(mkdir_path(st, "n", 0700), 0);
	assert_int_equal(mkdir_path(st, "n/o", 0755), 0);
	m_create(st, m, "n/o/p", 0644, 7000, 200000, false);
	m_create(st, m, "n/q", 0644, 7001, 1, false);
	m_create(st, m, "m/k2", 0644, 7002, 40000, false); /* a name that was deleted before */
	{
		struct mfile *f = model_find(m, "f5");

		free(f->mf_buf);
		f->mf_len = 123456;
		f->mf_buf = value_of(7003, f->mf_len);
		assert_int_equal(overwrite_file(st, "f5", f->mf_buf, f->mf_len), 0);
	}
	/* Exchanges of durable keys: the journal must say it was an exchange. */
	assert_int_equal(fsync_path(st, "n/q"), 0);
	assert_int_equal(fsync_path(st, "n/o/p"), 0);
	m_rename(st, m, "n/q", "n/o/p", RENAME_EXCHANGE);
	m_rename(st, m, "m/k0", "m/k1", RENAME_EXCHANGE);
	sa = sa_mode(0444);
	assert_int_equal(setattr_path(st, "n/o/p", &sa), 0);
	sa = (struct kv_setattr){.ksa_valid = KV_SET_MTIME | KV_SET_UID,
				 .ksa_uid = 77,
				 .ksa_mtime = {.tv_sec = 1600000000, .tv_nsec = 42}};
	assert_int_equal(setattr_path(st, "m/k9", &sa), 0);
	m_unlink(st, m, "m/k11");
	m_create(st, m, "m/k11", 0644, 7004, 0, false);
	sa = (struct kv_setattr){.ksa_valid = KV_SET_MODE | KV_SET_UID | KV_SET_GID,
				 .ksa_mode = 0711,
				 .ksa_uid = 99,
				 .ksa_gid = 98};
	assert_int_equal(setattr_path(st, "n", &sa), 0);
}

/* fsyncs every live file of the model, then the root (the journal). */
static void fsync_all(struct kv_store *st, const struct model *m)
{
	for (unsigned i = 0; i < m->m_n; i++)
		if (m->m_f[i].mf_alive)
			assert_int_equal(fsync_path(st, m->m_f[i].mf_path), 0);
	assert_int_equal(fsync_path(st, ""), 0);
}

/*
 * Checkpoint + journal replay gives the tree the live store has: a store
 * starts from a checkpoint, changes things, fsyncs them, and its directory
 * is copied while it runs; a store recovered from the copy (checkpoint,
 * then the journal) lists the same tree.
 */
static void test_replay_equals_live(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data"), cfd = ddir(f, "copy");
	struct kv_store *st = store_open(f, dfd), *st2;
	struct model m = {0};
	struct listing live, rec;

	build_namespace(st, &m);
	kv_store_destroy(st);
	st = store_open(f, dfd);
	more_ops(st, &m);
	fsync_all(st, &m);
	live = list_tree(st);
	model_is_listing(&m, &live);
	copy_tree(dfd, cfd);

	st2 = store_open(f, cfd);
	rec = list_tree(st2);
	listing_eq(&live, &rec, false);
	model_check(st2, &m);
	assert_int_equal(usage(st2).ku_keys, usage(st).ku_keys);
	assert_int_equal(usage(st2).ku_dirs, usage(st).ku_dirs);
	assert_int_equal(usage(st2).ku_bytes, usage(st).ku_bytes);
	listing_free(&rec);
	kv_store_destroy(st2);
	kv_store_destroy(st);

	/* The live one, shut down cleanly, agrees too. */
	st = store_open(f, dfd);
	rec = list_tree(st);
	listing_eq(&live, &rec, false);
	listing_free(&rec);
	kv_store_destroy(st);
	listing_free(&live);
	model_free(&m);
	close(dfd);
	close(cfd);
}

/* 0 when path is a node of mode (type and permissions) and, for a symlink, to target. */
static int check_node(struct kv_store *st, const char *path, mode_t mode, const char *target)
{
	struct kv_inode *ino;
	struct kv_attr a;
	const char *t;
	int err = resolve(st, path, &ino);

	if (err)
		return err;
	kv_store_getattr(st, ino, &a);
	if (a.ka_mode != mode)
		err = -EBADMSG;
	else if (S_ISLNK(mode) && (kv_store_readlink(st, ino, &t) || strcmp(t, target) ||
				   a.ka_size != strlen(target)))
		err = -EBADMSG;
	else if (!S_ISLNK(mode) && (kv_store_readlink(st, ino, &t) != -EINVAL || a.ka_size))
		err = -EBADMSG;
	kv_store_forget(st, ino, 1);
	return err;
}

/* What test_nodes_recovered built, checked in a recovered store. */
static void check_nodes(struct kv_store *st, const char *long_target)
{
	assert_int_equal(check_node(st, "d/l", S_IFLNK | 0777, "../k"), 0);
	assert_int_equal(check_node(st, "d/long", S_IFLNK | 0777, long_target), 0);
	assert_int_equal(check_node(st, "d/p2", S_IFIFO | 0640, NULL), 0);
	assert_int_equal(check_node(st, "s", S_IFSOCK | 0600, NULL), 0);
	/* A key's name that became a symlink, and a symlink's name that became a key. */
	assert_int_equal(check_node(st, "was_key", S_IFLNK | 0777, "now a link"), 0);
	assert_int_equal(check_file(st, "was_link", "value", 5), 0);
	assert_int_equal(check_file(st, "k", "kk", 2), 0);
	assert_int_equal(check_node(st, "d/gone", 0, NULL), -ENOENT);
	assert_int_equal(check_node(st, "d/p", 0, NULL), -ENOENT);
	assert_int_equal(usage(st).ku_keys, 2);
	assert_int_equal(usage(st).ku_symlinks, 3);
	assert_int_equal(usage(st).ku_specials, 2);
}

/*
 * Symlinks, FIFOs and sockets come back from the journal (a crash image
 * taken after an fsync of their directory), from the checkpoint a clean
 * stop writes, and from that image's own checkpoint: types, modes, owners,
 * a PATH_MAX - 1 byte target; renames, unlinks and names that changed kind.
 */
static void test_nodes_recovered(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data"), cfd = ddir(f, "crash");
	struct kv_store *st = store_open(f, dfd), *st2;
	struct kv_setattr sa = {.ksa_valid = KV_SET_UID | KV_SET_GID | KV_SET_MTIME,
				.ksa_uid = 4321,
				.ksa_gid = 8765,
				.ksa_mtime = {.tv_sec = 1234567890, .tv_nsec = 987654321}};
	char long_target[KV_SYMLINK_MAX + 1];
	struct listing live, rec;

	memset(long_target, 'x', KV_SYMLINK_MAX);
	long_target[KV_SYMLINK_MAX] = '\0';
	for (unsigned i = 255; i < KV_SYMLINK_MAX; i += 256)
		long_target[i] = '/';
	assert_int_equal(mkdir_path(st, "d", 0755), 0);
	assert_int_equal(create_file(st, "k", 0644, "kk", 2, true), 0);
	assert_int_equal(create_file(st, "was_key", 0644, "old", 3, true), 0);
	assert_int_equal(make_path(st, "d/l", 0, "../k"), 0);
	assert_int_equal(make_path(st, "d/long", 0, long_target), 0);
	assert_int_equal(make_path(st, "d/gone", 0, "x"), 0);
	assert_int_equal(make_path(st, "was_link", 0, "y"), 0);
	assert_int_equal(make_path(st, "d/p", S_IFIFO | 0640, NULL), 0);
	assert_int_equal(make_path(st, "s", S_IFSOCK | 0600, NULL), 0);
	assert_int_equal(setattr_path(st, "d/l", &sa), 0);
	assert_int_equal(rename_path(st, "d/p", "d/p2", 0), 0);
	assert_int_equal(unlink_path(st, "d/gone", false), 0);
	assert_int_equal(unlink_path(st, "was_key", false), 0);
	assert_int_equal(make_path(st, "was_key", 0, "now a link"), 0);
	assert_int_equal(unlink_path(st, "was_link", false), 0);
	assert_int_equal(create_file(st, "was_link", 0644, "value", 5, true), 0);
	assert_int_equal(fsync_path(st, "d"), 0);
	check_nodes(st, long_target);
	live = list_tree(st);
	copy_tree(dfd, cfd);
	kv_store_destroy(st);

	/* The crash image: the journal since the checkpoint of the start. */
	st2 = store_open(f, cfd);
	check_nodes(st2, long_target);
	rec = list_tree(st2);
	listing_eq(&live, &rec, false);
	listing_free(&rec);
	kv_store_destroy(st2);
	/* Its own checkpoint, and the clean stop's. */
	for (int i = 0; i < 2; i++) {
		st2 = store_open(f, i ? dfd : cfd);
		check_nodes(st2, long_target);
		rec = list_tree(st2);
		listing_eq(&live, &rec, false);
		listing_free(&rec);
		kv_store_destroy(st2);
	}
	listing_free(&live);
	close(dfd);
	close(cfd);
}

enum { NSYNC = 10, NUNSYNC = 8 };

/*
 * A crash image taken while the store runs: keys fsynced before it are
 * there, exact; keys not fsynced are absent or exact (never other bytes);
 * an unlink and a rename followed by an fsync of the directory are in it.
 * Then the image's newest journal is torn at many offsets: every key whose
 * fsync had returned before the tear point is still there, exact.
 */
static void test_crash_image(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data"), cfd = ddir(f, "crash");
	struct kv_store *st = store_open(f, dfd), *st2;
	char *sv[NSYNC], *uv[NUNSYNC], *v0new, jname[64], path[MAXPATH];
	uint64_t slen[NSYNC], ssize[NSYNC], del_from, meta_size, jsize;
	struct timespec pause = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};

	assert_int_equal(mkdir_path(st, "s", 0755), 0);
	assert_int_equal(mkdir_path(st, "u", 0755), 0);
	for (unsigned i = 0; i < NSYNC; i++) {
		slen[i] = 1 + i * 30011;
		sv[i] = value_of(10 + i, slen[i]);
		snprintf(path, sizeof(path), "s/%u", i);
		assert_int_equal(create_file(st, path, 0644, sv[i], slen[i], true), 0);
		/* Everything up to here is durable: the journal is at least this long. */
		newest_journal(dfd, jname, sizeof(jname));
		ssize[i] = fsize(dfd, jname);
	}
	/* A delete and a rename, made durable by fsync of their directory. */
	del_from = ssize[NSYNC - 1];
	assert_int_equal(unlink_path(st, "s/2", false), 0);
	assert_int_equal(rename_path(st, "s/3", "s/3r", 0), 0);
	assert_int_equal(fsync_path(st, "s"), 0);
	meta_size = fsize(dfd, jname);
	/* Then things nobody waits for: half of them with time to reach the disk. */
	for (unsigned i = 0; i < NUNSYNC; i++) {
		uv[i] = value_of(100 + i, 1000 + i * 20000);
		snprintf(path, sizeof(path), "u/%u", i);
		assert_int_equal(create_file(st, path, 0644, uv[i], 1000 + i * 20000, false), 0);
		if (i == NUNSYNC / 2 - 1)
			nanosleep(&pause, NULL);
	}
	v0new = value_of(99, 4444);
	assert_int_equal(overwrite_file(st, "s/0", v0new, 4444), 0);
	assert_int_equal(unlink_path(st, "s/1", false), 0);

	copy_tree(dfd, cfd);
	kv_store_destroy(st);

	jsize = fsize(cfd, jname);
	assert_true(jsize >= meta_size);
	{
		/* Tear points: none, a byte off, mid-record, right after a durable key, ... */
		uint64_t tears[] = {UINT64_MAX,
				    jsize - 1,
				    jsize - 13,
				    meta_size,
				    meta_size - 1,
				    del_from + 5,
				    del_from,
				    ssize[7],
				    ssize[7] + 7,
				    ssize[5] - 1,
				    ssize[4] + 3,
				    ssize[1],
				    ssize[0],
				    ssize[0] - 1,
				    ssize[0] / 2,
				    1,
				    0};

		for (unsigned t = 0; t < sizeof(tears) / sizeof(tears[0]); t++) {
			uint64_t at = tears[t] > jsize ? jsize : tears[t];
			unsigned upresent = 0;
			char name[32];
			int tfd;

			snprintf(name, sizeof(name), "torn%u", t);
			tfd = ddir(f, name);
			copy_tree(cfd, tfd);
			if (tears[t] != UINT64_MAX)
				assert_int_equal(truncate_at(tfd, jname, at), 0);
			st2 = store_open(f, tfd);
			if (tears[t] == UINT64_MAX) /* the active bucket was open */
				assert_true(usage(st2).ku_torn_buckets >= 1);
			for (unsigned i = 0; i < NSYNC; i++) {
				/* Whether the key may be missing: never durable, or deleted. */
				bool may_miss = ssize[i] > at || (i == 1 && at >= del_from) ||
						(i == 2 && at >= del_from);
				int err;

				snprintf(path, sizeof(path), "s/%u", i);
				err = check_file(st2, path, sv[i], slen[i]);
				if (i == 0 && err == -EBADMSG)
					err = check_file(st2, path, v0new, 4444);
				if (i == 2 && at >= meta_size && err != -ENOENT)
					fail_msg(
					    "s/2 was unlinked and fsynced, yet it is there (%s)",
					    strerror(-err));
				if (i == 3) {
					/* Under one name or the other, never both. */
					int e2 = check_file(st2, "s/3r", sv[i], slen[i]);

					if (at >= meta_size && err != -ENOENT)
						fail_msg(
						    "s/3 was renamed and fsynced, yet it is there");
					if (!err && !e2)
						fail_msg("s/3 is there under both names");
					if (err == -ENOENT)
						err = e2;
				}
				if (err == -ENOENT && may_miss)
					continue;
				if (err)
					fail_msg("journal torn at %" PRIu64 " of %" PRIu64
						 ": s/%u (fsync returned at journal byte %" PRIu64
						 "): %s",
						 at, jsize, i, ssize[i], strerror(-err));
			}
			for (unsigned i = 0; i < NUNSYNC; i++) {
				int err;

				snprintf(path, sizeof(path), "u/%u", i);
				err = check_file(st2, path, uv[i], 1000 + i * 20000);
				if (err && err != -ENOENT)
					fail_msg("%s: %s", path, strerror(-err));
				upresent += err == 0;
			}
			print_message("journal torn at %" PRIu64 " of %" PRIu64
				      ": %u of %u unsynced keys came back\n",
				      at, jsize, upresent, NUNSYNC);
			kv_store_destroy(st2);
			close(tfd);
		}
	}
	for (unsigned i = 0; i < NSYNC; i++)
		free(sv[i]);
	for (unsigned i = 0; i < NUNSYNC; i++)
		free(uv[i]);
	free(v0new);
	close(dfd);
	close(cfd);
}

/* Whether journal.<gen> is in dirfd. */
static bool has_journal(int dirfd, uint64_t gen)
{
	char name[64];

	snprintf(name, sizeof(name), "journal.%" PRIu64, gen);
	return faccessat(dirfd, name, F_OK, 0) == 0;
}

/*
 * The keys of test_ckpt_after_replay: k0..k6 as written, k7 deleted; once
 * `changed`, k1 deleted, k2 renamed to k2r, k3 rewritten and k8 made.
 */
static void after_replay_check(struct kv_store *st, char *const *v, const char *v3, bool changed)
{
	char path[MAXPATH];

	for (unsigned i = 0; i < 9; i++) {
		bool gone = i == 7 || (changed ? i == 1 || i == 2 : i == 8);
		int err;

		snprintf(path, sizeof(path), "d/k%u", i);
		err = i == 3 && changed ? check_file(st, path, v3, 777)
					: check_file(st, path, v[i], 5000 + i);
		if (gone)
			assert_int_equal(err, -ENOENT);
		else if (err)
			fail_msg("%s: %s", path, strerror(-err));
	}
	assert_int_equal(check_file(st, "d/k2r", v[2], 5002), changed ? 0 : -ENOENT);
}

/*
 * A start that replays one journal file writes no checkpoint: the journal
 * goes on from the replayed tail, and deletes, renames and puts made then
 * survive a crash (replayed with the rest) and a clean stop (its
 * checkpoint holds them).
 */
static void test_ckpt_after_replay(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data"), c1 = ddir(f, "crash1"), c2 = ddir(f, "crash2"),
	    c3 = ddir(f, "crash3");
	struct kv_store *st = store_open(f, dfd);
	char *v[9], *v3 = value_of(77, 777), path[MAXPATH], jname[64];
	uint64_t gen0;

	assert_int_equal(mkdir_path(st, "d", 0755), 0);
	for (unsigned i = 0; i < 9; i++) {
		v[i] = value_of(300 + i, 5000 + i);
		snprintf(path, sizeof(path), "d/k%u", i);
		if (i < 8)
			assert_int_equal(create_file(st, path, 0644, v[i], 5000 + i, true), 0);
	}
	assert_int_equal(unlink_path(st, "d/k7", false), 0);
	assert_int_equal(fsync_path(st, "d"), 0);
	copy_tree(dfd, c1);
	kv_store_destroy(st);
	gen0 = newest_journal(c1, jname, sizeof(jname));

	/* Recovering the crash image replays its one journal file, and keeps it. */
	st = store_open(f, c1);
	assert_false(st->ks_ckpt_started);
	after_replay_check(st, v, v3, false);
	assert_int_equal(unlink_path(st, "d/k1", false), 0);
	assert_int_equal(rename_path(st, "d/k2", "d/k2r", 0), 0);
	assert_int_equal(overwrite_file(st, "d/k3", v3, 777), 0);
	assert_int_equal(fsync_path(st, "d/k3"), 0);
	assert_int_equal(create_file(st, "d/k8", 0644, v[8], 5008, true), 0);
	assert_int_equal(fsync_path(st, "d"), 0);
	assert_int_equal(newest_journal(c1, jname, sizeof(jname)), gen0);
	copy_tree(c1, c2); /* a crash now: the same journal file, longer */
	kv_store_destroy(st);
	assert_true(newest_journal(c1, jname, sizeof(jname)) > gen0);
	assert_false(has_journal(c1, gen0));
	copy_tree(c1, c3); /* after the clean stop's checkpoint */

	for (int img = 0; img < 2; img++) {
		st = store_open(f, img ? c3 : c2);
		after_replay_check(st, v, v3, true);
		kv_store_destroy(st);
	}
	for (unsigned i = 0; i < 9; i++)
		free(v[i]);
	free(v3);
	close(dfd);
	close(c1);
	close(c2);
	close(c3);
}

/*
 * A crash between a journal rotation and its checkpoint leaves two journal
 * files after the checkpoint. A start that replays them leaves the new
 * checkpoint to a thread (kv_persist_start) and serves at once; keys read
 * while it is held off, and once written it drops the replayed files. The
 * store comes back the same from a crash before that checkpoint and after.
 */
static void test_ckpt_after_rotation(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data"), c1 = ddir(f, "crash1"), c2 = ddir(f, "crash2"),
	    c3 = ddir(f, "crash3");
	struct kv_store *st = store_open(f, dfd);
	char *v[6], path[MAXPATH], jname[64];
	uint64_t gen0, gen1;

	assert_int_equal(mkdir_path(st, "d", 0755), 0);
	for (unsigned i = 0; i < 6; i++) {
		v[i] = value_of(400 + i, 3000 + i);
		snprintf(path, sizeof(path), "d/k%u", i);
		assert_int_equal(create_file(st, path, 0644, v[i], 3000 + i, true), 0);
	}
	assert_int_equal(unlink_path(st, "d/k4", false), 0);
	assert_int_equal(fsync_path(st, "d"), 0);
	gen0 = newest_journal(dfd, jname, sizeof(jname));
	assert_int_equal(kv_journal_rotate(st->ks_journal, &gen1), 0); /* no checkpoint follows */
	assert_int_equal(gen1, gen0 + 1);
	assert_int_equal(unlink_path(st, "d/k5", false), 0);
	assert_int_equal(fsync_path(st, "d"), 0);
	copy_tree(dfd, c1);
	kv_store_destroy(st);

	st = store_open(f, c1);
	pthread_mutex_lock(&st->ks_ckpt_lock); /* held off (or already written) */
	for (unsigned i = 0; i < 6; i++) {
		snprintf(path, sizeof(path), "d/k%u", i);
		assert_int_equal(check_file(st, path, v[i], 3000 + i), i < 4 ? 0 : -ENOENT);
	}
	copy_tree(c1, c2); /* a crash before that checkpoint */
	pthread_mutex_unlock(&st->ks_ckpt_lock);
	kv_persist_stop(st);
	assert_true(newest_journal(c1, jname, sizeof(jname)) > gen1);
	assert_false(has_journal(c1, gen0));
	assert_false(has_journal(c1, gen1));
	copy_tree(c1, c3); /* a crash after it */
	kv_store_destroy(st);

	for (int img = 0; img < 2; img++) {
		st = store_open(f, img ? c3 : c2);
		for (unsigned i = 0; i < 6; i++) {
			snprintf(path, sizeof(path), "d/k%u", i);
			assert_int_equal(check_file(st, path, v[i], 3000 + i), i < 4 ? 0 : -ENOENT);
		}
		kv_store_destroy(st);
	}
	for (unsigned i = 0; i < 6; i++)
		free(v[i]);
	close(dfd);
	close(c1);
	close(c2);
	close(c3);
}

/*
 * A start after a crash counts each bucket's live bytes as the checkpoint
 * loads and the journal replays (a key rewritten or deleted gives its
 * record's bytes back) instead of visiting every key after: the keys,
 * the dead bytes and the buckets kept (none that holds nothing live) come
 * out as a clean start of the same namespace counts them from its
 * checkpoint.
 */
static void test_replay_live_bytes(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data"), c1 = ddir(f, "crash1");
	struct kv_store_usage u1, u2;
	struct kv_store *st;
	char *v[12], *w = value_of(99, 9000), path[MAXPATH];

	f->f_cfg.kc_gc = false; /* no compaction between the two counts */
	st = store_open(f, dfd);
	assert_int_equal(mkdir_path(st, "d", 0755), 0);
	assert_int_equal(mkdir_path(st, "e", 0755), 0);
	for (unsigned i = 0; i < 12; i++) {
		v[i] = value_of(500 + i, 7000 + 100 * i);
		snprintf(path, sizeof(path), i < 8 ? "d/k%u" : "e/k%u", i);
		assert_int_equal(create_file(st, path, 0644, v[i], 7000 + 100 * i, true), 0);
	}
	kv_store_destroy(st); /* its checkpoint holds them all */

	st = store_open(f, dfd);
	assert_int_equal(overwrite_file(st, "d/k0", w, 9000), 0);
	assert_int_equal(fsync_path(st, "d/k0"), 0);
	assert_int_equal(unlink_path(st, "d/k1", false), 0);
	assert_int_equal(unlink_path(st, "d/k2", false), 0);
	assert_int_equal(rename_path(st, "d/k3", "d/k3r", 0), 0);
	for (unsigned i = 8; i < 12; i++) {
		snprintf(path, sizeof(path), "e/k%u", i);
		assert_int_equal(unlink_path(st, path, false), 0);
	}
	assert_int_equal(unlink_path(st, "e", true), 0);
	assert_int_equal(fsync_path(st, "d"), 0);
	copy_tree(dfd, c1);
	kv_store_destroy(st);

	st = store_open(f, c1); /* replays the journal */
	u1 = usage(st);
	assert_int_equal(check_file(st, "d/k0", w, 9000), 0);
	assert_int_equal(check_file(st, "d/k3r", v[3], 7300), 0);
	assert_int_equal(check_file(st, "d/k4", v[4], 7400), 0);
	assert_int_equal(check_file(st, "d/k1", v[1], 7100), -ENOENT);
	assert_int_equal(check_file(st, "e/k8", v[8], 7800), -ENOENT);
	kv_store_destroy(st);
	st = store_open(f, c1); /* loads the clean stop's checkpoint */
	u2 = usage(st);
	kv_store_destroy(st);
	assert_int_equal(u1.ku_keys, 6); /* k0, k3r, k4 .. k7 */
	assert_int_equal(u2.ku_keys, 6);
	assert_true(u1.ku_ssd_dead > 0);
	assert_int_equal(u1.ku_ssd_dead, u2.ku_ssd_dead);
	assert_int_equal(u1.ku_ssd_used, u2.ku_ssd_used);
	assert_int_equal(u1.ku_buckets, u2.ku_buckets);
	for (unsigned i = 0; i < 12; i++)
		free(v[i]);
	free(w);
	close(dfd);
	close(c1);
}

/*
 * More than the pool holds: 100 MiB through a 32 MiB pool in 1 MiB keys.
 * Writers are held back until values are offloaded and evicted, never
 * refused; every key reads back exact (the evicted ones from the SSD),
 * now and after a restart.
 */
/*
 * A file four times the pool: written in pieces it spills its complete
 * extents to the SSD (tier.spilled), reads back exact while open and once
 * sealed, and again after a restart; fsync'ed, it is the only thing there.
 */
static void test_spill(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	uint64_t len = 4 * f->f_cfg.kc_mem_size + 12345;
	char *v = value_of(77, len);
	struct kv_store *st;

	struct kv_inode *ino;
	struct kv_attr a;

	assert_non_null(v);
	st = store_open(f, dfd);
	assert_int_equal(kv_store_create_open(st, kv_store_root(st), "big", 0644, &cred, &ino, &a),
			 0);
	/* In 1 MiB pieces, as FUSE writes; the last piece first, then the rest in order. */
	assert_int_equal(kv_store_write(st, ino, len - 1000, v + len - 1000, 1000), 0);
	for (uint64_t off = 0; off < len - 1000; off += MIB)
		assert_int_equal(kv_store_write(st, ino, off, v + off,
						len - 1000 - off < MIB ? len - 1000 - off : MIB),
				 0);
	assert_int_equal(check_file(st, "big", v, len), 0); /* open, partly spilled */
	assert_int_equal(kv_store_fsync(st, ino), 0);
	kv_store_release(st, ino, O_WRONLY);
	kv_store_forget(st, ino, 1);
	assert_true(usage(st).ku_spilled >= 3 * f->f_cfg.kc_mem_size);
	assert_true(kv_pool_used(kv_store_pool(st)) <= f->f_cfg.kc_mem_size);
	assert_int_equal(check_file(st, "big", v, len), 0);
	assert_int_equal(usage(st).ku_offload_errors, 0);
	assert_int_equal(kv_store_destroy(st), 0);
	st = store_open(f, dfd);
	assert_int_equal(usage(st).ku_lost_keys, 0);
	assert_int_equal(check_file(st, "big", v, len), 0);
	assert_int_equal(usage(st).ku_csum_errors, 0);
	assert_int_equal(kv_store_destroy(st), 0);
	free(v);
	close(dfd);
}

static void test_eviction(void **state)
{
	enum { N = 100 };
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	struct kv_store *st = store_open(f, dfd);
	struct kv_store_usage u;
	char path[MAXPATH];

	assert_int_equal(mkdir_path(st, "ev", 0755), 0);
	for (unsigned i = 0; i < N; i++) {
		char *v = value_of(i, MIB);

		assert_non_null(v);
		snprintf(path, sizeof(path), "ev/%u", i);
		assert_int_equal(create_file(st, path, 0644, v, MIB, false), 0);
		free(v);
	}
	assert_true(kv_pool_used(kv_store_pool(st)) <= f->f_cfg.kc_mem_size);
	for (unsigned i = 0; i < N; i++) {
		char *v = value_of(i, MIB);
		int err;

		snprintf(path, sizeof(path), "ev/%u", i);
		err = check_file(st, path, v, MIB);
		if (err)
			fail_msg("%s: %s", path, strerror(-err));
		free(v);
	}
	u = usage(st);
	assert_true(u.ku_evictions > 0);
	assert_true(u.ku_ssd_hits > 0);
	assert_int_equal(u.ku_keys, N);
	assert_int_equal(u.ku_bytes, (uint64_t)N * MIB);
	assert_int_equal(u.ku_csum_errors, 0);
	assert_int_equal(u.ku_offload_errors, 0);
	assert_int_equal(fsync_path(st, ""), 0); /* the last ones may still be on their way */
	assert_true(usage(st).ku_ssd_written >= (uint64_t)N * MIB);
	kv_store_destroy(st);

	st = store_open(f, dfd);
	for (unsigned i = 0; i < N; i += 9) {
		char *v = value_of(i, MIB);

		snprintf(path, sizeof(path), "ev/%u", i);
		assert_int_equal(check_file(st, path, v, MIB), 0);
		free(v);
	}
	assert_int_equal(usage(st).ku_keys, N);
	kv_store_destroy(st);
	close(dfd);
}

/* ---- threads ---- */

enum { NTHREADS = 4, NITER = 64 };

struct tkey {
	uint64_t tk_seed, tk_len;
	bool tk_alive;
};

struct tctx {
	struct kv_store *t_st;
	unsigned t_id;
	unsigned t_fail;
	char t_why[160];
	struct tkey t_keys[NITER];
};

static void tfail(struct tctx *t, const char *what, int err)
{
	if (!t->t_fail++)
		snprintf(t->t_why, sizeof(t->t_why), "thread %u: %s: %s", t->t_id, what,
			 strerror(-err));
}

static uint64_t tlen(unsigned id, unsigned i)
{
	static const uint64_t sizes[] = {0, 1, 4096, 10000, 65537, 200000, 700000, 33333};

	return sizes[(i * 7 + id * 3) % (sizeof(sizes) / sizeof(sizes[0]))];
}

static int tcheck(struct kv_store *st, struct tctx *t, unsigned i)
{
	char path[MAXPATH], *v = value_of(t->t_keys[i].tk_seed, t->t_keys[i].tk_len);
	int err;

	snprintf(path, sizeof(path), "t%u/k%u", t->t_id, i);
	err = v ? check_file(st, path, v, t->t_keys[i].tk_len) : -ENOMEM;
	free(v);
	return err;
}

/* Writes, reads back, unlinks and fsyncs keys of its own directory. */
static void *thread_main(void *arg)
{
	struct tctx *t = arg;
	char path[MAXPATH];

	for (unsigned i = 0; i < NITER; i++) {
		struct tkey *k = &t->t_keys[i];
		char *v;
		int err;

		k->tk_seed = 1000000 + t->t_id * 1000 + i;
		k->tk_len = tlen(t->t_id, i);
		v = value_of(k->tk_seed, k->tk_len);
		snprintf(path, sizeof(path), "t%u/k%u", t->t_id, i);
		err = v ? create_file(t->t_st, path, 0644, v, k->tk_len, i % 10 == 3) : -ENOMEM;
		free(v);
		if (err) {
			tfail(t, "create", err);
			continue;
		}
		k->tk_alive = true;
		if (i >= 1 && t->t_keys[i - 1].tk_alive && (err = tcheck(t->t_st, t, i - 1)))
			tfail(t, "read back", err);
		if (i >= 5 && t->t_keys[i - 5].tk_alive && (err = tcheck(t->t_st, t, i - 5)))
			tfail(t, "read back an older key", err);
		if (i >= 2 && i % 3 == 0) {
			snprintf(path, sizeof(path), "t%u/k%u", t->t_id, i - 2);
			err = unlink_path(t->t_st, path, false);
			if (err)
				tfail(t, "unlink", err);
			else
				t->t_keys[i - 2].tk_alive = false;
		}
	}
	return NULL;
}

static void threads_verify(struct kv_store *st, struct tctx *t)
{
	uint64_t alive = 0;

	for (unsigned k = 0; k < NTHREADS; k++)
		for (unsigned i = 0; i < NITER; i++) {
			int err = tcheck(st, &t[k], i);

			alive += t[k].t_keys[i].tk_alive;
			if (t[k].t_keys[i].tk_alive ? err != 0 : err != -ENOENT)
				fail_msg("t%u/k%u (%s): %s", k, i,
					 t[k].t_keys[i].tk_alive ? "alive" : "unlinked",
					 err ? strerror(-err) : "present");
		}
	assert_int_equal(usage(st).ku_keys, alive);
}

/*
 * Four threads write, read back, fsync and unlink keys of their own
 * through a 16 MiB pool while the offloader writes and evicts; then every
 * key is checked, and again after a restart.
 */
static void test_threads(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	struct kv_store *st;
	struct tctx *t = calloc(NTHREADS, sizeof(*t));
	pthread_t th[NTHREADS];
	struct kv_store_usage u;
	char path[MAXPATH];

	assert_non_null(t);
	f->f_cfg.kc_mem_size = 16 * MIB;
	st = store_open(f, dfd);
	for (unsigned k = 0; k < NTHREADS; k++) {
		snprintf(path, sizeof(path), "t%u", k);
		assert_int_equal(mkdir_path(st, path, 0755), 0);
		t[k].t_st = st;
		t[k].t_id = k;
	}
	for (unsigned k = 0; k < NTHREADS; k++)
		assert_int_equal(pthread_create(&th[k], NULL, thread_main, &t[k]), 0);
	for (unsigned k = 0; k < NTHREADS; k++)
		assert_int_equal(pthread_join(th[k], NULL), 0);
	for (unsigned k = 0; k < NTHREADS; k++)
		if (t[k].t_fail)
			fail_msg("%u failures; first: %s", t[k].t_fail, t[k].t_why);
	threads_verify(st, t);
	u = usage(st);
	print_message("threads: %" PRIu64 " evictions, %" PRIu64 " SSD reads, %" PRIu64
		      " bytes offloaded\n",
		      u.ku_evictions, u.ku_ssd_hits, u.ku_ssd_written);
	assert_true(u.ku_evictions > 0);
	assert_int_equal(u.ku_offload_errors, 0);
	assert_int_equal(u.ku_csum_errors, 0);
	kv_store_destroy(st);

	st = store_open(f, dfd);
	threads_verify(st, t);
	assert_int_equal(usage(st).ku_torn_buckets, 0);
	kv_store_destroy(st);
	free(t);
	close(dfd);
}

/*
 * Values larger than the pool under concurrency (run under TSan): two
 * readers check random ranges of a value 2.5x the pool that is partly in
 * DRAM (reads promote the extents they touch, pressure evicts extents),
 * while a writer makes new versions of another such value by small writes
 * (copy-on-write of a version partly in DRAM: borrowed records, shared
 * records) and a third thread churns small files for pressure. Every byte
 * read is checked, and both values after the run and after a restart.
 */
#define BIG_LEN	  (40u * MIB)
#define BIG_ITERS 60

struct bctx {
	struct kv_store *b_st;
	unsigned b_id;
	char *b_want; /* the value the thread checks or changes (its model) */
	unsigned b_fail;
	char b_why[160];
};

/* Writes buf[0, len) into ino in 1 MiB pieces, as FUSE would. */
static int write_mib(struct kv_store *st, struct kv_inode *ino, uint64_t off, const char *buf,
		     uint64_t len)
{
	int err = 0;

	for (uint64_t at = 0; !err && at < len; at += MIB)
		err = kv_store_write(st, ino, off + at, buf + at, len - at < MIB ? len - at : MIB);
	return err;
}

/* Reads [off, off + len) of ino into buf. Returns 0, -errno or -EBADMSG (short). */
static int read_range(struct kv_store *st, struct kv_inode *ino, uint64_t off, uint64_t len,
		      char *buf)
{
	uint64_t done = 0;

	while (done < len) {
		struct iovec iov[MAXIOV];
		struct kv_read_guard g;
		uint64_t bytes = 0, got = 0;
		int n = kv_store_read(st, ino, off + done, len - done, iov, MAXIOV, &bytes, &g);

		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			memcpy(buf + done + got, iov[i].iov_base, iov[i].iov_len);
			got += iov[i].iov_len;
		}
		kv_read_done(&g);
		if (!bytes || got != bytes)
			return -EBADMSG;
		done += bytes;
	}
	return 0;
}

static void *big_main(void *arg)
{
	struct bctx *b = arg;
	struct kv_store *st = b->b_st;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (b->b_id + 1);
	char *buf = malloc(MIB + 4 * KIB), name[32];
	struct kv_inode *ino = NULL;
	int err = 0;

	if (b->b_id < 3)
		err = resolve(st, b->b_id < 2 ? "big/ro" : "big/rw", &ino);
	for (unsigned i = 0; buf && !err && i < BIG_ITERS; i++) {
		uint64_t off, len;

		rng = mix(rng + i);
		off = rng % (BIG_LEN - 4 * KIB);
		len = 1 + (rng >> 40) % (MIB - 1);
		if (len > BIG_LEN - off)
			len = BIG_LEN - off;
		if (b->b_id < 2) { /* a reader of the value nobody changes */
			err = read_range(st, ino, off, len, buf);
			if (!err && memcmp(buf, b->b_want + off, len))
				err = -EBADMSG;
		} else if (b->b_id == 2) { /* a writer: 4 KiB, one new version each */
			len = 4 * KIB;
			memset(buf, 'a' + i % 26, len);
			err = kv_store_open(st, ino, O_WRONLY);
			if (!err) {
				err = kv_store_write(st, ino, off, buf, len);
				if (!err)
					memcpy(b->b_want + off, buf, len);
				if (!err && i % 8 == 0)
					err = kv_store_fsync(st, ino);
				kv_store_release(st, ino, O_WRONLY);
			}
		} else { /* pressure: small files come and go */
			char *v = value_of(rng, 3 * MIB);

			snprintf(name, sizeof(name), "big/p%u", i % 4);
			err = v ? create_file(st, name, 0644, v, 3 * MIB, false) : -ENOMEM;
			if (err == -EEXIST)
				err = unlink_path(st, name, false);
			free(v);
		}
		if (err)
			snprintf(b->b_why, sizeof(b->b_why),
				 "thread %u, iteration %u: off %" PRIu64 " len %" PRIu64 ": %d",
				 b->b_id, i, off, len, err);
	}
	b->b_fail = err != 0;
	if (ino)
		kv_store_forget(st, ino, 1);
	free(buf);
	return NULL;
}

/* Creates path holding v (BIG_LEN bytes) in 1 MiB writes, fsyncs and closes it. */
static void big_file(struct kv_store *st, const char *path, const char *v)
{
	struct kv_inode *dir, *ino;
	struct kv_attr a;
	const char *name;

	assert_int_equal(parent(st, path, &dir, &name), 0);
	assert_int_equal(kv_store_create_open(st, dir, name, 0644, &cred, &ino, &a), 0);
	kv_store_forget(st, dir, 1);
	assert_int_equal(write_mib(st, ino, 0, v, BIG_LEN), 0);
	assert_int_equal(kv_store_fsync(st, ino), 0);
	kv_store_release(st, ino, O_WRONLY);
	kv_store_forget(st, ino, 1);
}

static void test_large_threads(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "data");
	char *ro = value_of(500, BIG_LEN), *rw = value_of(501, BIG_LEN);
	struct bctx b[4] = {{0}};
	pthread_t th[4];
	struct kv_store_usage u;
	struct kv_store *st;

	assert_non_null(ro);
	assert_non_null(rw);
	f->f_cfg.kc_mem_size = 16 * MIB;
	f->f_cfg.kc_promote = true;
	st = store_open(f, dfd);
	assert_int_equal(mkdir_path(st, "big", 0755), 0);
	big_file(st, "big/ro", ro);
	big_file(st, "big/rw", rw);
	for (unsigned k = 0; k < 4; k++) {
		b[k] = (struct bctx){.b_st = st, .b_id = k, .b_want = k == 2 ? rw : ro};
		assert_int_equal(pthread_create(&th[k], NULL, big_main, &b[k]), 0);
	}
	for (unsigned k = 0; k < 4; k++)
		assert_int_equal(pthread_join(th[k], NULL), 0);
	for (unsigned k = 0; k < 4; k++)
		if (b[k].b_fail)
			fail_msg("%s", b[k].b_why);
	assert_int_equal(check_file(st, "big/ro", ro, BIG_LEN), 0);
	assert_int_equal(check_file(st, "big/rw", rw, BIG_LEN), 0);
	u = usage(st);
	print_message("large threads: %" PRIu64 " evictions, %" PRIu64 " promotions, %" PRIu64
		      " SSD reads, %" PRIu64 " bytes shared\n",
		      u.ku_evictions, u.ku_promotions, u.ku_ssd_hits, u.ku_shared);
	assert_true(u.ku_promotions > 0);
	assert_true(u.ku_shared > 0);
	assert_int_equal(u.ku_offload_errors, 0);
	assert_int_equal(u.ku_csum_errors, 0);
	assert_int_equal(kv_store_destroy(st), 0);
	st = store_open(f, dfd);
	assert_int_equal(check_file(st, "big/ro", ro, BIG_LEN), 0);
	assert_int_equal(check_file(st, "big/rw", rw, BIG_LEN), 0);
	kv_store_destroy(st);
	free(ro);
	free(rw);
	close(dfd);
}

/*
 * Reservations under concurrency: one thread fallocates (mode 0 and
 * KEEP_SIZE), punches and truncates a file, another writes into it and
 * fsyncs, a third makes pressure, while the offloader and spills fill
 * reservations. Every promise must be accounted exactly: what the store
 * holds reserved survives a clean restart unchanged, and deleting the file
 * gives it all back (a leak or a double give-back shows as a count left
 * over, or a huge one).
 */
#define RESV_ITERS 80

static void *resv_main(void *arg)
{
	struct bctx *b = arg;
	struct kv_store *st = b->b_st;
	uint64_t rng = 0x51ed270b27a3d5a9ull * (b->b_id + 1);
	char *buf = malloc(MIB), name[32];
	struct kv_inode *ino = NULL;
	int err = 0;

	if (b->b_id < 2)
		err = resolve(st, "r/a", &ino);
	for (unsigned i = 0; buf && !err && i < RESV_ITERS; i++) {
		uint64_t off, len;

		rng = mix(rng + i);
		off = rng % (24 * MIB);
		len = 1 + (rng >> 40) % (8 * MIB);
		if (b->b_id == 0) { /* the reserver */
			switch (i % 4) {
			case 0:
				err = kv_store_fallocate(st, ino, 0, off, len);
				break;
			case 1:
				err = kv_store_fallocate(st, ino, FALLOC_FL_KEEP_SIZE, off, len);
				break;
			case 2:
				err = kv_store_fallocate(
				    st, ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
				break;
			default: {
				struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = off};
				struct kv_attr a;

				err = kv_store_setattr(st, ino, &sa, &a);
			}
			}
		} else if (b->b_id == 1) { /* the writer */
			len = len > MIB ? MIB : len;
			memset(buf, 'a' + i % 26, len);
			err = kv_store_open(st, ino, O_WRONLY);
			if (!err) {
				err = kv_store_write(st, ino, off, buf, len);
				if (!err && i % 8 == 0)
					err = kv_store_fsync(st, ino);
				kv_store_release(st, ino, O_WRONLY);
			}
		} else { /* pressure */
			char *v = value_of(rng, 3 * MIB);

			snprintf(name, sizeof(name), "r/p%u", i % 4);
			err = v ? create_file(st, name, 0644, v, 3 * MIB, false) : -ENOMEM;
			if (err == -EEXIST)
				err = unlink_path(st, name, false);
			free(v);
		}
		if (err)
			snprintf(b->b_why, sizeof(b->b_why), "thread %u, iteration %u: %d", b->b_id,
				 i, err);
	}
	b->b_fail = err != 0;
	if (ino)
		kv_store_forget(st, ino, 1);
	free(buf);
	return NULL;
}

/* Bytes the store holds promised: the SSD's, or the pool's without a tier. */
static uint64_t promised(struct kv_store *st, bool ssd)
{
	return ssd ? usage(st).ku_ssd_reserved : kv_pool_reserved(kv_store_pool(st));
}

static void reserve_threads(struct fix *f, bool ssd)
{
	int dfd = ddir(f, ssd ? "ssd" : "dram");
	struct bctx b[3] = {{0}};
	struct kv_inode *ino;
	pthread_t th[3];
	struct kv_store *st;
	uint64_t before;

	f->f_cfg.kc_mem_size = 64 * MIB;
	f->f_cfg.kc_ssd_size = ssd ? 512 * MIB : 0;
	st = store_open(f, dfd);
	assert_int_equal(mkdir_path(st, "r", 0755), 0);
	assert_int_equal(create_file(st, "r/a", 0644, "head", 4, true), 0);
	for (unsigned k = 0; k < 3; k++) {
		b[k] = (struct bctx){.b_st = st, .b_id = k};
		assert_int_equal(pthread_create(&th[k], NULL, resv_main, &b[k]), 0);
	}
	for (unsigned k = 0; k < 3; k++)
		assert_int_equal(pthread_join(th[k], NULL), 0);
	for (unsigned k = 0; k < 3; k++)
		if (b[k].b_fail)
			fail_msg("%s", b[k].b_why);
	/* Something left promised past the end, whatever the threads did last. */
	assert_int_equal(resolve(st, "r/a", &ino), 0);
	assert_int_equal(kv_store_fallocate(st, ino, FALLOC_FL_KEEP_SIZE, 0, 40 * MIB), 0);
	kv_store_forget(st, ino, 1);
	/* What the values being written still owe goes once they are on the SSD. */
	assert_int_equal(kv_store_fsync(st, kv_store_root(st)), 0);
	before = promised(st, ssd);
	assert_true(before >= 4 * MIB);
	print_message("reserve threads (%s): %" PRIu64 " bytes promised at the end\n",
		      ssd ? "ssd" : "dram", before);
	if (ssd) {
		assert_int_equal(kv_store_destroy(st), 0);
		st = store_open(f, dfd);
		assert_int_equal(promised(st, ssd), before);
	}
	assert_int_equal(unlink_path(st, "r/a", false), 0);
	assert_int_equal(promised(st, ssd), 0);
	kv_store_destroy(st);
	close(dfd);
}

static void test_reserve_threads(void **state)
{
	reserve_threads(fix_of(state), true);
	reserve_threads(fix_of(state), false);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fix_setup, fix_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_clean_restart),
	    T(test_restart_then_write),
	    T(test_pre_epoch_times),
	    T(test_root_attrs),
	    T(test_replay_equals_live),
	    T(test_crash_image),
	    T(test_nodes_recovered),
	    T(test_eviction),
	    T(test_spill),
	    T(test_threads),
	    T(test_large_threads),
	    T(test_reserve_threads),
	    T(test_ckpt_after_replay),
	    T(test_ckpt_after_rotation),
	    T(test_replay_live_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
