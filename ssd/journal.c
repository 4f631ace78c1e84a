/* SPDX-License-Identifier: MIT */
/*
 * ssd/journal.c — the metadata journal and checkpoints. The contract is in
 * ssd/journal.h, the record format in ssd/format.h.
 *
 * Group commit. Appenders encode their record straight into kj_buf under
 * kj_lock, taking the next LSN in the same critical section, so the buffer
 * (and hence the file) holds records in LSN order. The commit thread wakes
 * on the first append into an empty buffer, waits up to kj_delay_ns for more
 * (or less, when a kv_journal_sync is waiting for an LSN that is not durable
 * yet), swaps kj_buf with kj_spare and, without the lock, writes the batch at
 * the end of the file and fdatasyncs it. Then it publishes kj_durable and
 * wakes the syncers. Appends made during that I/O land in the other buffer
 * and go out in the next batch, so under load one fdatasync covers many
 * entries. A failed write or fdatasync makes the journal failed for good
 * (kj_err): what the file holds past kj_size is unknown, so nothing more is
 * written to it.
 *
 * Replay. Records follow each other at 8-byte aligned offsets from the start
 * of a file. The first record that is short or fails its checks ends a
 * file. In the newest file that is a torn tail (the last, unsynced batch cut
 * by a crash) unless a good record still follows somewhere after it, at any
 * 8-byte step: the bad record's own length field may be what was damaged.
 * A good record can never hide inside another's paths, since a record head
 * holds zero bytes and a path cannot; inside a PUT's extent map only
 * entries that someone built to hold one, checksum and all, could. In an
 * older file, which rotation synced whole, any bad record is corruption,
 * and so is a missing generation between two present ones.
 *
 * Versions. Records are written as version 2; version 1 records (no
 * extent maps, jb_next 0) are read as they are. A PUT with KV_JPUT_EXTENTS
 * carries its map after the paths, up to KV_JEXT_MAX entries (320 MiB): such
 * a record goes through kj_buf like any other (the buffers grow to hold it
 * and are given back after its batch) and straight to the file when
 * writing a checkpoint.
 */
#include "ssd/journal.h"
#include "ssd/fileio.h"
#include "ssd/format.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define JREC_HEAD sizeof(struct kv_jrec_head)
#define JREC_BODY sizeof(struct kv_jrec_body)
#define JEXT	  sizeof(struct kv_jext)
/* The largest jh_len: two paths and the largest extent map, about 320 MiB. */
#define JREC_MAX_LEN   (JREC_BODY + 2 * KV_JPATH_MAX + (size_t)KV_JEXT_MAX * JEXT)
#define JOURNAL_PREFIX "journal."
#define JOURNAL_NAME   (sizeof(JOURNAL_PREFIX) + 20) /* with a 64-bit gen and the NUL */
#define CKPT_NAME      "checkpoint"
#define CKPT_TMP       "checkpoint.tmp"
#define JBUF_MIN       (64u << 10)
#define JBUF_KEEP      (4u << 20) /* a larger group-commit buffer is freed after its batch */

/*
 * kj_lock guards every field below it; the fields above it are immutable
 * after kv_journal_open. It is a leaf lock, held for short copies except in
 * kv_journal_rotate, which holds it across the final write and the creation
 * of the next file so that appenders wait. Two condition variables go with
 * it:
 *   kj_work  the commit thread waits on it: for a first append into an empty
 *            kj_buf, for a syncer raising kj_want, or for kj_stop;
 *   kj_done  syncers and kv_journal_rotate wait on it: broadcast after every
 *            batch, when kj_durable, kj_err or kj_committing changed.
 * kj_fd and kj_size change only under the lock while kj_committing is
 * false; the commit thread reads them under the lock when it takes a batch
 * and uses its copies for the I/O.
 */
struct kv_journal {
	int kj_dirfd;
	uint64_t kj_delay_ns;
	pthread_t kj_thread;

	pthread_mutex_t kj_lock;
	pthread_cond_t kj_work;
	pthread_cond_t kj_done;
	char *kj_buf;	/* records appended since the last batch was taken */
	size_t kj_len;	/* bytes in kj_buf */
	size_t kj_cap;	/* bytes allocated for kj_buf */
	char *kj_spare; /* the other buffer: being written while kj_committing */
	size_t kj_spare_cap;
	uint64_t kj_buf_lsn;  /* LSN of the last record in kj_buf */
	uint64_t kj_last_lsn; /* the last LSN handed out */
	uint64_t kj_durable;  /* every LSN up to this one is on disk */
	uint64_t kj_want;     /* the highest LSN a syncer has asked for */
	uint64_t kj_gen;      /* generation of kj_fd */
	int kj_fd;
	uint64_t kj_size;   /* bytes written and synced to kj_fd: where the next batch goes */
	int kj_err;	    /* 0, or the -errno that failed the journal */
	bool kj_committing; /* the commit thread is writing a batch without the lock */
	bool kj_stop;	    /* kv_journal_close: commit what is left and exit */
};

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static_assert(KV_J_MOVE == 9 && KV_J_NODE == 10,
	      "journal types are on disk (ssd/format.h): never renumber");

