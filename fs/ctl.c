/* SPDX-License-Identifier: MIT */
/*
 * fs/ctl.c — MNT/.kvfs, the control directory.
 *
 * A read-only directory at the root, under a name the store reserves, with
 * read-only files whose contents are rendered when they are opened: a
 * reader sees one consistent snapshot per open. They are opened with
 * direct_io and report size 0, so every read reaches the daemon and `cat`
 * reads to the end whatever the length.
 */
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/gc.h"
#include "core/obj.h"
#include "rados/shared.h"
#include "fs/metrics.h"
#include "fs/uring.h"
#include "gpu/dev.h"

const char *const kv_ctl_names[] = {"stats", "config", "ctl", "metrics", NULL};

/* st_ino of control nodes: far from the store's inode numbers. */
#define CTL_ST_INO_BASE (1ull << 62)

void kv_ctl_entry(const struct kv_fs *fs, fuse_ino_t ino, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->attr_timeout = KV_FS_TIMEOUT;
	e->entry_timeout = KV_FS_TIMEOUT;
	e->attr.st_ino = CTL_ST_INO_BASE + ino;
	e->attr.st_uid = getuid();
	e->attr.st_gid = getgid();
	e->attr.st_atim = e->attr.st_mtim = e->attr.st_ctim = fs->kf_mounted;
	if (ino == KV_CTL_DIR) {
		e->attr.st_mode = S_IFDIR | 0555;
		e->attr.st_nlink = 2;
	} else {
		e->attr.st_mode = S_IFREG | (ino == KV_CTL_CMD ? 0200 : 0444);
		e->attr.st_nlink = 1;
	}
}

fuse_ino_t kv_ctl_lookup(const char *name)
{
	for (int i = 0; kv_ctl_names[i]; i++)
		if (!strcmp(name, kv_ctl_names[i]))
			return KV_CTL_STATS + i;
	return 0;
}

/* Appends the "gc" section to the extra stats (only with an SSD tier). */
static int add_gc_stats(struct kv_fs *fs, const struct kv_store_usage *u, char **extra)
{
	uint64_t told = 0, untold = 0;
	struct kv_gc_stats g;
	char *n;

	if (!*extra || !kv_store_gc_stats(fs->kf_store, &g))
		return 0;
	if (fs->kf_notify)
		kv_fs_notify_counts(fs->kf_notify, &told, &untold);
	if (asprintf(&n,
		     "%s,\n \"gc\": {\"passes\": %" PRIu64 ", \"buckets_compacted\": %" PRIu64
		     ", \"buckets_dropped\": %" PRIu64 ", \"buckets_recycled\": %" PRIu64
		     ", \"bytes_reclaimed\": %" PRIu64 ", \"bytes_rewritten\": %" PRIu64
		     ", \"bytes_copied\": %" PRIu64
		     ", \"write_amplification\": %.3f, \"revalidation_skips\": %" PRIu64
		     ", \"csum_failures\": %" PRIu64 ", \"seconds\": %.3f, \"room_waits\": %" PRIu64
		     ", \"evicted_keys\": %" PRIu64 ", \"evicted_bytes\": %" PRIu64
		     ", \"evict_invalidations\": %" PRIu64
		     ", \"evict_invalidations_dropped\": %" PRIu64 "}",
		     *extra, g.gs_passes, g.gs_compacted, g.gs_dropped, g.gs_recycled,
		     g.gs_reclaimed, g.gs_rewritten, g.gs_copied,
		     u->ku_ssd_written
			 ? (double)(u->ku_ssd_written + g.gs_copied) / (double)u->ku_ssd_written
			 : 1.0,
		     g.gs_skips, g.gs_csum_failures, g.gs_ns / 1e9, g.gs_room_waits,
		     g.gs_evicted_keys, g.gs_evicted_bytes, told, untold) < 0)
		return -ENOMEM;
	free(*extra);
	*extra = n;
	return 0;
}

