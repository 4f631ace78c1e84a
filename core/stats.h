/* SPDX-License-Identifier: MIT */
/*
 * core/stats.h — counters and latency histograms, rendered as JSON.
 *
 * Every operation the filesystem serves is counted once when it completes:
 * calls, errors, bytes moved, and its latency in a fixed-size log-scale
 * histogram. Recording is a handful of relaxed atomic adds: no lock, no
 * allocation, safe from any thread, cheap enough for every FUSE request.
 *
 * Histogram: bucket i covers latencies in nanoseconds; values below 16 ns go
 * to bucket v, larger ones to a bucket chosen by their highest set bit and
 * the next KV_HIST_SUB_BITS bits, so each bucket is at most 1/2^SUB_BITS
 * (12.5%) wide relative to its lower edge. Percentiles report a bucket's
 * upper edge: never lower than the true value.
 *
 * Errors are counted by errno value (1..KV_STATS_MAX_ERRNO-1, larger values
 * in the last slot) and rendered with their symbolic names ("ENOSPC").
 *
 * The JSON document is rendered from a snapshot of the atomics; fields that
 * other modules own (pool use, key counts) come in through struct
 * kv_stats_gauges so this module depends on no other.
 */
#ifndef KVFS_CORE_STATS_H
#define KVFS_CORE_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KV_HIST_SUB_BITS   3
#define KV_HIST_BUCKETS	   (64 << KV_HIST_SUB_BITS)
#define KV_STATS_MAX_ERRNO 160

/* The operations counted; their JSON names are in kv_op_name(). */
enum kv_op {
	KV_OP_LOOKUP,
	KV_OP_GETATTR,
	KV_OP_SETATTR,
	KV_OP_MKDIR,
	KV_OP_RMDIR,
	KV_OP_CREATE,
	KV_OP_OPEN,
	KV_OP_READ,
	KV_OP_WRITE,
	KV_OP_FLUSH,
	KV_OP_RELEASE,
	KV_OP_FSYNC,
	KV_OP_UNLINK,
	KV_OP_RENAME,
	KV_OP_OPENDIR,
	KV_OP_READDIR,
	KV_OP_STATFS,
	KV_OP_FALLOCATE,
	KV_OP_GETXATTR,
	KV_OP_LISTXATTR,
	KV_OP_SETXATTR,
	KV_OP_IOCTL,
	KV_OP_SYMLINK,
	KV_OP_READLINK,
	KV_OP_MKNOD, /* FIFOs, sockets and refused device nodes (a regular file counts as create) */
	KV_OP_LSEEK, /* SEEK_DATA and SEEK_HOLE (the kernel answers the other whences) */
	KV_OP_OTHER, /* link and the rest: refused, still counted */
	KV_OP__COUNT
};

struct kv_hist {
	_Atomic uint64_t kh_bucket[KV_HIST_BUCKETS];
	_Atomic uint64_t kh_sum_ns; /* every sample added up: a Prometheus histogram's _sum */
};

/*
 * A copy of a histogram (kv_hist_read): its buckets, their total and the
 * sum of the samples, each loaded on its own (see core/stats.c on ordering).
 */
struct kv_hist_snap {
	uint64_t hs_bucket[KV_HIST_BUCKETS];
	uint64_t hs_count; /* the buckets added up */
	uint64_t hs_sum_ns;
};

/* The batch ioctls, counted per kind (fs/ioctl.c); JSON names in kv_ioc_name(). */
enum kv_ioc_kind { KV_IOC_LOOKUP, KV_IOC_PUT, KV_IOC_GET, KV_IOC_REMOVE, KV_IOC__COUNT };

/* The stages of a batch, timed per batch; JSON names in kv_stage_name(). */
enum kv_stage {
	KV_STAGE_VALIDATE, /* decoding and checking the request */
	KV_STAGE_INDEX,	   /* resolving names in the namespace */
	KV_STAGE_COPY_IN,  /* client memory -> pool (put) */
	KV_STAGE_COPY_OUT, /* pool or SSD buffer -> client memory (get) */
	KV_STAGE_SSD_READ, /* reading values only on the SSD (get) */
	KV_STAGE__COUNT
};

struct kv_op_stats {
	_Atomic uint64_t kos_calls;
	_Atomic uint64_t kos_errors;
	_Atomic uint64_t kos_bytes;
	struct kv_hist kos_lat;
};

/* One batch ioctl kind: batches, keys, keys that failed, value bytes, batch latency. */
struct kv_ioc_stats {
	_Atomic uint64_t kis_calls;
	_Atomic uint64_t kis_keys;
	_Atomic uint64_t kis_failed;
	_Atomic uint64_t kis_bytes;
	struct kv_hist kis_lat;
};

struct kv_stats {
	struct kv_op_stats ks_op[KV_OP__COUNT];
	_Atomic uint64_t ks_errno[KV_STATS_MAX_ERRNO];
	/* the ioctl path (a whole ioctl that fails counts in ks_op[KV_OP_IOCTL]) */
	struct kv_ioc_stats ks_ioc[KV_IOC__COUNT];
	struct kv_hist ks_stage[KV_STAGE__COUNT]; /* per batch that had the stage, its ns */
	_Atomic uint64_t ks_stage_ns[KV_STAGE__COUNT];
	_Atomic uint64_t ks_key_errno[KV_STATS_MAX_ERRNO]; /* per-key errors of batches */
	_Atomic uint64_t ks_regions, ks_layouts;	   /* gauges, set by fs/ioctl.c */
	_Atomic uint64_t ks_ssd_direct; /* gets read from the SSD straight into client memory */
	uint64_t ks_start_ns; /* immutable after kv_stats_init: CLOCK_MONOTONIC at start */
};

