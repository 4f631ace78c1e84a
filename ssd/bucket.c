/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket.c — the bucket set's life: kv_bucket_open (DATA_DIR/buckets
 * made and loaded, recovering what a crash left open) and kv_bucket_close
 * (spares removed, the active bucket sealed, every file closed). The
 * contract is ssd/bucket.h; what the bucket files share is
 * ssd/bucket_int.h.
 *
 * Layer: the top of the bucket files, calling bucket_scan.c (load),
 * bucket_recycle.c, bucket_seal.c and bucket_set.c.
 * Locks: none at open (nothing else has the set yet); close takes
 * bs_append_lock to seal the active bucket.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssd/bucket_int.h"

int kv_bucket_open(struct kv_bucket_set **out, int datadir_fd, const struct kv_bucket_opts *o,
		   struct kv_aio *aio)
{
	struct kv_bucket_set *bs = calloc(1, sizeof(*bs));
	int err;

	if (!bs)
		return -ENOMEM;
	bs->bs_opts = *o;
	bs->bs_aio = aio;
	bs->bs_next_id = 1;
	pthread_mutex_init(&bs->bs_lock, NULL);
	pthread_mutex_init(&bs->bs_append_lock, NULL);
	pthread_cond_init(&bs->bs_drained, NULL);
	if (mkdirat(datadir_fd, "buckets", 0700) < 0 && errno != EEXIST) {
		err = -errno;
		goto out_free;
	}
	bs->bs_dirfd = openat(datadir_fd, "buckets", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bs->bs_dirfd < 0) {
		err = -errno;
		goto out_free;
	}
	err = kv_bkt_load_all(bs);
	if (err)
		goto out_close;
	*out = bs;
	return 0;

out_close:
	for (uint32_t i = 0; i < bs->bs_n; i++)
		kv_bkt_free(bs->bs_tab[i]);
	free(bs->bs_tab);
	close(bs->bs_dirfd);
out_free:
	pthread_mutex_destroy(&bs->bs_lock);
	pthread_mutex_destroy(&bs->bs_append_lock);
	pthread_cond_destroy(&bs->bs_drained);
	free(bs);
	return err;
}

void kv_bucket_close(struct kv_bucket_set *bs)
{
	kv_bucket_recycle(bs, false);
	pthread_mutex_lock(&bs->bs_append_lock);
	if (bs->bs_active && bs->bs_active->kb_count)
		kv_bkt_seal(bs, bs->bs_active);
	pthread_mutex_unlock(&bs->bs_append_lock);
	for (uint32_t i = 0; i < bs->bs_n; i++)
		kv_bkt_free(bs->bs_tab[i]);
	free(bs->bs_tab);
	free(atomic_load(&bs->bs_stage));
	close(bs->bs_dirfd);
	pthread_mutex_destroy(&bs->bs_lock);
	pthread_mutex_destroy(&bs->bs_append_lock);
	pthread_cond_destroy(&bs->bs_drained);
	free(bs);
}
