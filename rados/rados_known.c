/* SPDX-License-Identifier: MIT */
/*
 * rados/rados_known.c — which local values are copies of cluster versions
 * (rados/rados_known.h).
 *
 * In memory: an open-addressing table (linear probing, backward-shift
 * deletion) of local sequence number -> cluster version, kept at most half
 * full. Sequence number 0 marks an empty slot (the store's start at 1).
 */
#include "rados/rados_known.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ssd/fileio.h"

#define TMP_NAME KV_RKNOWN_NAME ".tmp"

struct slot {
	uint64_t s_seq, s_node, s_rseq;
};

struct kv_rknown {
	pthread_mutex_t rk_lock; /* guards everything below (a leaf) */
	int rk_dirfd;		 /* not owned */
	int rk_fd;		 /* O_APPEND */
	struct slot *rk_tab;
	uint64_t rk_cap, rk_n; /* slots (a power of two), versions known */
	uint64_t rk_recs;      /* records in the file, after its header of rk_hlen bytes */
	char *rk_head;	       /* the header */
	size_t rk_hlen;
};

static uint64_t slot_of(const struct kv_rknown *k, uint64_t seq)
{
	return XXH3_64bits(&seq, sizeof(seq)) & (k->rk_cap - 1);
}

/* The slot holding seq, or the empty one where it would go. */
static struct slot *find(const struct kv_rknown *k, uint64_t seq)
{
	uint64_t i = slot_of(k, seq);

	while (k->rk_tab[i].s_seq && k->rk_tab[i].s_seq != seq)
		i = (i + 1) & (k->rk_cap - 1);
	return &k->rk_tab[i];
}

static int grow(struct kv_rknown *k)
{
	struct slot *old = k->rk_tab;
	uint64_t ocap = k->rk_cap;

	k->rk_tab = calloc(ocap * 2, sizeof(*old));
	if (!k->rk_tab) {
		k->rk_tab = old;
		return -ENOMEM;
	}
	k->rk_cap = ocap * 2;
	for (uint64_t i = 0; i < ocap; i++)
		if (old[i].s_seq)
			*find(k, old[i].s_seq) = old[i];
	free(old);
	return 0;
}

/* Sets seq in the table; -ENOMEM when it cannot grow. */
static int tab_set(struct kv_rknown *k, uint64_t seq, uint64_t node, uint64_t rseq)
{
	struct slot *s;

	if (2 * (k->rk_n + 1) > k->rk_cap && grow(k))
		return -ENOMEM;
	s = find(k, seq);
	if (!s->s_seq)
		k->rk_n++;
	*s = (struct slot){seq, node, rseq};
	return 0;
}

/* Removes seq from the table (backward shift: no tombstones). */
static bool tab_del(struct kv_rknown *k, uint64_t seq)
{
	uint64_t mask = k->rk_cap - 1, i = find(k, seq) - k->rk_tab, j = i;

	if (!k->rk_tab[i].s_seq)
		return false;
	for (;;) {
		uint64_t home;

		j = (j + 1) & mask;
		if (!k->rk_tab[j].s_seq)
			break;
		home = slot_of(k, k->rk_tab[j].s_seq);
		/* j's entry may move to i when its home is not in (i, j] (cyclically) */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			k->rk_tab[i] = k->rk_tab[j];
			i = j;
		}
	}
	k->rk_tab[i].s_seq = 0;
	k->rk_n--;
	return true;
}

static struct kv_rknown_rec record(uint64_t seq, uint64_t node, uint64_t rseq)
{
	struct kv_rknown_rec r = {.rk_seq = seq, .rk_node = node, .rk_rseq = rseq};

	r.rk_sum = XXH3_64bits(&r, 24);
	return r;
}

