/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_scan.c — walking a bucket's records in file order, and the
 * two jobs that do: loading the set at open (a sealed bucket by its
 * trailer; one a crash left open by walking its records, cut at a torn
 * tail and sealed; spares and foreign files removed) and kv_bucket_scan
 * (--fsck, --salvage).
 *
 * Layer: above bucket_set.c, bucket_seal.c and bucket_io.c; called by
 * bucket.c (open) and by the store's fsck and salvage.
 * Locks: at open nothing else holds the set; kv_bucket_scan takes bs_lock
 * only to pick each bucket from the table, and walks it unlocked (a
 * sealed bucket does not change).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssd/bucket_int.h"
#include "ssd/fileio.h"

/* Values are read from disk in pieces of at most this many bytes. */
#define READ_PIECE (4u << 20)

/* Loads a sealed bucket's trailer. Returns 0, or -EIO when there is none. */
static int load_trailer(struct kv_bucket_set *bs, struct kv_bucket *b, uint64_t size)
{
	struct kv_bucket_trailer *t;
	int err;

	if (size < 2 * KV_BLOCK || size % KV_BLOCK)
		return -EIO;
	t = kv_bkt_aligned(KV_BLOCK);
	if (!t)
		return -ENOMEM;
	err = kv_prw_all(b->kb_fd, false, t, KV_BLOCK, size - KV_BLOCK);
	if (!err && !kv_bkt_trailer_ok(t, b->kb_id, size))
		err = -EIO;
	if (!err) {
		b->kb_end = size;
		b->kb_rec_end = t->bt_index_off;
		b->kb_count = t->bt_count;
		b->kb_sealed = true;
	}
	free(t);
	return err;
}

/*
 * Checks every chunk of the value of the record at loc in b (head: its
 * checked head). With `out`, also returns the value (malloc'ed, kl_len
 * bytes, at least one). Returns 0, -EIO or -ENOMEM.
 */
static int check_value(struct kv_bucket_set *bs, struct kv_bucket *b, struct kv_bkt_rwin *w,
		       const struct kv_loc *loc, const void *head, char **out)
{
	uint64_t *csums = kv_bkt_head_csums(head);
	char *value = NULL;
	int err = csums ? 0 : -ENOMEM;

	if (!err && out) {
		value = malloc(loc->kl_len ? loc->kl_len : 1);
		err = value ? 0 : -ENOMEM;
	}
	for (uint64_t v = 0; !err && v < loc->kl_len; v += READ_PIECE) {
		void *buf;
		char *data;
		uint64_t n;

		err = kv_bkt_read_value(bs, b, w, loc, csums, v, READ_PIECE, &buf, &data, &n);
		if (!err && value)
			memcpy(value + v, data, n);
		if (!err)
			kv_bucket_read_free(buf);
	}
	free(csums);
	if (err)
		free(value);
	else if (out)
		*out = value;
	return err;
}

/*
 * Walks the records of b from offset 4096 up to `limit`, checking heads
 * (and values when check_values) and calling fn for each good record. A bad
 * head ends the walk (nothing after it can be found); a bad value ends it
 * too when stop_at_bad (recovering an open bucket: a torn tail), else the
 * record is counted in *bad and skipped. Sets *end to the end of the last
 * record walked over.
 */
static int walk(struct kv_bucket_set *bs, struct kv_bucket *b, uint64_t limit, bool check_values,
		bool stop_at_bad, int (*fn)(const struct kv_bucket_rec *r, void *arg), void *arg,
		uint64_t *end, uint64_t *bad)
{
	/* Without its buffer (no memory), every read is its own. */
	struct kv_bkt_rwin w = {.rw_buf = kv_bkt_aligned_buf(RWIN_SIZE, false),
				.rw_limit = limit / KV_BLOCK * KV_BLOCK};
	uint64_t off = KV_BLOCK;
	int ret = 0;

	while (!ret && off + KV_BLOCK <= limit) {
		struct kv_rec_head h;
		struct kv_bucket_rec r;
		char *manifest = NULL;
		void *head;
		size_t slen;
		int err;

		if (kv_bkt_read_head(bs, b, &w, off, &head))
			break;
		slen = kv_bkt_head_get(head, &h);
		r.br_loc = (struct kv_loc){.kl_bucket = b->kb_id,
					   .kl_off = off,
					   .kl_len = h.rh_value_len,
					   .kl_seq = h.rh_seq,
					   .kl_head_len = h.rh_head_len,
					   .kl_index = h.rh_ext_index};
		r.br_key = (const char *)head + slen;
		r.br_key_len = h.rh_key_len;
		r.br_flags = h.rh_flags;
		err = off + kv_loc_size(&r.br_loc) > limit ? -EIO : 0;
		/* A manifest is small, and what salvage rebuilds a value from: always read. */
		if (!err && h.rh_flags == KV_REC_MANIFEST)
			err = check_value(bs, b, &w, &r.br_loc, head, &manifest);
		else if (!err && check_values)
			err = check_value(bs, b, &w, &r.br_loc, head, NULL);
		r.br_value = manifest;
		if (err && (stop_at_bad || off + kv_loc_size(&r.br_loc) > limit)) {
			free(head);
			break;
		}
		if (err)
			(*bad)++;
		else if (fn)
			ret = fn(&r, arg);
		free(manifest);
		free(head);
		off += kv_loc_size(&r.br_loc);
	}
	free(w.rw_buf);
	*end = off;
	return ret;
}