/* Whether a record of this type with paths of these lengths makes sense. */
static bool jent_shape_ok(uint16_t type, uint32_t path_len, uint32_t path2_len)
{
	if (type < KV_J_MKDIR || type >= KV_J__MAX)
		return false;
	if (path_len > KV_JPATH_MAX || path2_len > KV_JPATH_MAX)
		return false;
	if ((type <= KV_J_SETATTR || type == KV_J_MOVE || type == KV_J_NODE) && !path_len)
		return false;
	return type != KV_J_RENAME || path2_len;
}

/*
 * Whether a record of this type and flags carries an extent map (jb_next
 * struct kv_jext after its paths): a version 2 PUT with KV_JPUT_EXTENTS.
 */
static bool jent_has_ext(uint16_t type, uint32_t flags)
{
	return type == KV_J_PUT && (flags & KV_JPUT_EXTENTS);
}

/* Whether an extent map of n entries is a possible one. */
static bool jext_count_ok(uint32_t n)
{
	return n >= 1 && n <= KV_JEXT_MAX;
}

static int jent_check(const struct kv_jent *e)
{
	if (!jent_shape_ok(e->je_type, e->je_path_len, e->je_path2_len))
		return -EINVAL;
	if ((e->je_path_len && !e->je_path) || (e->je_path2_len && !e->je_path2))
		return -EINVAL;
	if (jent_has_ext(e->je_type, e->je_flags) && (!jext_count_ok(e->je_next) || !e->je_ext))
		return -EINVAL;
	return 0;
}

/* Bytes of e's extent map in its record. */
static size_t jent_ext_bytes(const struct kv_jent *e)
{
	return jent_has_ext(e->je_type, e->je_flags) ? (size_t)e->je_next * JEXT : 0;
}

/* Bytes the record of e takes, padding included. */
static size_t jrec_size(const struct kv_jent *e)
{
	return pad8(JREC_HEAD + JREC_BODY + e->je_path_len + e->je_path2_len + jent_ext_bytes(e));
}

/* XXH3 of the head with jh_csum zeroed, then the jh_len payload bytes. */
static uint64_t jrec_csum(const struct kv_jrec_head *h, const char *payload)
{
	struct kv_jrec_head z = *h;
	XXH3_state_t st;

	z.jh_csum = 0;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, &z, sizeof(z));
	XXH3_64bits_update(&st, payload, h->jh_len);
	return XXH3_64bits_digest(&st);
}

/* Writes the record of e with `lsn` at dst (jrec_size(e) bytes). Returns its size. */
static size_t jrec_encode(char *dst, const struct kv_jent *e, uint64_t lsn)
{
	size_t ext = jent_ext_bytes(e);
	uint32_t len = (uint32_t)(JREC_BODY + e->je_path_len + e->je_path2_len + ext);
	size_t size = pad8(JREC_HEAD + len);
	struct kv_jrec_head h = {
	    .jh_magic = KV_JREC_MAGIC,
	    .jh_type = e->je_type,
	    .jh_version = KV_FORMAT_VERSION,
	    .jh_len = len,
	    .jh_lsn = lsn,
	};
	struct kv_jrec_body b = {
	    .jb_flags = e->je_flags,
	    .jb_mode = e->je_mode,
	    .jb_uid = e->je_uid,
	    .jb_gid = e->je_gid,
	    .jb_atime_ns = e->je_atime_ns,
	    .jb_mtime_ns = e->je_mtime_ns,
	    .jb_ctime_ns = e->je_ctime_ns,
	    .jb_seq = e->je_seq,
	    .jb_bucket = e->je_bucket,
	    .jb_off = e->je_off,
	    .jb_len = e->je_len,
	    .jb_gen = e->je_gen,
	    .jb_head_len = e->je_head_len,
	    .jb_path_len = e->je_path_len,
	    .jb_path2_len = e->je_path2_len,
	    .jb_next = e->je_next,
	};
	char *p = dst + JREC_HEAD;

	memcpy(p, &b, JREC_BODY);
	if (e->je_path_len)
		memcpy(p + JREC_BODY, e->je_path, e->je_path_len);
	if (e->je_path2_len)
		memcpy(p + JREC_BODY + e->je_path_len, e->je_path2, e->je_path2_len);
	if (ext)
		memcpy(p + len - ext, e->je_ext, ext);
	memset(p + len, 0, size - JREC_HEAD - len);
	h.jh_csum = jrec_csum(&h, p);
	memcpy(dst, &h, JREC_HEAD);
	return size;
}