static int append(struct kv_rknown *k, uint64_t seq, uint64_t node, uint64_t rseq)
{
	const struct kv_rknown_rec r = record(seq, node, rseq);
	int err = kv_write_all(k->rk_fd, &r, sizeof(r));

	if (err) { /* a partial record would end the file there: cut it off */
		if (ftruncate(k->rk_fd, (off_t)(k->rk_hlen + k->rk_recs * sizeof(r))) < 0)
			return -errno;
		return err;
	}
	k->rk_recs++;
	return 0;
}

/* Writes the file anew with what the table holds (rk_lock held). */
static int rewrite(struct kv_rknown *k)
{
	int fd = kv_file_create(k->rk_dirfd, TMP_NAME, k->rk_head, k->rk_hlen);
	struct kv_rknown_rec buf[256];
	unsigned nb = 0;
	int err = 0;

	if (fd < 0)
		return fd;
	for (uint64_t i = 0; !err && i <= k->rk_cap; i++) {
		if (nb == 256 || (i == k->rk_cap && nb)) {
			err = kv_write_all(fd, buf, nb * sizeof(*buf));
			nb = 0;
		}
		if (i < k->rk_cap && k->rk_tab[i].s_seq)
			buf[nb++] =
			    record(k->rk_tab[i].s_seq, k->rk_tab[i].s_node, k->rk_tab[i].s_rseq);
	}
	if (!err && fdatasync(fd) < 0)
		err = -errno;
	/* The rename unsynced: a power cut may keep the old file, as true, only longer. */
	if (!err && renameat(k->rk_dirfd, TMP_NAME, k->rk_dirfd, KV_RKNOWN_NAME) < 0)
		err = -errno;
	if (err) {
		close(fd);
		unlinkat(k->rk_dirfd, TMP_NAME, 0);
		return err;
	}
	close(k->rk_fd);
	k->rk_fd = fd;
	k->rk_recs = k->rk_n;
	return 0;
}

/* After an append: a file more than twice what it says is rewritten. */
static void maybe_rewrite(struct kv_rknown *k)
{
	if (k->rk_recs > 2 * k->rk_n + KV_RKNOWN_SLACK)
		rewrite(k); /* a failure leaves the longer file: only longer */
}

/* Loads the records of buf[off, len); sets *end after the last whole one. */
static int load(struct kv_rknown *k, const char *buf, uint64_t off, uint64_t len, uint64_t *end)
{
	struct kv_rknown_rec r;
	int err = 0;

	for (; !err && len - off >= sizeof(r); off += sizeof(r)) {
		memcpy(&r, buf + off, sizeof(r));
		if (r.rk_sum != XXH3_64bits(&r, 24) || !r.rk_seq)
			break;
		if (r.rk_node == KV_RKNOWN_FORGET && r.rk_rseq == KV_RKNOWN_FORGET)
			tab_del(k, r.rk_seq);
		else
			err = tab_set(k, r.rk_seq, r.rk_node, r.rk_rseq);
		k->rk_recs++;
	}
	*end = off;
	return err;
}

int kv_rknown_open(int dirfd, const char *pool, const char *ns, struct kv_rknown **out)
{
	struct kv_rknown *k;
	char *buf = NULL;
	uint64_t len = 0, end;
	int err;

	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->rk_dirfd = dirfd;
	k->rk_cap = 1024;
	k->rk_tab = calloc(k->rk_cap, sizeof(*k->rk_tab));
	err = k->rk_tab ? kv_file_head(KV_RKNOWN_MAGIC, KV_RKNOWN_VERSION, pool, ns, &k->rk_head,
				       &k->rk_hlen)
			: -ENOMEM;
	if (!err)
		err = kv_file_load(dirfd, KV_RKNOWN_NAME, &k->rk_fd, &buf, &len);
	if (err)
		goto out_free;
	if (k->rk_fd >= 0 && len >= k->rk_hlen && !memcmp(buf, k->rk_head, k->rk_hlen)) {
		err = load(k, buf, k->rk_hlen, len, &end);
		/* a torn tail goes: appends follow the last whole record */
		if (!err && end < len && ftruncate(k->rk_fd, (off_t)end) < 0)
			err = -errno;
	} else if (k->rk_fd >= 0) { /* another pool's (or nothing): begun anew */
		close(k->rk_fd);
		k->rk_fd = -1;
	}
	free(buf);
	if (err)
		goto out_close;
	if (k->rk_fd < 0) {
		k->rk_fd = kv_file_create(dirfd, KV_RKNOWN_NAME, k->rk_head, k->rk_hlen);
		if (k->rk_fd < 0) {
			err = k->rk_fd;
			goto out_free;
		}
		fsync(dirfd); /* its name: a power cut keeps the file */
	}
	pthread_mutex_init(&k->rk_lock, NULL);
	maybe_rewrite(k);
	*out = k;
	return 0;
out_close:
	close(k->rk_fd);
out_free:
	free(k->rk_tab);
	free(k->rk_head);
	free(k);
	return err;
}