/* Values owned by other modules, sampled by the caller when rendering. */
struct kv_stats_gauges {
	uint64_t kg_pool_size;
	uint64_t kg_pool_used;
	uint64_t kg_pool_reserved; /* promised to unwritten extents without an SSD (core/resv.h) */
	uint64_t kg_keys;     /* regular files with a name */
	uint64_t kg_dirs;     /* directories, the root included */
	uint64_t kg_symlinks; /* symlinks with a name */
	uint64_t kg_specials; /* FIFOs and sockets with a name */
	uint64_t kg_open;     /* open file handles */
	uint64_t kg_bytes;    /* sum of the logical sizes of all keys */
	uint64_t kg_last_seq; /* the newest sequence number handed out */
	const char *kg_extra; /* more members of the top-level object ("a": {...}, ...), or NULL */

	uint64_t kg_cow_bytes; /* bytes copied because a shared extent was changed (core/obj.h) */
};

/* Zeroes every counter and records the start time. */
void kv_stats_init(struct kv_stats *st);

/* CLOCK_MONOTONIC in nanoseconds: the clock every latency is measured on. */
uint64_t kv_now_ns(void);

/* Adds one latency sample, in nanoseconds. */
void kv_hist_record(struct kv_hist *h, uint64_t ns);

/*
 * Returns the upper edge, in nanoseconds, of the bucket holding the
 * `pct`-th percentile (0 < pct <= 100) of the samples, or 0 when there are
 * none.
 */
uint64_t kv_hist_percentile(const struct kv_hist *h, double pct);

/* Total samples in the histogram. */
uint64_t kv_hist_count(const struct kv_hist *h);

/* Copies h into s (relaxed loads: no lock, never waits). */
void kv_hist_read(const struct kv_hist *h, struct kv_hist_snap *s);

/* The bucket a sample of ns goes to. */
unsigned int kv_hist_bucket_of(uint64_t ns);

/*
 * The largest sample, in ns, that bucket b holds: every sample in buckets
 * 0..b is <= kv_hist_bucket_max(b), every one in a later bucket is larger.
 * UINT64_MAX for the last bucket and past it.
 */
uint64_t kv_hist_bucket_max(unsigned int b);

/*
 * Records one completed operation that started at `start_ns` (kv_now_ns()):
 * its latency, `bytes` moved (0 when none), and `err` (0, or a negative
 * errno, counted as an error of that kind).
 */
void kv_stats_op(struct kv_stats *st, enum kv_op op, uint64_t start_ns, uint64_t bytes, int err);

/*
 * Records one batch ioctl that started at start_ns: its keys, how many
 * failed, the value bytes it moved, and ns[stage] spent in each stage.
 */
void kv_stats_ioc(struct kv_stats *st, enum kv_ioc_kind kind, uint64_t start_ns, uint64_t keys,
		  uint64_t failed, uint64_t bytes, const uint64_t ns[KV_STAGE__COUNT]);

/* Counts one key of a batch that failed with err (a negative errno). */
void kv_stats_key_error(struct kv_stats *st, int err);

const char *kv_ioc_name(enum kv_ioc_kind kind);
const char *kv_stage_name(enum kv_stage stage);

/* The op's name in JSON ("lookup", "read", ...). */
const char *kv_op_name(enum kv_op op);

/*
 * Writes s (len bytes) as the body of a JSON string (no quotes): quotes,
 * backslashes, control bytes and non-ASCII bytes escaped, so any name is
 * valid JSON.
 */
void kv_json_str(FILE *f, const char *s, size_t len);

/*
 * Renders the statistics as one JSON object, newline-terminated, into a
 * malloc'ed buffer the caller frees:
 *
 * {"uptime_s": 12.5,
 *  "ops": {"read": {"calls": N, "errors": N, "bytes": N,
 *                   "lat_ns": {"p50": N, "p90": N, "p99": N}}, ...},
 *  "errors": {"ENOSPC": N, ...},          (only kinds seen)
 *  "pool": {"size": N, "used": N, "free": N, "cow_bytes": N},
 *  "ioctl": {"regions": N, "layouts": N, "ssd_direct_keys": N,
 *            "lookup": {"calls": N, "keys": N, "failed_keys": N, "bytes": N,
 *                       "lat_ns": {"p50": N, "p90": N, "p99": N}}, (put, get, remove)
 *            "stages": {"validate": {"batches": N, "total_ns": N, "p50": N, "p90": N,
 *                                    "p99": N}, (index, copy_in, copy_out, ssd_read)
 *            "key_errors": {"ENOENT": N, ...}},
 *  "namespace": {"keys": N, "dirs": N, "symlinks": N, "fifos_sockets": N,
 *                "open_handles": N, "bytes": N, "last_seq": N},
 *  ...kg_extra}
 *
 * Every op appears in "ops", even with zero calls.
 * Returns 0 and sets *buf and *len, or -ENOMEM.
 */
int kv_stats_render(const struct kv_stats *st, const struct kv_stats_gauges *g, char **buf,
		    size_t *len);

#endif
