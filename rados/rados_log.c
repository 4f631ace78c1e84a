/* SPDX-License-Identifier: MIT */
/*
 * rados/rados_log.c — the shared tier's change log (rados/rados_log.h).
 */
#include "rados/rados_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ssd/fileio.h"

#define TMP_NAME KV_RLOG_NAME ".tmp"
#define OLD_NAME KV_RLOG_NAME ".old"
#define REC_MAX	 (sizeof(struct kv_rlog_rec) + 2 * KV_RLOG_PATH_MAX + 8)

struct kv_rlog {
	int rl_dirfd; /* not owned */
	int rl_fd;    /* O_APPEND */
	int rl_tmpfd; /* a rewrite's new log, or -1 */
	size_t rl_hlen;
	uint64_t rl_bytes, rl_tmp_bytes;
	char *rl_head; /* the header, rl_hlen bytes */
	char *rl_buf;  /* REC_MAX: one record being written */
};

/* Encodes c (or a DONE for id when c is NULL) into l->rl_buf; returns its length, 0 when too long.
 */
static size_t encode(struct kv_rlog *l, const struct kv_rlog_change *c, uint64_t id)
{
	size_t p1 = c && c->rc_path ? strlen(c->rc_path) : 0;
	size_t p2 = c && c->rc_path2 ? strlen(c->rc_path2) : 0;
	struct kv_rlog_rec r = {.rr_magic = KV_RLOG_REC_MAGIC, .rr_id = c ? c->rc_id : id};
	uint64_t sum;
	char *b = l->rl_buf;

	if (p1 > KV_RLOG_PATH_MAX || p2 > KV_RLOG_PATH_MAX)
		return 0;
	r.rr_len = (uint32_t)(sizeof(r) + p1 + p2 + 8);
	r.rr_kind = (uint8_t)(c ? c->rc_kind : KV_RLOG_DONE);
	r.rr_plen = (uint16_t)p1;
	r.rr_plen2 = (uint16_t)p2;
	if (c) {
		r.rr_mode = c->rc_mode;
		r.rr_seq = c->rc_seq;
		r.rr_size = c->rc_size;
		r.rr_node = c->rc_node;
		r.rr_mark = c->rc_mark;
	}
	memcpy(b, &r, sizeof(r));
	if (p1)
		memcpy(b + sizeof(r), c->rc_path, p1);
	if (p2)
		memcpy(b + sizeof(r) + p1, c->rc_path2, p2);
	sum = XXH3_64bits(b, r.rr_len - 8);
	memcpy(b + r.rr_len - 8, &sum, 8);
	return r.rr_len;
}

/* The record at p (avail bytes), or NULL when it is torn or corrupt. */
static const struct kv_rlog_rec *decode(const char *p, uint64_t avail)
{
	struct kv_rlog_rec r;
	uint64_t sum;

	if (avail < sizeof(r) + 8)
		return NULL;
	memcpy(&r, p, sizeof(r));
	if (r.rr_magic != KV_RLOG_REC_MAGIC || r.rr_len > avail ||
	    r.rr_len != sizeof(r) + (uint32_t)r.rr_plen + r.rr_plen2 + 8 ||
	    r.rr_plen > KV_RLOG_PATH_MAX || r.rr_plen2 > KV_RLOG_PATH_MAX ||
	    r.rr_kind < KV_RLOG_PUT || r.rr_kind > KV_RLOG_KIND_MAX)
		return NULL;
	memcpy(&sum, p + r.rr_len - 8, 8);
	if (sum != XXH3_64bits(p, r.rr_len - 8))
		return NULL;
	return (const struct kv_rlog_rec *)p;
}

/*
 * Calls each for the changes of buf[hlen, len) after the last DONE and
 * sets *end to where the valid records end, *last to the highest id,
 * *pending to how many changes were left.
 */