/* Appends the "rados" section to the extra stats (only with the shared tier). */
static int add_rados_stats(struct kv_fs *fs, char **extra)
{
	struct kv_shared_stats s;
	char *sec, *n;
	int err;

	if (!fs->kf_shared)
		return 0;
	kv_shared_stats(fs->kf_shared, &s);
	err = kv_shared_render(kv_shared_pool(fs->kf_shared), kv_shared_namespace(fs->kf_shared),
			       &s, &sec);
	if (err)
		return err;
	if (asprintf(&n, "%s%s%s", *extra ? *extra : "", *extra ? ",\n " : "", sec) < 0) {
		free(sec);
		return -ENOMEM;
	}
	free(sec);
	free(*extra);
	*extra = n;
	return 0;
}

/* Appends the "fuse" section: which transport serves the requests, and how many each took. */
static int add_uring_stats(struct kv_fs *fs, char **extra)
{
	struct kv_uring_stats us;
	char *n, *q = NULL;
	size_t qlen = 0;
	FILE *f = open_memstream(&q, &qlen);

	if (!f)
		return -ENOMEM;
	kv_uring_stats(fs->kf_uring, &us);
	for (unsigned i = 0; us.us_active && i < us.us_queues && i < KV_URING_STATS_QUEUES; i++)
		fprintf(f, "%s%" PRIu64, i ? ", " : "", us.us_q_reqs[i]);
	if (fclose(f))
		return -ENOMEM;
	if (asprintf(&n,
		     "%s%s\"fuse\": {\"transport\": \"%s\", \"uring_queues\": %u, "
		     "\"uring_depth\": %u, \"uring_requests\": %" PRIu64
		     ", \"uring_queue_requests\": [%s], \"dev_requests\": %" PRIu64
		     ", \"dev_interrupts\": %" PRIu64 ", \"uring_refused\": %" PRIu64
		     ", \"uring_inplace_replies\": %" PRIu64 "}",
		     *extra ? *extra : "", *extra ? ",\n " : "",
		     us.us_active ? "io_uring" : "dev_fuse", us.us_active ? us.us_queues : 0,
		     us.us_active ? us.us_depth : 0, us.us_ring_reqs, q, us.us_dev_reqs,
		     us.us_interrupts, us.us_refused, us.us_inplace) < 0) {
		free(q);
		return -ENOMEM;
	}
	free(q);
	free(*extra);
	*extra = n;
	return 0;
}