/*
 * Checks the record at p, with `avail` bytes of file from p on: head
 * fields, lengths, zero padding (which the checksum does not cover) and
 * checksum. jh_len must be the body, the paths and, for a version 2 PUT
 * with KV_JPUT_EXTENTS, its 1..KV_JEXT_MAX extents. A version 1 record has
 * no map: jb_next (then jb_pad) is 0 and no PUT has KV_JPUT_EXTENTS.
 * Returns its size, padding included, or 0 if it is not good.
 */
static size_t jrec_check(const char *p, size_t avail)
{
	struct kv_jrec_head h;
	struct kv_jrec_body b;
	uint64_t want;
	size_t size;

	if (avail < JREC_HEAD + JREC_BODY)
		return 0;
	memcpy(&h, p, JREC_HEAD);
	if (h.jh_magic != KV_JREC_MAGIC || (h.jh_version != 1 && h.jh_version != 2))
		return 0;
	if (h.jh_len < JREC_BODY || h.jh_len > JREC_MAX_LEN)
		return 0;
	size = pad8(JREC_HEAD + h.jh_len);
	if (size > avail)
		return 0;
	memcpy(&b, p + JREC_HEAD, JREC_BODY);
	if (!jent_shape_ok(h.jh_type, b.jb_path_len, b.jb_path2_len))
		return 0;
	want = (uint64_t)JREC_BODY + b.jb_path_len + b.jb_path2_len;
	if (h.jh_version == 1 && (b.jb_next || jent_has_ext(h.jh_type, b.jb_flags)))
		return 0;
	if (jent_has_ext(h.jh_type, b.jb_flags)) {
		if (!jext_count_ok(b.jb_next))
			return 0;
		want += (uint64_t)b.jb_next * JEXT;
	}
	if (want != h.jh_len)
		return 0;
	for (size_t i = JREC_HEAD + h.jh_len; i < size; i++)
		if (p[i])
			return 0;
	if (jrec_csum(&h, p + JREC_HEAD) != h.jh_csum)
		return 0;
	return size;
}

/*
 * Fills e from the good record at p (paths and an extent map point into it;
 * the map unaligned). Returns its LSN.
 */
static uint64_t jrec_decode(const char *p, struct kv_jent *e)
{
	const char *path = p + JREC_HEAD + JREC_BODY;
	struct kv_jrec_head h;
	struct kv_jrec_body b;

	memcpy(&h, p, JREC_HEAD);
	memcpy(&b, p + JREC_HEAD, JREC_BODY);
	*e = (struct kv_jent){
	    .je_type = h.jh_type,
	    .je_flags = b.jb_flags,
	    .je_mode = b.jb_mode,
	    .je_uid = b.jb_uid,
	    .je_gid = b.jb_gid,
	    .je_atime_ns = b.jb_atime_ns,
	    .je_mtime_ns = b.jb_mtime_ns,
	    .je_ctime_ns = b.jb_ctime_ns,
	    .je_seq = b.jb_seq,
	    .je_bucket = b.jb_bucket,
	    .je_off = b.jb_off,
	    .je_len = b.jb_len,
	    .je_head_len = b.jb_head_len,
	    .je_gen = b.jb_gen,
	    .je_path = b.jb_path_len ? path : NULL,
	    .je_path_len = b.jb_path_len,
	    .je_path2 = b.jb_path2_len ? path + b.jb_path_len : NULL,
	    .je_path2_len = b.jb_path2_len,
	    .je_next = b.jb_next,
	};
	if (jent_has_ext(h.jh_type, b.jb_flags))
		e->je_ext = path + b.jb_path_len + b.jb_path2_len;
	return h.jh_lsn;
}

/* Writes all of buf at off. Returns 0 or -errno. */
static int pwrite_all(int fd, const char *buf, size_t len, uint64_t off)
{
	return kv_prw_all(fd, true, (char *)buf, len, off);
}

/* Writes a batch at off and makes it durable. Returns 0 or -errno. */
static int write_sync(int fd, const char *buf, size_t len, uint64_t off)
{
	int err = pwrite_all(fd, buf, len, off);

	if (!err && fdatasync(fd) < 0)
		err = -errno;
	return err;
}

/* Reads the whole file into a new buffer (NULL when empty). Returns 0 or -errno. */
/*
 * Maps a whole file read-only (NULL and 0 when empty): a 100 MB checkpoint
 * is read at start with no copy and no zeroed heap pages. MAP_POPULATE
 * reads it all in here; a disk error while doing so would surface as
 * SIGBUS at the first touch instead of -EIO, a price paid only when the
 * data directory's disk is failing anyway. Undo with unmap_all.
 */
