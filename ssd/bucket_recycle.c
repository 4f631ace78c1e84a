/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_recycle.c — removing buckets and keeping their files as
 * spares: kv_bucket_drop (which bucket may go), the wait for its reads,
 * the unlink or the rename to a spare (ID.kvs) while a compaction pass
 * recycles (kv_bucket_recycle), and a spare made into a compaction output
 * (kv_bkt_recycle_create).
 *
 * Layer: above bucket_set.c; called by compaction and close.
 * Locks: kv_bucket_drop takes bs_append_lock > bs_lock (the active
 * bucket is not dropped); a drained wait sleeps on bs_drained with
 * bs_lock; renames and unlinks run with bs_lock dropped.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssd/bucket_int.h"
#include "ssd/fileio.h"

/*
 * Makes a compaction output of a spare, if one is kept: the new header and
 * a zeroed block after it are written while the file still has the
 * spare's name, then it takes the new bucket's. A crash before the rename
 * leaves a spare (a start removes it); after, a bucket whose first record
 * is that zeroed block: no records, removed at start. Neither rename is
 * synced (a sync each cost a quarter of the copy rate): a file a stop
 * catches under a bucket's name with another bucket's header is removed
 * at start (load_bucket). The old records further on are overwritten as
 * the output fills, every write followed by a zeroed block (stage_flush,
 * copy_one), and cut off by the seal.
 * Returns 0, or -ENOENT (no spare) or another error (the spare removed):
 * the caller then creates a file.
 */
int kv_bkt_recycle_create(struct kv_bucket_set *bs, struct kv_bucket **out)
{
	char from[32], to[32];
	struct kv_bucket_hdr *h;
	struct kv_bucket *b;
	struct kv_bkt_spare sp;
	int err;

	pthread_mutex_lock(&bs->bs_lock);
	if (!bs->bs_nspare) {
		pthread_mutex_unlock(&bs->bs_lock);
		return -ENOENT;
	}
	sp = bs->bs_spare[--bs->bs_nspare];
	pthread_mutex_unlock(&bs->bs_lock);
	kv_bkt_spare_name(sp.sp_id, from, sizeof(from));
	b = calloc(1, sizeof(*b));
	h = kv_bkt_aligned(2 * KV_BLOCK);
	err = b && h ? 0 : -ENOMEM;
	if (!err) {
		pthread_mutex_lock(&bs->bs_lock);
		b->kb_id = bs->bs_next_id++;
		pthread_mutex_unlock(&bs->bs_lock);
		kv_bkt_name(b->kb_id, to, sizeof(to));
		kv_bkt_header_fill(h, b->kb_id);
		err = kv_prw_all(sp.sp_fd, true, h, 2 * KV_BLOCK, 0);
	}
	if (!err && renameat(bs->bs_dirfd, from, bs->bs_dirfd, to) < 0)
		err = -errno;
	free(h);
	if (err) {
		close(sp.sp_fd);
		unlinkat(bs->bs_dirfd, from, 0);
		free(b);
		return err;
	}
	b->kb_fd = sp.sp_fd;
	b->kb_version = KV_FORMAT_VERSION;
	b->kb_end = KV_BLOCK;
	b->kb_recycled = true;
	*out = b;
	return 0;
}

/*
 * Renames the file of b (dropped, drained) a spare and keeps it open, for
 * the next output, when there is room (bs_lock not held). Returns whether
 * it took the file (b's fd is then the spare's, or the file is gone).
 */
static bool spare_keep(struct kv_bucket_set *bs, struct kv_bucket *b, const char *name)
{
	char sname[32];
	bool kept;

	kv_bkt_spare_name(b->kb_id, sname, sizeof(sname));
	if (renameat(bs->bs_dirfd, name, bs->bs_dirfd, sname) < 0)
		return false;
	pthread_mutex_lock(&bs->bs_lock);
	kept = bs->bs_recycle && bs->bs_nspare < SPARES_MAX;
	if (kept) {
		bs->bs_spare[bs->bs_nspare++] = (struct kv_bkt_spare){b->kb_fd, b->kb_id};
		b->kb_fd = -1;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	if (!kept)
		unlinkat(bs->bs_dirfd, sname, 0);
	return true;
}

/*
 * Takes b out of the table and waits until its reads are done (bs_lock
 * held; released while waiting), then removes its file, or keeps it a
 * spare while a pass recycles, and frees b with bs_lock dropped: unlinking
 * a large file takes a while, and readers of other buckets need bs_lock
 * meanwhile. Returns with bs_lock held.
 */
void kv_bkt_unlink_drained(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	char name[32];
	bool spare;
	uint32_t i;

	for (i = 0; bs->bs_tab[i] != b; i++)
		;
	memmove(&bs->bs_tab[i], &bs->bs_tab[i + 1], (bs->bs_n - i - 1) * sizeof(b));
	bs->bs_n--;
	bs->bs_used -= b->kb_end;
	while (b->kb_readers)
		pthread_cond_wait(&bs->bs_drained, &bs->bs_lock);
	/* Not an output given up, nor a damaged file; at most twice a bucket's size. */
	spare = bs->bs_recycle && bs->bs_nspare < SPARES_MAX && !b->kb_compacting &&
		!b->kb_broken && b->kb_end <= 2 * bs->bs_opts.bo_bucket_size;
	pthread_mutex_unlock(&bs->bs_lock);
	kv_bkt_name(b->kb_id, name, sizeof(name));
	if (!spare || !spare_keep(bs, b, name))
		unlinkat(bs->bs_dirfd, name, 0);
	kv_bkt_free(b);
	pthread_mutex_lock(&bs->bs_lock);
}

uint32_t kv_bucket_spare_room(struct kv_bucket_set *bs)
{
	uint32_t n;

	pthread_mutex_lock(&bs->bs_lock);
	n = bs->bs_recycle ? SPARES_MAX - bs->bs_nspare : 0;
	pthread_mutex_unlock(&bs->bs_lock);
	return n;
}

void kv_bucket_recycle(struct kv_bucket_set *bs, bool on)
{
	struct kv_bkt_spare sp[SPARES_MAX];
	uint32_t n = 0;

	pthread_mutex_lock(&bs->bs_lock);
	bs->bs_recycle = on;
	if (!on) {
		n = bs->bs_nspare;
		memcpy(sp, bs->bs_spare, n * sizeof(*sp));
		bs->bs_nspare = 0;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	for (uint32_t i = 0; i < n; i++) {
		char name[32];

		close(sp[i].sp_fd);
		kv_bkt_spare_name(sp[i].sp_id, name, sizeof(name));
		unlinkat(bs->bs_dirfd, name, 0);
	}
}

int kv_bucket_drop(struct kv_bucket_set *bs, uint64_t id)
{
	struct kv_bucket *b;
	int err = -ENOENT;

	pthread_mutex_lock(&bs->bs_append_lock);
	pthread_mutex_lock(&bs->bs_lock);
	b = kv_bkt_find(bs, id);
	/*
	 * A bucket with an unreadable header may still hold records: keep it
	 * for salvage, unless it is too short to hold any (a crash while it
	 * was being created).
	 */
	if (b && (b == bs->bs_active || b->kb_pins || b->kb_unsettled || b->kb_compacting ||
		  (b->kb_broken && b->kb_end > KV_BLOCK)))
		err = -EBUSY;
	pthread_mutex_unlock(&bs->bs_append_lock);
	if (b && err != -EBUSY) {
		kv_bkt_unlink_drained(bs, b);
		err = 0;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	return err;
}
