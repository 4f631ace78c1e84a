/* SPDX-License-Identifier: MIT */
/*
 * core/config.h — the settings in force.
 *
 * One struct holds every setting; fs/options.c fills it from the command
 * line, -o options and KVFS_* variables, and MNT/.kvfs/config shows it
 * rendered by kv_config_render(). Immutable once the daemon runs.
 */
#ifndef KVFS_CORE_CONFIG_H
#define KVFS_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kv_config {
	char *kc_data_dir;	     /* DATA_DIR as given */
	char *kc_mountpoint;	     /* MOUNTPOINT as given */
	uint64_t kc_mem_size;	     /* bytes in the DRAM staging pool */
	unsigned kc_threads;	     /* most FUSE worker threads */
	int kc_numa_node;	     /* node of the pool, -1: the node kvfs starts on */
	uint64_t kc_ssd_size;	     /* SSD quota in bytes; 0: DRAM only */
	bool kc_ssd_size_auto;	     /* kc_ssd_size = 90% of DATA_DIR's free space at start */
	uint64_t kc_bucket_size;     /* seal a bucket at this many bytes */
	uint32_t kc_bucket_keys;     /* or at this many records */
	uint64_t kc_flush_delay_ns;  /* a sealed value waits at most this long before its write */
	uint64_t kc_backpressure_ns; /* a writer waits at most this long for room in DRAM */
	bool kc_promote;	     /* reads of SSD-only values bring them into DRAM */
	uint64_t kc_readahead;	     /* bytes read ahead of a sequential reader of SSD-only bytes */
	/* compaction and cache mode (core/gc.c) */
	bool kc_gc;		       /* the compaction thread runs (--gc=on|off) */
	uint64_t kc_gc_interval_ns;    /* it looks for victims this often */
	double kc_gc_dead_ratio;       /* a bucket this dead is a victim */
	double kc_gc_high_watermark;   /* above this share of the quota: deadest first, any ratio */
	double kc_gc_low_watermark;    /* cache mode evicts down to this share of the quota */
	uint32_t kc_gc_max_buckets;    /* victims per pass */
	uint64_t kc_gc_rate;	       /* bytes/s copied below the high watermark; 0: automatic */
	bool kc_evict_lru;	       /* --evict=lru: a cache; --evict=none: ENOSPC at the quota */
	bool kc_fsck;		     /* kvfs --fsck DATA_DIR: check and exit */
	bool kc_salvage;	     /* kvfs --salvage DATA_DIR: rebuild metadata from buckets */
	bool kc_rados_gc;	     /* kvfs --rados-gc: remove orphan objects from the pool, exit */
	bool kc_foreground;
	bool kc_debug;
	bool kc_allow_other; /* -o allow_other or allow_root: others may use the mount */
	char *kc_trace; /* --trace=FILE: JSON lines per ioctl batch and key; NULL: off */
	char *kc_metrics; /* --metrics=ADDR:PORT: Prometheus over HTTP (fs/metrics_http.h); NULL: off */
	int kc_gpu;	/* --gpu=auto|cuda|off: enum kv_dev_mode (gpu/dev.h) */
	int kc_uring;	/* --uring=auto|on|off: enum kv_uring_mode (fs/uring.h): 0 auto, 1 on, 2 off */
	/* the shared tier on Ceph RADOS (rados/shared.h): on when kc_rados_pool is set */
	char *kc_rados_pool;	      /* --rados-pool; NULL: the tier is off */
	char *kc_rados_conf;	      /* NULL: KV_RADOS_CONF_DEFAULT */
	char *kc_rados_id;	      /* client id; NULL: KV_RADOS_ID_DEFAULT */
	char *kc_rados_namespace;     /* NULL: the default (empty) namespace */
	uint64_t kc_rados_timeout_ns; /* every librados wait, used in whole seconds (rounded up) */
	uint64_t kc_rados_cache_ttl_ns; /* names looked up in RADOS may be this stale */
	bool kc_rados_sync;		/* fsync also waits for the cluster */
	uint64_t kc_rados_gc_grace_ns;	/* --rados-gc spares orphans younger than this */
	uint64_t kc_rados_gc_interval_ns; /* the daemon's background sweep; 0: none */
};

#define KV_RADOS_CONF_DEFAULT "/etc/ceph/ceph.conf"
#define KV_RADOS_ID_DEFAULT   "admin"

/* Fills in the defaults: a quarter of RAM for the pool, 16 threads, node -1. */
void kv_config_defaults(struct kv_config *cfg);

/* Frees the strings the config owns. */
void kv_config_free(struct kv_config *cfg);

/*
 * Parses a size: a decimal number with an optional K, M, G or T suffix
 * (powers of 1024, either case, an optional trailing "B" or "iB").
 * Returns 0, or -EINVAL for anything else or -ERANGE on overflow.
 */
int kv_parse_size(const char *s, uint64_t *out);

/*
 * Parses a duration: a decimal number with a unit ns, us, ms, s, min or h; a bare
 * number is milliseconds. Returns 0, -EINVAL or -ERANGE.
 */
int kv_parse_duration(const char *s, uint64_t *ns);

/*
 * Renders the settings, one "key = value" per line, into a malloc'ed
 * buffer. Returns 0, or -ENOMEM.
 */
int kv_config_render(const struct kv_config *cfg, char **buf, size_t *len);

#endif