static int render_stats(struct kv_fs *fs, char **buf, size_t *len)
{
	struct kv_pool *pool = kv_store_pool(fs->kf_store);
	struct kv_store_usage u;
	struct kv_stats_gauges g;
	char *extra = NULL;
	int err;

	kv_store_usage(fs->kf_store, &u);
	if (u.ku_ssd &&
	    asprintf(
		&extra,
		"\"ssd\": {\"used\": %" PRIu64 ", \"cap\": %" PRIu64 ", \"dead\": %" PRIu64
		", \"reserved\": %" PRIu64 ", \"buckets\": %" PRIu64 ", \"bytes_written\": %" PRIu64
		", \"bytes_read\": %" PRIu64 ", \"checksum_errors\": %" PRIu64 "},\n"
		" \"tier\": {\"offload_backlog_keys\": %" PRIu64
		", \"offload_backlog_bytes\": %" PRIu64 ", \"offload_errors\": %" PRIu64
		", \"dram_hits\": %" PRIu64 ", \"ssd_hits\": %" PRIu64 ", \"evictions\": %" PRIu64
		", \"promotions\": %" PRIu64 ", \"spilled_bytes\": %" PRIu64
		", \"shared_bytes\": %" PRIu64 ", \"prefetch_bytes\": %" PRIu64
		", \"prefetch_hits\": %" PRIu64 ", \"prefetch_unused_bytes\": %" PRIu64 "},\n"
		" \"recovery\": {\"seconds\": %.3f, \"keys\": %" PRIu64
		", \"open_buckets_cut\": %" PRIu64 ", \"keys_lost\": %" PRIu64 "}",
		u.ku_ssd_used, u.ku_ssd_cap, u.ku_ssd_dead, u.ku_ssd_reserved, u.ku_buckets,
		u.ku_ssd_written, u.ku_ssd_read, u.ku_csum_errors, u.ku_backlog_keys,
		u.ku_backlog_bytes, u.ku_offload_errors, u.ku_dram_hits, u.ku_ssd_hits,
		u.ku_evictions, u.ku_promotions, u.ku_spilled, u.ku_shared, u.ku_prefetch_bytes,
		u.ku_prefetch_hits, u.ku_prefetch_unused, u.ku_recovery_ns / 1e9,
		u.ku_recovered_keys, u.ku_torn_buckets, u.ku_lost_keys) < 0)
		return -ENOMEM;
	err = add_gc_stats(fs, &u, &extra);
	if (!err)
		err = add_rados_stats(fs, &extra);
	if (!err)
		err = add_uring_stats(fs, &extra);
	if (err) {
		free(extra);
		return err;
	}
	g = (struct kv_stats_gauges){
	    .kg_pool_size = kv_pool_size(pool),
	    .kg_pool_used = kv_pool_used(pool),
	    .kg_pool_reserved = kv_pool_reserved(pool),
	    .kg_cow_bytes = kv_obj_cow_bytes(),
	    .kg_keys = u.ku_keys,
	    .kg_dirs = u.ku_dirs,
	    .kg_symlinks = u.ku_symlinks,
	    .kg_specials = u.ku_specials,
	    .kg_open = u.ku_open,
	    .kg_bytes = u.ku_bytes,
	    .kg_last_seq = u.ku_last_seq,
	    .kg_extra = extra,
	};
	err = kv_stats_render(&fs->kf_stats, &g, buf, len);
	free(extra);
	return err;
}

static int render_config(struct kv_fs *fs, char **buf, size_t *len)
{
	struct kv_uring_stats us;
	char *cfg, *out;
	size_t cfg_len;
	int n, err = kv_config_render(fs->kf_cfg, &cfg, &cfg_len);

	if (err)
		return err;
	kv_uring_stats(fs->kf_uring, &us);
	n = asprintf(&out,
		     "%sgpu_backend = %s\ngpu_devices = %d\nnuma_node_bound = %d\n"
		     "fuse_transport = %s\nfuse_uring_queues = %u\nfuse_uring_depth = %u\n",
		     cfg, kv_dev_backend(), kv_dev_count(),
		     kv_pool_node(kv_store_pool(fs->kf_store)),
		     us.us_active ? "io_uring" : "/dev/fuse", us.us_active ? us.us_queues : 0,
		     us.us_active ? us.us_depth : 0);
	free(cfg);
	if (n < 0)
		return -ENOMEM;
	*buf = out;
	*len = (size_t)n;
	return 0;
}

int kv_ctl_render(struct kv_fs *fs, fuse_ino_t ino, char **buf, size_t *len)
{
	switch (ino) {
	case KV_CTL_STATS:
		return render_stats(fs, buf, len);
	case KV_CTL_CONFIG:
		return render_config(fs, buf, len);
	case KV_CTL_METRICS:
		return kv_fs_metrics_render(fs, buf, len);
	default:
		return -EISDIR;
	}
}

int kv_ctl_cmd_open(struct kv_fs *fs, uid_t uid, int flags)
{
	if ((flags & O_ACCMODE) != O_WRONLY)
		return -EACCES;
	return uid == 0 || uid == getuid() ? 0 : -EACCES;
}

int kv_ctl_cmd(struct kv_fs *fs, const char *buf, size_t len)
{
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	if (len == 2 && !memcmp(buf, "gc", 2))
		return kv_store_gc(fs->kf_store);
	return -EINVAL;
}