bool kv_rknown_get(struct kv_rknown *k, uint64_t seq, uint64_t *node, uint64_t *rseq)
{
	const struct slot *s;
	bool found;

	if (!seq)
		return false;
	pthread_mutex_lock(&k->rk_lock);
	s = find(k, seq);
	found = s->s_seq != 0;
	if (found) {
		*node = s->s_node;
		*rseq = s->s_rseq;
	}
	pthread_mutex_unlock(&k->rk_lock);
	return found;
}

int kv_rknown_set(struct kv_rknown *k, uint64_t seq, uint64_t node, uint64_t rseq)
{
	struct slot *s;
	int err = 0;

	if (!seq)
		return -EINVAL;
	pthread_mutex_lock(&k->rk_lock);
	s = find(k, seq);
	if (!s->s_seq || s->s_node != node || s->s_rseq != rseq) {
		err = tab_set(k, seq, node, rseq);
		if (!err)
			err = append(k, seq, node, rseq);
		if (!err)
			maybe_rewrite(k);
	}
	pthread_mutex_unlock(&k->rk_lock);
	return err;
}

int kv_rknown_forget(struct kv_rknown *k, uint64_t seq)
{
	int err = 0;

	if (!seq)
		return 0;
	pthread_mutex_lock(&k->rk_lock);
	if (tab_del(k, seq))
		err = append(k, seq, KV_RKNOWN_FORGET, KV_RKNOWN_FORGET);
	if (!err)
		maybe_rewrite(k);
	pthread_mutex_unlock(&k->rk_lock);
	return err;
}

uint64_t kv_rknown_count(struct kv_rknown *k, uint64_t *max_seq)
{
	uint64_t n, max = 0;

	pthread_mutex_lock(&k->rk_lock);
	n = k->rk_n;
	for (uint64_t i = 0; max_seq && i < k->rk_cap; i++)
		if (k->rk_tab[i].s_seq > max)
			max = k->rk_tab[i].s_seq;
	pthread_mutex_unlock(&k->rk_lock);
	if (max_seq)
		*max_seq = max;
	return n;
}

int64_t kv_rknown_prune(struct kv_rknown *k, uint64_t upto, bool (*live)(void *arg, uint64_t seq),
			void *arg)
{
	int64_t gone = 0;
	int err;

	pthread_mutex_lock(&k->rk_lock);
	for (uint64_t i = 0; i < k->rk_cap;) {
		uint64_t seq = k->rk_tab[i].s_seq;

		/* a deletion may shift a later entry into slot i: look at i again */
		if (seq && seq <= upto && !live(arg, seq) && tab_del(k, seq))
			gone++;
		else
			i++;
	}
	err = gone ? rewrite(k) : 0;
	pthread_mutex_unlock(&k->rk_lock);
	return err ? err : gone;
}

void kv_rknown_close(struct kv_rknown *k)
{
	if (!k)
		return;
	close(k->rk_fd);
	pthread_mutex_destroy(&k->rk_lock);
	free(k->rk_tab);
	free(k->rk_head);
	free(k);
}