static int replay(const char *buf, uint64_t hlen, uint64_t len, kv_rlog_each_fn each, void *arg,
		  uint64_t *end, uint64_t *last, uint64_t *pending)
{
	const struct kv_rlog_rec *r;
	uint64_t off = hlen, done = 0;
	int err = 0;

	*last = 0;
	*pending = 0;
	for (; (r = decode(buf + off, len - off)) != NULL; off += r->rr_len) {
		if (r->rr_kind == KV_RLOG_DONE && r->rr_id > done)
			done = r->rr_id;
		if (r->rr_id > *last)
			*last = r->rr_id;
	}
	*end = off;
	for (off = hlen; off < *end && !err; off += r->rr_len) {
		char p1[KV_RLOG_PATH_MAX + 1], p2[KV_RLOG_PATH_MAX + 1];
		struct kv_rlog_change c;

		r = (const struct kv_rlog_rec *)(buf + off);
		if (r->rr_kind == KV_RLOG_DONE || r->rr_id <= done)
			continue;
		memcpy(p1, r + 1, r->rr_plen);
		p1[r->rr_plen] = '\0';
		memcpy(p2, (const char *)(r + 1) + r->rr_plen, r->rr_plen2);
		p2[r->rr_plen2] = '\0';
		c = (struct kv_rlog_change){.rc_id = r->rr_id,
					    .rc_kind = (enum kv_rlog_kind)r->rr_kind,
					    .rc_seq = r->rr_seq,
					    .rc_size = r->rr_size,
					    .rc_node = r->rr_node,
					    .rc_mark = r->rr_mark,
					    .rc_mode = r->rr_mode,
					    .rc_path = p1,
					    .rc_path2 = p2};
		(*pending)++;
		if (each)
			err = each(arg, &c);
	}
	return err;
}

/* Counts the changes a set-aside log held, for the message. */
static uint64_t count_pending(const char *buf, uint64_t hlen, uint64_t len)
{
	uint64_t end, last, pending = 0;

	if (hlen <= len)
		replay(buf, hlen, len, NULL, NULL, &end, &last, &pending);
	return pending;
}

int kv_rlog_open(int dirfd, const char *pool, const char *ns, kv_rlog_each_fn each, void *arg,
		 struct kv_rlog **out, uint64_t *last)
{
	struct kv_rlog *l;
	char *buf = NULL;
	uint64_t len = 0, end = 0, pending;
	int err;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->rl_dirfd = dirfd;
	l->rl_tmpfd = -1;
	l->rl_buf = malloc(REC_MAX);
	err = l->rl_buf
		  ? kv_file_head(KV_RLOG_MAGIC, KV_RLOG_VERSION, pool, ns, &l->rl_head, &l->rl_hlen)
		  : -ENOMEM;
	if (err)
		goto out_free;
	*last = 0;
	err = kv_file_load(dirfd, KV_RLOG_NAME, &l->rl_fd, &buf, &len);
	if (err)
		goto out_free;
	if (l->rl_fd >= 0) {
		if (len < l->rl_hlen || memcmp(buf, l->rl_head, l->rl_hlen)) {
			/* another pool's, another format's (or not ours at all): set aside, begun
			 * anew */
			struct kv_file_head o = {0};

			memcpy(&o, buf, len < sizeof(o) ? len : sizeof(o));
			if (len)
				fprintf(stderr,
					"kvfs: rados: %s was kept for another pool, namespace or "
					"format "
					"(%" PRIu64 " changes not sent): set aside as %s\n",
					KV_RLOG_NAME,
					o.fh_magic == KV_RLOG_MAGIC &&
						o.fh_version == KV_RLOG_VERSION
					    ? count_pending(
						  buf, sizeof(o) + o.fh_pool_len + o.fh_ns_len, len)
					    : 0,
					OLD_NAME);
			close(l->rl_fd);
			l->rl_fd = -1;
			if (len && renameat(dirfd, KV_RLOG_NAME, dirfd, OLD_NAME) < 0) {
				err = -errno;
				goto out_free;
			}
		} else {
			err = replay(buf, l->rl_hlen, len, each, arg, &end, last, &pending);
			if (err)
				goto out_close;
			/* a torn tail goes: appends follow the last whole record */
			if (end < len && ftruncate(l->rl_fd, (off_t)end) < 0) {
				err = -errno;
				goto out_close;
			}
			l->rl_bytes = end;
		}
	}
	if (l->rl_fd < 0) {
		l->rl_fd = kv_file_create(dirfd, KV_RLOG_NAME, l->rl_head, l->rl_hlen);
		if (l->rl_fd < 0) {
			err = l->rl_fd;
			goto out_free;
		}
		fsync(dirfd); /* its name: a power cut keeps the log */
		l->rl_bytes = l->rl_hlen;
	}
	free(buf);
	*out = l;
	return 0;
out_close:
	close(l->rl_fd);
out_free:
	free(buf);
	free(l->rl_head);
	free(l->rl_buf);
	free(l);
	return err;
}