static int map_all(int fd, const char **out, size_t *len)
{
	struct stat st;
	void *p;

	*out = NULL;
	*len = 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!st.st_size)
		return 0;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	*len = (size_t)st.st_size;
	return 0;
}

static void unmap_all(const char *buf, size_t len)
{
	if (buf)
		munmap((void *)buf, len);
}

static void jfile_name(char *name, uint64_t gen)
{
	snprintf(name, JOURNAL_NAME, JOURNAL_PREFIX "%" PRIu64, gen);
}

/* Opens journal.<gen> with `flags` (O_CLOEXEC added). Returns 0 or -errno. */
static int jfile_open(int dirfd, uint64_t gen, int flags, int *fd)
{
	char name[JOURNAL_NAME];

	jfile_name(name, gen);
	*fd = openat(dirfd, name, flags | O_CLOEXEC, 0600);
	return *fd < 0 ? -errno : 0;
}

/* Parses "journal.<gen>", gen in canonical decimal; false for any other name. */
static bool parse_gen(const char *name, uint64_t *gen)
{
	const char *s = name + sizeof(JOURNAL_PREFIX) - 1;
	char *end;

	if (strncmp(name, JOURNAL_PREFIX, sizeof(JOURNAL_PREFIX) - 1))
		return false;
	if (!isdigit((unsigned char)s[0]) || (s[0] == '0' && s[1]))
		return false;
	errno = 0;
	*gen = strtoull(s, &end, 10);
	return !*end && !errno;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Lists the journal generations in dirfd, ascending, into a new array. Returns 0 or -errno. */
static int list_gens(int dirfd, uint64_t **out, size_t *count)
{
	uint64_t *gens = NULL, *grown, gen;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int fd, err = 0;
	DIR *d;

	/* fdopendir owns the fd it gets, so give it a copy of dirfd. */
	fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		err = -errno;
		close(fd);
		return err;
	}
	/* The copy shares dirfd's offset, which an earlier reader may have moved. */
	rewinddir(d);
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			err = -errno;
			break;
		}
		if (!parse_gen(de->d_name, &gen))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			grown = realloc(gens, cap * sizeof(*gens));
			if (!grown) {
				err = -ENOMEM;
				break;
			}
			gens = grown;
		}
		gens[n++] = gen;
	}
	closedir(d);
	if (err) {
		free(gens);
		return err;
	}
	if (n)
		qsort(gens, n, sizeof(*gens), cmp_u64);
	*out = gens;
	*count = n;
	return 0;
}

/* Records the end of a batch of `len` bytes up to `lsn`; kj_lock held. */
static void commit_done(struct kv_journal *j, int err, size_t len, uint64_t lsn)
{
	if (err && !j->kj_err)
		j->kj_err = err;
	if (!err) {
		j->kj_size += len;
		j->kj_durable = lsn;
	}
	pthread_cond_broadcast(&j->kj_done);
}

/*
 * Writes out kj_buf: called by the commit thread with kj_lock held, which
 * it drops for the I/O while appenders fill the other buffer. A failed
 * journal writes nothing more and only drops the batch.
 */
static void commit_batch(struct kv_journal *j)
{
	char *buf = j->kj_buf;
	size_t len = j->kj_len, cap = j->kj_cap;
	uint64_t lsn = j->kj_buf_lsn, off = j->kj_size;
	int fd = j->kj_fd, err = j->kj_err;

	j->kj_buf = j->kj_spare;
	j->kj_cap = j->kj_spare_cap;
	j->kj_len = 0;
	j->kj_committing = true;
	pthread_mutex_unlock(&j->kj_lock);
	if (!err)
		err = write_sync(fd, buf, len, off);
	/* A batch with a huge entry (an extent map) does not keep its memory. */
	if (cap > JBUF_KEEP) {
		free(buf);
		buf = NULL;
		cap = 0;
	}
	pthread_mutex_lock(&j->kj_lock);
	j->kj_spare = buf;
	j->kj_spare_cap = cap;
	j->kj_committing = false;
	commit_done(j, err, len, lsn);
}

/* Absolute CLOCK_MONOTONIC time `ns` from now. */
static struct timespec deadline_after(uint64_t ns)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += (time_t)(ns / 1000000000u);
	t.tv_nsec += (long)(ns % 1000000000u);
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	return t;
}