/* Index callback: rebuilds the in-memory index of a bucket being recovered. */
static int walk_index(const struct kv_bucket_rec *r, void *arg)
{
	struct kv_bucket *b = arg;

	b->kb_count++;
	return kv_bkt_idx_add(b, &r->br_loc, r->br_flags, r->br_key, r->br_key_len);
}

/* Loads one bucket file: sealed by its trailer; open by a scan, then sealed. */
static int load_bucket(struct kv_bucket_set *bs, const char *name, uint64_t id)
{
	struct kv_bucket_hdr *h = NULL;
	struct kv_bucket *b;
	struct stat st;
	uint64_t end;
	int err;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->kb_id = id;
	b->kb_fd = openat(bs->bs_dirfd, name, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (b->kb_fd < 0 || fstat(b->kb_fd, &st) < 0) {
		err = -errno;
		goto out_free;
	}
	h = kv_bkt_aligned(KV_BLOCK);
	err = h ? kv_prw_all(b->kb_fd, false, h, KV_BLOCK, 0) : -ENOMEM;
	if (err == -ENOMEM)
		goto out_close;
	if (!err && h->bh_id != id && kv_bkt_header_ok(h)) {
		/*
		 * Another bucket's whole header: a spare caught between its two
		 * names by a stop (kv_bkt_recycle_create; the renames are not synced).
		 * It was dropped, or never committed: nothing refers to it.
		 */
		fprintf(stderr,
			"kvfs: %s holds bucket %" PRIx64
			"'s header: a recycled file a stop caught; removed\n",
			name, h->bh_id);
		close(b->kb_fd);
		unlinkat(bs->bs_dirfd, name, 0);
		free(h);
		free(b);
		return 0;
	}
	b->kb_version = h->bh_version;
	if (err || h->bh_magic != KV_BUCKET_MAGIC || h->bh_id != id ||
	    (h->bh_version != 1 && h->bh_version != 2)) {
		b->kb_broken = true;
		b->kb_sealed = true;
		b->kb_end = (uint64_t)st.st_size;
	} else if (load_trailer(bs, b, (uint64_t)st.st_size)) {
		/* Left open by a crash: keep the good records, seal there. */
		uint64_t bad = 0;

		b->kb_count = 0;
		walk(bs, b, (uint64_t)st.st_size, true, true, walk_index, b, &end, &bad);
		atomic_fetch_add(&bs->bs_truncated, 1);
		b->kb_end = end;
		bs->bs_used += end; /* sealing adds the index block and trailer */
		err = kv_bkt_seal(bs, b);
		if (err) {
			bs->bs_used -= end;
			goto out_free_idx;
		}
	} else {
		bs->bs_used += b->kb_end;
	}
	if (b->kb_broken)
		bs->bs_used += b->kb_end;
	free(h);
	return kv_bkt_insert(bs, b);

out_free_idx:
	for (uint64_t i = 0; i < b->kb_nidx; i++)
		free(b->kb_idx[i].ir_key);
	free(b->kb_idx);
out_close:
	close(b->kb_fd);
out_free:
	free(h);
	free(b);
	return err;
}

int kv_bkt_load_all(struct kv_bucket_set *bs)
{
	/* A descriptor of its own: a dup would share (and move) the offset. */
	DIR *d = fdopendir(openat(bs->bs_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	struct dirent *de;
	int err = 0;

	if (!d)
		return -errno;
	while (!err && (de = readdir(d))) {
		char *end;
		uint64_t id = strtoull(de->d_name, &end, 16);

		if (end == de->d_name + 16 && strcmp(end, ".kvs") == 0) {
			unlinkat(bs->bs_dirfd, de->d_name, 0); /* a spare left by a stop */
			continue;
		}
		if (end != de->d_name + 16 || strcmp(end, ".kvb") != 0 || id == 0)
			continue;
		err = load_bucket(bs, de->d_name, id);
	}
	closedir(d);
	return err;
}

int kv_bucket_scan(struct kv_bucket_set *bs, bool check_values,
		   int (*fn)(const struct kv_bucket_rec *r, void *arg), void *arg, uint64_t *bad)
{
	int ret = 0;

	*bad = 0;
	for (uint32_t i = 0; !ret; i++) {
		struct kv_bucket *b;
		uint64_t end;

		pthread_mutex_lock(&bs->bs_lock);
		b = i < bs->bs_n ? bs->bs_tab[i] : NULL;
		pthread_mutex_unlock(&bs->bs_lock);
		if (!b)
			break;
		if (b->kb_broken || !b->kb_sealed) {
			*bad += b->kb_broken;
			continue;
		}
		ret = walk(bs, b, b->kb_rec_end, check_values, false, fn, arg, &end, bad);
		/* A bad head hides the rest of the bucket's records. */
		if (!ret && end != b->kb_rec_end)
			(*bad)++;
	}
	return ret;
}