static int append(struct kv_rlog *l, const struct kv_rlog_change *c, uint64_t id)
{
	size_t n = encode(l, c, id);
	int err;

	if (!n)
		return -ENAMETOOLONG;
	err = kv_write_all(l->rl_fd, l->rl_buf, n);
	if (err) {
		/* a partial record would end the log: cut it off */
		if (ftruncate(l->rl_fd, (off_t)l->rl_bytes) < 0)
			return -errno;
		return err;
	}
	l->rl_bytes += n;
	return 0;
}

int kv_rlog_append(struct kv_rlog *l, const struct kv_rlog_change *c)
{
	return append(l, c, 0);
}

int kv_rlog_done(struct kv_rlog *l, uint64_t id, bool empty)
{
	if (empty && l->rl_bytes > KV_RLOG_SHRINK) {
		if (ftruncate(l->rl_fd, (off_t)l->rl_hlen) < 0)
			return -errno;
		l->rl_bytes = l->rl_hlen;
		return 0;
	}
	return append(l, NULL, id);
}

uint64_t kv_rlog_bytes(const struct kv_rlog *l)
{
	return l->rl_bytes;
}

int kv_rlog_rewrite_begin(struct kv_rlog *l)
{
	int fd = kv_file_create(l->rl_dirfd, TMP_NAME, l->rl_head, l->rl_hlen);

	if (fd < 0)
		return fd;
	l->rl_tmpfd = fd;
	l->rl_tmp_bytes = l->rl_hlen;
	return 0;
}

int kv_rlog_rewrite_add(struct kv_rlog *l, const struct kv_rlog_change *c)
{
	size_t n = encode(l, c, 0);
	int err;

	if (!n)
		return -ENAMETOOLONG;
	err = kv_write_all(l->rl_tmpfd, l->rl_buf, n);
	if (!err)
		l->rl_tmp_bytes += n;
	return err;
}

int kv_rlog_rewrite_end(struct kv_rlog *l, bool ok)
{
	int err = 0;

	if (ok && fdatasync(l->rl_tmpfd) < 0)
		err = -errno;
	if (ok && !err && renameat(l->rl_dirfd, TMP_NAME, l->rl_dirfd, KV_RLOG_NAME) < 0)
		err = -errno;
	if (!ok || err) {
		close(l->rl_tmpfd);
		l->rl_tmpfd = -1;
		unlinkat(l->rl_dirfd, TMP_NAME, 0);
		return err;
	}
	fsync(l->rl_dirfd); /* the rename: a power cut leaves the old log or the new one */
	close(l->rl_fd);
	l->rl_fd = l->rl_tmpfd;
	l->rl_tmpfd = -1;
	l->rl_bytes = l->rl_tmp_bytes;
	return 0;
}

int kv_rlog_dup(const struct kv_rlog *l)
{
	int fd = fcntl(l->rl_fd, F_DUPFD_CLOEXEC, 0);

	return fd < 0 ? -errno : fd;
}

void kv_rlog_close(struct kv_rlog *l)
{
	if (!l)
		return;
	if (l->rl_tmpfd >= 0)
		kv_rlog_rewrite_end(l, false);
	close(l->rl_fd);
	free(l->rl_head);
	free(l->rl_buf);
	free(l);
}