/* Lets appends gather for up to kj_delay_ns, unless a syncer or close is waiting; kj_lock held. */
static void gather(struct kv_journal *j)
{
	struct timespec deadline = deadline_after(j->kj_delay_ns);
	int rc = 0;

	while (rc != ETIMEDOUT && !j->kj_stop && j->kj_want <= j->kj_durable)
		rc = pthread_cond_timedwait(&j->kj_work, &j->kj_lock, &deadline);
}

/*
 * The commit thread. kj_lock is held except inside pthread_cond_*wait and
 * while commit_batch writes. After the first append it lets more gather for
 * up to kj_delay_ns, unless a syncer waits for one of them or close asks to
 * finish; it exits once kj_stop is set and kj_buf is empty.
 */
static void *commit_main(void *arg)
{
	struct kv_journal *j = arg;

	pthread_mutex_lock(&j->kj_lock);
	for (;;) {
		while (!j->kj_len && !j->kj_stop)
			pthread_cond_wait(&j->kj_work, &j->kj_lock);
		if (!j->kj_len)
			break;
		gather(j);
		/* kv_journal_rotate may have written the buffer while we waited. */
		if (j->kj_len)
			commit_batch(j);
	}
	pthread_mutex_unlock(&j->kj_lock);
	return NULL;
}

int kv_journal_open(struct kv_journal **out, int dirfd, uint64_t gen, uint64_t last_lsn,
		    uint64_t commit_delay_ns)
{
	pthread_condattr_t ca;
	struct kv_journal *j;
	struct stat st;
	int err;

	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->kj_dirfd = dirfd;
	j->kj_delay_ns = commit_delay_ns;
	j->kj_gen = gen;
	j->kj_last_lsn = last_lsn;
	j->kj_durable = last_lsn;
	j->kj_want = last_lsn;
	err = jfile_open(dirfd, gen, O_WRONLY | O_CREAT, &j->kj_fd);
	if (err)
		goto out_free;
	/* The file may be new: make it and its name durable before any LSN is. */
	if (fstat(j->kj_fd, &st) < 0 || fsync(j->kj_fd) < 0 || fsync(dirfd) < 0) {
		err = -errno;
		goto out_close;
	}
	j->kj_size = (uint64_t)st.st_size;
	pthread_mutex_init(&j->kj_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->kj_work, &ca);
	pthread_cond_init(&j->kj_done, &ca);
	pthread_condattr_destroy(&ca);
	err = -pthread_create(&j->kj_thread, NULL, commit_main, j);
	if (err)
		goto out_destroy;
	*out = j;
	return 0;

out_destroy:
	pthread_cond_destroy(&j->kj_done);
	pthread_cond_destroy(&j->kj_work);
	pthread_mutex_destroy(&j->kj_lock);
out_close:
	close(j->kj_fd);
out_free:
	free(j);
	return err;
}

void kv_journal_close(struct kv_journal *j)
{
	pthread_mutex_lock(&j->kj_lock);
	j->kj_stop = true;
	pthread_cond_signal(&j->kj_work);
	pthread_mutex_unlock(&j->kj_lock);
	pthread_join(j->kj_thread, NULL);
	close(j->kj_fd);
	pthread_cond_destroy(&j->kj_done);
	pthread_cond_destroy(&j->kj_work);
	pthread_mutex_destroy(&j->kj_lock);
	free(j->kj_buf);
	free(j->kj_spare);
	free(j);
}

/* Makes room for `size` more bytes in kj_buf; kj_lock held. Returns 0 or -ENOMEM. */
static int jbuf_reserve(struct kv_journal *j, size_t size)
{
	size_t cap = j->kj_cap ? j->kj_cap : JBUF_MIN;
	char *buf;

	if (j->kj_len + size <= j->kj_cap)
		return 0;
	while (cap < j->kj_len + size)
		cap *= 2;
	buf = realloc(j->kj_buf, cap);
	if (!buf)
		return -ENOMEM;
	j->kj_buf = buf;
	j->kj_cap = cap;
	return 0;
}

int kv_journal_append(struct kv_journal *j, const struct kv_jent *e, uint64_t *lsn)
{
	size_t size;
	int err;

	err = jent_check(e);
	if (err)
		return err;
	size = jrec_size(e);
	pthread_mutex_lock(&j->kj_lock);
	err = j->kj_err;
	if (!err)
		err = jbuf_reserve(j, size);
	if (err)
		goto out_unlock;
	if (!j->kj_len)
		pthread_cond_signal(&j->kj_work);
	j->kj_buf_lsn = ++j->kj_last_lsn;
	j->kj_len += jrec_encode(j->kj_buf + j->kj_len, e, j->kj_buf_lsn);
	if (lsn)
		*lsn = j->kj_buf_lsn;
out_unlock:
	pthread_mutex_unlock(&j->kj_lock);
	return err;
}

/*
 * An LSN past the last one handed out means "everything appended so far".
 * An entry that reached the disk before the journal failed syncs with 0.
 */
int kv_journal_sync(struct kv_journal *j, uint64_t lsn)
{
	int err = 0;

	pthread_mutex_lock(&j->kj_lock);
	if (lsn > j->kj_last_lsn)
		lsn = j->kj_last_lsn;
	if (lsn > j->kj_want) {
		j->kj_want = lsn;
		pthread_cond_signal(&j->kj_work);
	}
	while (j->kj_durable < lsn && !j->kj_err)
		pthread_cond_wait(&j->kj_done, &j->kj_lock);
	if (j->kj_durable < lsn)
		err = j->kj_err;
	pthread_mutex_unlock(&j->kj_lock);
	return err;
}

uint64_t kv_journal_last_lsn(struct kv_journal *j)
{
	uint64_t lsn;

	pthread_mutex_lock(&j->kj_lock);
	lsn = j->kj_last_lsn;
	pthread_mutex_unlock(&j->kj_lock);
	return lsn;
}

uint64_t kv_journal_size(struct kv_journal *j)
{
	uint64_t size;

	pthread_mutex_lock(&j->kj_lock);
	size = j->kj_size;
	pthread_mutex_unlock(&j->kj_lock);
	return size;
}

/* Creates journal.<gen> and makes it and its name durable. Returns 0 or -errno. */
static int jfile_create(int dirfd, uint64_t gen, int *fd)
{
	char name[JOURNAL_NAME];
	int err;

	err = jfile_open(dirfd, gen, O_WRONLY | O_CREAT | O_EXCL, fd);
	if (err)
		return err;
	if (fsync(*fd) < 0 || fsync(dirfd) < 0) {
		err = -errno;
		close(*fd);
		jfile_name(name, gen);
		unlinkat(dirfd, name, 0);
	}
	return err;
}

/*
 * Holds kj_lock throughout, after waiting out a batch in flight: what is
 * buffered goes to the old file (a failure there fails the journal), then
 * the new file replaces it. If the new file cannot be made, appends carry
 * on in the old one.
 */
int kv_journal_rotate(struct kv_journal *j, uint64_t *new_gen)
{
	int err, fd;

	pthread_mutex_lock(&j->kj_lock);
	while (j->kj_committing)
		pthread_cond_wait(&j->kj_done, &j->kj_lock);
	err = j->kj_err;
	if (err)
		goto out_unlock;
	if (j->kj_len) {
		err = write_sync(j->kj_fd, j->kj_buf, j->kj_len, j->kj_size);
		commit_done(j, err, j->kj_len, j->kj_buf_lsn);
		j->kj_len = 0;
		if (err)
			goto out_unlock;
	}
	err = jfile_create(j->kj_dirfd, j->kj_gen + 1, &fd);
	if (err)
		goto out_unlock;
	close(j->kj_fd);
	j->kj_fd = fd;
	j->kj_gen++;
	j->kj_size = 0;
	*new_gen = j->kj_gen;
out_unlock:
	pthread_mutex_unlock(&j->kj_lock);
	return err;
}

/* Oldest first. Not synced: a file below the checkpoint's gen that comes back is never replayed. */
void kv_journal_drop_before(int dirfd, uint64_t gen)
{
	char name[JOURNAL_NAME];
	uint64_t *gens;
	size_t n;

	if (list_gens(dirfd, &gens, &n))
		return;
	for (size_t i = 0; i < n && gens[i] < gen; i++) {
		jfile_name(name, gens[i]);
		unlinkat(dirfd, name, 0);
	}
	free(gens);
}

/* Whether a good record starts at any 8-byte step after the bad one at off. */
static bool good_rec_after(const char *buf, size_t off, size_t len)
{
	for (off += 8; off < len; off += 8)
		if (jrec_check(buf + off, len - off))
			return true;
	return false;
}

/* Cuts a torn tail off the newest file and syncs it. Returns 0 or -errno. */
static int cut_tail(int fd, size_t off)
{
	if (ftruncate(fd, (off_t)off) < 0 || fsync(fd) < 0)
		return -errno;
	return 0;
}

/*
 * Replays one file, calling fn for its good records. LSNs must go up from
 * *last_lsn, which follows them. Returns 0, -EIO, fn's return or -errno.
 */
static int replay_file(int dirfd, uint64_t gen, bool newest, kv_jent_fn fn, void *arg,
		       uint64_t *last_lsn)
{
	struct kv_jent e;
	size_t len, off = 0, size;
	uint64_t lsn;
	const char *buf;
	int fd, err;

	err = jfile_open(dirfd, gen, newest ? O_RDWR : O_RDONLY, &fd);
	if (err)
		return err;
	err = map_all(fd, &buf, &len);
	if (err)
		goto out_close;
	while (off < len && (size = jrec_check(buf + off, len - off))) {
		lsn = jrec_decode(buf + off, &e);
		if (lsn <= *last_lsn) {
			err = -EIO;
			goto out_free;
		}
		*last_lsn = lsn;
		err = fn(&e, lsn, arg);
		if (err)
			goto out_free;
		off += size;
	}
	if (off < len)
		err = !newest || good_rec_after(buf, off, len) ? -EIO : cut_tail(fd, off);
out_free:
	unmap_all(buf, len);
out_close:
	close(fd);
	return err;
}

int kv_journal_replay(int dirfd, uint64_t from_gen, kv_jent_fn fn, void *arg, uint64_t *last_gen,
		      uint64_t *last_lsn)
{
	uint64_t *gens;
	bool first = true;
	size_t n;
	int err;

	*last_gen = from_gen;
	*last_lsn = 0;
	err = list_gens(dirfd, &gens, &n);
	if (err)
		return err;
	for (size_t i = 0; i < n && !err; i++) {
		if (gens[i] < from_gen)
			continue;
		if (!first && gens[i] != *last_gen + 1) {
			err = -EIO;
			break;
		}
		first = false;
		*last_gen = gens[i];
		err = replay_file(dirfd, gens[i], i == n - 1, fn, arg, last_lsn);
	}
	free(gens);
	return err;
}

/*
 * A checkpoint image (kv_ckpt_img_*): records encoded into a list of
 * chunks, each record whole in one chunk (one larger than CKPT_CHUNK gets
 * a chunk of its own). The first chunk starts with room for the header,
 * encoded when the image is written (its values are known only then).
 */
#define CKPT_CHUNK (8u << 20)

struct ckpt_chunk {
	struct ckpt_chunk *cc_next;
	size_t cc_len, cc_cap; /* bytes used, bytes there */
	char cc_data[];
};

struct kv_ckpt_img {
	struct ckpt_chunk *ci_head;
	struct ckpt_chunk *ci_tail; /* where records go; chunks after it are reserved, empty */
	uint64_t ci_n;		    /* entries added: the next one's jh_lsn is ci_n + 1 */
};

/* The header's record size: no paths, no map. */
static size_t ckpt_head_size(void)
{
	return pad8(JREC_HEAD + JREC_BODY);
}

/* Appends an empty chunk of cap bytes (touched: faulted in now, when `touch`). */
static int chunk_add(struct kv_ckpt_img *im, size_t cap, bool touch)
{
	struct ckpt_chunk *c = malloc(sizeof(*c) + cap), *last = im->ci_tail;

	if (!c)
		return -ENOMEM;
	if (touch)
		memset(c->cc_data, 0, cap);
	c->cc_next = NULL;
	c->cc_len = 0;
	c->cc_cap = cap;
	while (last && last->cc_next)
		last = last->cc_next;
	if (last)
		last->cc_next = c;
	else
		im->ci_head = im->ci_tail = c;
	return 0;
}

int kv_ckpt_img_new(struct kv_ckpt_img **out, size_t reserve)
{
	struct kv_ckpt_img *im = calloc(1, sizeof(*im));
	int err = im ? 0 : -ENOMEM;

	if (!err)
		err = chunk_add(im, CKPT_CHUNK, true);
	for (size_t have = CKPT_CHUNK; !err && have < reserve; have += CKPT_CHUNK)
		err = chunk_add(im, CKPT_CHUNK, true);
	if (err) {
		kv_ckpt_img_free(im);
		return err;
	}
	im->ci_head->cc_len = ckpt_head_size();
	*out = im;
	return 0;
}

void kv_ckpt_img_free(struct kv_ckpt_img *im)
{
	if (!im)
		return;
	for (struct ckpt_chunk *c = im->ci_head, *next; c; c = next) {
		next = c->cc_next;
		free(c);
	}
	free(im);
}

/* Encodes e as the record with jh_lsn idx after the others. Returns 0 or -ENOMEM. */
static int img_put(struct kv_ckpt_img *im, const struct kv_jent *e, uint64_t idx)
{
	size_t size = jrec_size(e);
	struct ckpt_chunk *c = im->ci_tail;

	while (c->cc_len + size > c->cc_cap) {
		if (!c->cc_next && chunk_add(im, size > CKPT_CHUNK ? size : CKPT_CHUNK, false))
			return -ENOMEM;
		c = im->ci_tail = c->cc_next;
	}
	c->cc_len += jrec_encode(c->cc_data + c->cc_len, e, idx);
	return 0;
}

int kv_ckpt_img_add(struct kv_ckpt_img *im, const struct kv_jent *e)
{
	int err = jent_check(e);

	if (!err && (e->je_type == KV_J_CKPT || e->je_type == KV_J_CKPT_END))
		err = -EINVAL;
	if (!err)
		err = img_put(im, e, im->ci_n + 1);
	if (!err)
		im->ci_n++;
	return err;
}

/* Writes every chunk of im to fd and syncs it. Returns 0 or -errno. */
static int img_out(const struct kv_ckpt_img *im, int fd)
{
	uint64_t off = 0;
	int err = 0;

	/* A reserved chunk too small for the record that came may be left empty. */
	for (const struct ckpt_chunk *c = im->ci_head; !err && c; c = c->cc_next) {
		err = c->cc_len ? pwrite_all(fd, c->cc_data, c->cc_len, off) : 0;
		off += c->cc_len;
	}
	if (!err && fsync(fd) < 0)
		err = -errno;
	return err;
}

/* After the rename, a failed directory fsync is reported but cannot bring the old one back. */
int kv_ckpt_img_write(struct kv_ckpt_img *im, int dirfd, uint64_t next_seq, uint64_t next_bucket,
		      uint64_t gen)
{
	struct kv_jent e = {
	    .je_type = KV_J_CKPT,
	    .je_seq = next_seq,
	    .je_bucket = next_bucket,
	    .je_gen = gen,
	};
	int fd, err;

	jrec_encode(im->ci_head->cc_data, &e, 0);
	e = (struct kv_jent){.je_type = KV_J_CKPT_END, .je_len = im->ci_n};
	err = img_put(im, &e, im->ci_n + 1);
	if (err)
		return err;
	fd = openat(dirfd, CKPT_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = img_out(im, fd);
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && renameat(dirfd, CKPT_TMP, dirfd, CKPT_NAME) < 0)
		err = -errno;
	if (err) {
		unlinkat(dirfd, CKPT_TMP, 0);
		return err;
	}
	return fsync(dirfd) < 0 ? -errno : 0;
}

int kv_ckpt_write(int dirfd, uint64_t next_seq, uint64_t next_bucket, uint64_t gen,
		  kv_ckpt_next_fn next, void *arg)
{
	struct kv_ckpt_img *im;
	struct kv_jent e;
	int err, more;

	err = kv_ckpt_img_new(&im, 0);
	while (!err) {
		memset(&e, 0, sizeof(e));
		more = next(&e, arg);
		if (more <= 0) {
			err = more;
			break;
		}
		err = kv_ckpt_img_add(im, &e);
	}
	if (!err)
		err = kv_ckpt_img_write(im, dirfd, next_seq, next_bucket, gen);
	kv_ckpt_img_free(im);
	return err;
}

uint64_t kv_ckpt_size(int dirfd)
{
	struct stat st;

	return fstatat(dirfd, CKPT_NAME, &st, 0) < 0 ? 0 : (uint64_t)st.st_size;
}

/*
 * Checks a whole checkpoint image: every record good, jh_lsn its index, a
 * KV_J_CKPT first, a KV_J_CKPT_END last and nowhere else, counting the
 * entries between them, and nothing after it. Sets *count. Returns 0 or -EIO.
 */
static int ckpt_check(const char *buf, size_t len, uint64_t *count)
{
	struct kv_jent e;
	size_t off = 0, size;

	for (uint64_t idx = 0; off < len; idx++) {
		size = jrec_check(buf + off, len - off);
		if (!size || jrec_decode(buf + off, &e) != idx)
			return -EIO;
		if ((idx == 0) != (e.je_type == KV_J_CKPT))
			return -EIO;
		off += size;
		if (e.je_type == KV_J_CKPT_END) {
			if (off != len || e.je_len != idx - 1)
				return -EIO;
			*count = idx - 1;
			return 0;
		}
	}
	return -EIO;
}

int kv_ckpt_load(int dirfd, kv_jent_fn fn, void *arg, uint64_t *next_seq, uint64_t *next_bucket,
		 uint64_t *gen)
{
	uint64_t count, lsn;
	struct kv_jent e;
	size_t len, off;
	const char *buf;
	int fd, err;

	fd = openat(dirfd, CKPT_NAME, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = map_all(fd, &buf, &len);
	close(fd);
	if (err)
		return err;
	err = ckpt_check(buf, len, &count);
	if (err)
		goto out_free;
	jrec_decode(buf, &e);
	*next_seq = e.je_seq;
	*next_bucket = e.je_bucket;
	*gen = e.je_gen;
	off = jrec_size(&e);
	for (uint64_t i = 1; i <= count && !err; i++) {
		lsn = jrec_decode(buf + off, &e);
		off += jrec_size(&e);
		err = fn(&e, lsn, arg);
	}
out_free:
	unmap_all(buf, len);
	return err;
}
