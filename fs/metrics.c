/* SPDX-License-Identifier: MIT */
/*
 * fs/metrics.c — the figures of MNT/.kvfs/stats in the Prometheus text
 * exposition format (version 0.0.4), for MNT/.kvfs/metrics and the HTTP
 * endpoint alike (fs/metrics.h).
 *
 * The format, as far as it matters here: every family is one block, a
 * "# HELP name text" line, a "# TYPE name counter|gauge|histogram|summary"
 * line, then its samples, "name{label="value",...} number", never
 * interleaved with another family's. Label values escape \, " and newline.
 * A histogram's samples are name_bucket{...,le="B"} (the samples <= B, so
 * cumulative, ending with le="+Inf"), name_sum and name_count; a summary's
 * are name{quantile="Q"}. Numbers are printed from integers (seconds as
 * "S.NNNNNNNNN" with the trailing zeros cut), so no locale's decimal comma
 * can get in and a bucket bound is exactly the nanosecond edge it stands for.
 *
 * Families that a tier owns appear only when the tier is there, as their
 * sections in .kvfs/stats do: kvfs_ssd_*, the offload, hit, read-ahead and
 * recovery families and kvfs_gc_* with an SSD tier; kvfs_shared_* with the
 * shared tier on RADOS.
 *
 * Consistency: each counter is read once, by itself (core/stats.c,
 * "Memory ordering"); within one histogram the buckets, +Inf and _count
 * come from one copy, so they agree with each other, and _sum may be a few
 * samples ahead of them.
 */
#include "fs/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gc.h"
#include "core/obj.h"
#include "rados/shared.h"
#include "fs/fs.h"
#include "fs/metrics_http.h"
#include "gpu/dev.h"

#define NS_PER_S UINT64_C(1000000000)

/* Histogram bounds: bucket edges whose next value is 2^k or 3 * 2^(k-1), 2^10 .. 2^35 ns. */
#define LE_LOW	(UINT64_C(1) << 10)
#define LE_HIGH (UINT64_C(1) << 35)
#define LE_MAX	64

/* The `le` bounds, ns: the largest value of chosen buckets of core/stats.h. */
struct le_set {
	uint64_t ls_ns[LE_MAX];
	unsigned int ls_n;
};

static bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/*
 * Takes as bounds the bucket edges e with e + 1 a power of two or three
 * times one, in [LE_LOW, LE_HIGH]: two a doubling, each one the top of a
 * real bucket, so a cumulative count is exact.
 */
static void le_set_init(struct le_set *ls)
{
	ls->ls_n = 0;
	for (unsigned int b = 0; b < KV_HIST_BUCKETS && ls->ls_n < LE_MAX; b++) {
		uint64_t e = kv_hist_bucket_max(b), x = e + 1;

		if (e == UINT64_MAX || x > LE_HIGH)
			break;
		if (x >= LE_LOW && (is_pow2(x) || (x % 3 == 0 && is_pow2(x / 3))))
			ls->ls_ns[ls->ls_n++] = e;
	}
}

/* Writes ns as decimal seconds: "0.000001023", "12", "1.5". */
static void put_seconds(FILE *f, uint64_t ns)
{
	char frac[16];
	int n;

	n = snprintf(frac, sizeof(frac), "%09" PRIu64, ns % NS_PER_S);
	while (n > 0 && frac[n - 1] == '0')
		frac[--n] = '\0';
	fprintf(f, "%" PRIu64 "%s%s", ns / NS_PER_S, n ? "." : "", frac);
}

/* Writes s as a label value's body: \, " and newline escaped. */
static void put_label(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample without labels. */
static void value(FILE *f, const char *name, uint64_t v)
{
	fprintf(f, "%s %" PRIu64 "\n", name, v);
}

/* A family of one sample without labels. */
static void single(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
	family(f, name, type, help);
	value(f, name, v);
}

/* One sample with one label. */
static void value1(FILE *f, const char *name, const char *label, const char *lv, uint64_t v)
{
	fprintf(f, "%s{%s=\"", name, label);
	put_label(f, lv);
	fprintf(f, "\"} %" PRIu64 "\n", v);
}

/*
 * The samples of one histogram; labels is the rendered label list without
 * braces ('path="fuse",op="read"').
 */
static void histogram(FILE *f, const struct le_set *ls, const char *name, const char *labels,
		      const struct kv_hist *h)
{
	struct kv_hist_snap s;
	uint64_t cum = 0;
	unsigned int b = 0;

	kv_hist_read(h, &s);
	for (unsigned int i = 0; i < ls->ls_n; i++) {
		unsigned int last = kv_hist_bucket_of(ls->ls_ns[i]);

		while (b <= last)
			cum += s.hs_bucket[b++];
		fprintf(f, "%s_bucket{%s,le=\"", name, labels);
		put_seconds(f, ls->ls_ns[i]);
		fprintf(f, "\"} %" PRIu64 "\n", cum);
	}
	fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n%s_sum{%s} ", name, labels, s.hs_count,
		name, labels);
	put_seconds(f, s.hs_sum_ns);
	fprintf(f, "\n%s_count{%s} %" PRIu64 "\n", name, labels, s.hs_count);
}

static uint64_t load(const _Atomic uint64_t *a)
{
	return atomic_load_explicit(a, memory_order_relaxed);
}

/* What the other modules own, sampled once per rendering (fs/metrics.h on the locks). */
struct sample {
	struct kv_store_usage sm_u;
	bool sm_gc; /* sm_gc_stats filled: an SSD tier */
	struct kv_gc_stats sm_gc_stats;
	uint64_t sm_told, sm_untold;  /* evicted names told to the kernel, dropped */
	struct kv_shared_stats sm_sh; /* when fs->kf_shared */
	uint64_t sm_pool_size, sm_pool_used, sm_pool_reserved, sm_cow;
	uint64_t sm_pinned, sm_pin_target;
	int sm_drv, sm_rt;
};

static void take_sample(struct kv_fs *fs, struct sample *sm)
{
	struct kv_pool *pool = kv_store_pool(fs->kf_store);

	memset(sm, 0, sizeof(*sm));
	kv_store_usage(fs->kf_store, &sm->sm_u);
	sm->sm_gc = sm->sm_u.ku_ssd && kv_store_gc_stats(fs->kf_store, &sm->sm_gc_stats);
	if (fs->kf_notify)
		kv_fs_notify_counts(fs->kf_notify, &sm->sm_told, &sm->sm_untold);
	if (fs->kf_shared)
		kv_shared_stats(fs->kf_shared, &sm->sm_sh);
	sm->sm_pool_size = kv_pool_size(pool);
	sm->sm_pool_used = kv_pool_used(pool);
	sm->sm_pool_reserved = kv_pool_reserved(pool);
	sm->sm_cow = kv_obj_cow_bytes();
	kv_dev_pin_progress(&sm->sm_pinned, &sm->sm_pin_target);
	kv_dev_versions(&sm->sm_drv, &sm->sm_rt);
}

/* kvfs_errors_total's samples of one path: the errno kinds seen, by name. */
static void errno_samples(FILE *f, const char *path, const _Atomic uint64_t *slots)
{
	for (unsigned int e = 1; e < KV_STATS_MAX_ERRNO; e++) {
		uint64_t n = load(&slots[e]);
		const char *name = e == KV_STATS_MAX_ERRNO - 1 ? "other" : strerrorname_np((int)e);

		if (!n)
			continue;
		fprintf(f, "kvfs_errors_total{path=\"%s\",errno=\"", path);
		if (name)
			fputs(name, f);
		else
			fprintf(f, "errno_%u", e);
		fprintf(f, "\"} %" PRIu64 "\n", n);
	}
}

/* FUSE requests and ioctl batches: kvfs_request*, kvfs_errors_total, kvfs_ioctl_*. */
static void render_requests(FILE *f, const struct kv_stats *st, const struct le_set *ls)
{
	char labels[96];

	family(f, "kvfs_requests_total", "counter",
	       "Requests served: FUSE requests by op (path=\"fuse\"), batch ioctls by kind "
	       "(path=\"ioctl\").");
	for (int op = 0; op < KV_OP__COUNT; op++)
		fprintf(f, "kvfs_requests_total{path=\"fuse\",op=\"%s\"} %" PRIu64 "\n",
			kv_op_name((enum kv_op)op), load(&st->ks_op[op].kos_calls));
	for (int k = 0; k < KV_IOC__COUNT; k++)
		fprintf(f, "kvfs_requests_total{path=\"ioctl\",op=\"%s\"} %" PRIu64 "\n",
			kv_ioc_name((enum kv_ioc_kind)k), load(&st->ks_ioc[k].kis_calls));

	family(f, "kvfs_request_errors_total", "counter",
	       "FUSE requests answered with an error, by op (a whole ioctl that fails counts as "
	       "op=\"ioctl\").");
	for (int op = 0; op < KV_OP__COUNT; op++)
		fprintf(f, "kvfs_request_errors_total{path=\"fuse\",op=\"%s\"} %" PRIu64 "\n",
			kv_op_name((enum kv_op)op), load(&st->ks_op[op].kos_errors));

	family(f, "kvfs_request_bytes_total", "counter",
	       "Bytes moved: read and written through FUSE, value bytes of batch ioctls.");
	for (int op = 0; op < KV_OP__COUNT; op++)
		fprintf(f, "kvfs_request_bytes_total{path=\"fuse\",op=\"%s\"} %" PRIu64 "\n",
			kv_op_name((enum kv_op)op), load(&st->ks_op[op].kos_bytes));
	for (int k = 0; k < KV_IOC__COUNT; k++)
		fprintf(f, "kvfs_request_bytes_total{path=\"ioctl\",op=\"%s\"} %" PRIu64 "\n",
			kv_ioc_name((enum kv_ioc_kind)k), load(&st->ks_ioc[k].kis_bytes));

	family(f, "kvfs_request_duration_seconds", "histogram",
	       "Time from a request's arrival to its reply (a batch ioctl: the whole batch).");
	for (int op = 0; op < KV_OP__COUNT; op++) {
		snprintf(labels, sizeof(labels), "path=\"fuse\",op=\"%s\"",
			 kv_op_name((enum kv_op)op));
		histogram(f, ls, "kvfs_request_duration_seconds", labels, &st->ks_op[op].kos_lat);
	}
	for (int k = 0; k < KV_IOC__COUNT; k++) {
		snprintf(labels, sizeof(labels), "path=\"ioctl\",op=\"%s\"",
			 kv_ioc_name((enum kv_ioc_kind)k));
		histogram(f, ls, "kvfs_request_duration_seconds", labels, &st->ks_ioc[k].kis_lat);
	}

	family(f, "kvfs_errors_total", "counter",
	       "Errors by kind: of FUSE requests (path=\"fuse\") and of single keys of batch "
	       "ioctls (path=\"ioctl\"); only kinds seen.");
	errno_samples(f, "fuse", st->ks_errno);
	errno_samples(f, "ioctl", st->ks_key_errno);

	family(f, "kvfs_ioctl_keys_total", "counter", "Keys named by batch ioctls, by kind.");
	for (int k = 0; k < KV_IOC__COUNT; k++)
		value1(f, "kvfs_ioctl_keys_total", "op", kv_ioc_name((enum kv_ioc_kind)k),
		       load(&st->ks_ioc[k].kis_keys));
	family(f, "kvfs_ioctl_failed_keys_total", "counter",
	       "Keys of batch ioctls that failed, by kind.");
	for (int k = 0; k < KV_IOC__COUNT; k++)
		value1(f, "kvfs_ioctl_failed_keys_total", "op", kv_ioc_name((enum kv_ioc_kind)k),
		       load(&st->ks_ioc[k].kis_failed));
	family(f, "kvfs_ioctl_stage_duration_seconds", "histogram",
	       "Time a batch ioctl spent in each stage, per batch that had the stage.");
	for (int s = 0; s < KV_STAGE__COUNT; s++) {
		snprintf(labels, sizeof(labels), "stage=\"%s\"", kv_stage_name((enum kv_stage)s));
		histogram(f, ls, "kvfs_ioctl_stage_duration_seconds", labels, &st->ks_stage[s]);
	}
	single(f, "kvfs_ioctl_regions", "gauge", "Client memory regions registered.",
	       load(&st->ks_regions));
	single(f, "kvfs_ioctl_layouts", "gauge", "Layouts registered.", load(&st->ks_layouts));
	single(f, "kvfs_ioctl_ssd_direct_keys_total", "counter",
	       "Keys batch gets read from the SSD straight into client memory.",
	       load(&st->ks_ssd_direct));
}

/* The device backend, the pool and the namespace: always there. */
static void render_memory(FILE *f, const struct sample *sm)
{
	const struct kv_store_usage *u = &sm->sm_u;

	family(f, "kvfs_gpu_info", "gauge",
	       "The device backend in force (backend), the one built in (built) and the CUDA "
	       "driver and runtime versions; always 1.");
	fprintf(f,
		"kvfs_gpu_info{backend=\"%s\",built=\"%s\",driver_version=\"%d\","
		"runtime_version=\"%d\"} 1\n",
		kv_dev_backend(), kv_dev_built(), sm->sm_drv, sm->sm_rt);
	single(f, "kvfs_gpu_devices", "gauge", "Usable devices.",
	       (uint64_t)(kv_dev_count() > 0 ? kv_dev_count() : 0));
	single(f, "kvfs_pool_pinned_bytes", "gauge",
	       "Bytes of the DRAM pool pinned for the device.", sm->sm_pinned);
	single(f, "kvfs_pool_pin_target_bytes", "gauge", "Bytes of the DRAM pool to be pinned.",
	       sm->sm_pin_target);
	single(f, "kvfs_pool_size_bytes", "gauge", "Size of the DRAM staging pool.",
	       sm->sm_pool_size);
	single(f, "kvfs_pool_used_bytes", "gauge", "Bytes of the DRAM pool in use.",
	       sm->sm_pool_used);
	single(f, "kvfs_pool_free_bytes", "gauge", "Bytes of the DRAM pool free.",
	       sm->sm_pool_size > sm->sm_pool_used ? sm->sm_pool_size - sm->sm_pool_used : 0);
	single(f, "kvfs_pool_reserved_bytes", "gauge",
	       "Bytes of the DRAM pool promised to unwritten extents (no SSD tier).",
	       sm->sm_pool_reserved);
	single(f, "kvfs_cow_bytes_total", "counter",
	       "Bytes copied because a shared extent was changed.", sm->sm_cow);

	family(f, "kvfs_nodes", "gauge",
	       "Named nodes by type: file (keys), dir (the root included), symlink, fifo_socket.");
	value1(f, "kvfs_nodes", "type", "file", u->ku_keys);
	value1(f, "kvfs_nodes", "type", "dir", u->ku_dirs);
	value1(f, "kvfs_nodes", "type", "symlink", u->ku_symlinks);
	value1(f, "kvfs_nodes", "type", "fifo_socket", u->ku_specials);
	single(f, "kvfs_open_handles", "gauge", "Open file handles.", u->ku_open);
	single(f, "kvfs_logical_bytes", "gauge", "Sum of the logical sizes of all keys.",
	       u->ku_bytes);
	single(f, "kvfs_last_seq", "gauge", "The newest sequence number handed out.",
	       u->ku_last_seq);
}

/* The SSD tier, offload, hits, read-ahead and recovery (only with an SSD tier). */
static void render_ssd(FILE *f, struct kv_fs *fs, const struct sample *sm)
{
	const struct kv_store_usage *u = &sm->sm_u;

	single(f, "kvfs_ssd_used_bytes", "gauge", "Bytes the bucket files use.", u->ku_ssd_used);
	single(f, "kvfs_ssd_capacity_bytes", "gauge", "The SSD quota (--ssd-size).", u->ku_ssd_cap);
	single(f, "kvfs_ssd_dead_bytes", "gauge",
	       "Bytes of deleted or replaced records in buckets.", u->ku_ssd_dead);
	single(f, "kvfs_ssd_reserved_bytes", "gauge",
	       "Bytes of the quota promised to unwritten extents (fallocate).", u->ku_ssd_reserved);
	single(f, "kvfs_ssd_buckets", "gauge", "Bucket files.", u->ku_buckets);
	single(f, "kvfs_ssd_written_bytes_total", "counter", "Bytes written to bucket files.",
	       u->ku_ssd_written);
	single(f, "kvfs_ssd_read_bytes_total", "counter", "Bytes read from bucket files.",
	       u->ku_ssd_read);
	single(f, "kvfs_ssd_checksum_errors_total", "counter",
	       "Records that failed their checksum when read.", u->ku_csum_errors);
	single(f, "kvfs_ssd_shared_bytes_total", "counter",
	       "Bytes of records new versions shared with older ones instead of writing them.",
	       u->ku_shared);
	single(f, "kvfs_spilled_bytes_total", "counter",
	       "Bytes of files being written sent to the SSD early.", u->ku_spilled);

	single(f, "kvfs_offload_backlog_keys", "gauge", "Sealed values waiting to be offloaded.",
	       u->ku_backlog_keys);
	single(f, "kvfs_offload_backlog_bytes", "gauge", "Bytes waiting to be offloaded.",
	       u->ku_backlog_bytes);
	single(f, "kvfs_offload_errors_total", "counter", "Offloads that failed.",
	       u->ku_offload_errors);

	family(f, "kvfs_tier_hits_total", "counter",
	       "Reads of values served by each tier: dram, ssd, and rados (values brought in from "
	       "the shared tier).");
	value1(f, "kvfs_tier_hits_total", "tier", "dram", u->ku_dram_hits);
	value1(f, "kvfs_tier_hits_total", "tier", "ssd", u->ku_ssd_hits);
	if (fs->kf_shared)
		value1(f, "kvfs_tier_hits_total", "tier", "rados", sm->sm_sh.ss_hits);
	single(f, "kvfs_dram_evictions_total", "counter",
	       "Clean DRAM copies dropped under pressure.", u->ku_evictions);
	single(f, "kvfs_promotions_total", "counter", "SSD-only values brought into DRAM by reads.",
	       u->ku_promotions);
	single(f, "kvfs_readahead_bytes_total", "counter",
	       "Bytes read ahead for sequential readers.", u->ku_prefetch_bytes);
	single(f, "kvfs_readahead_hits_total", "counter",
	       "Record pieces reads took from read-ahead buffers.", u->ku_prefetch_hits);
	single(f, "kvfs_readahead_unused_bytes_total", "counter",
	       "Bytes read ahead and dropped unused.", u->ku_prefetch_unused);

	family(f, "kvfs_recovery_duration_seconds", "gauge",
	       "How long the last start's recovery took.");
	fputs("kvfs_recovery_duration_seconds ", f);
	put_seconds(f, u->ku_recovery_ns);
	fputc('\n', f);
	single(f, "kvfs_recovery_keys", "gauge", "Keys the last start recovered.",
	       u->ku_recovered_keys);
	single(f, "kvfs_recovery_torn_buckets", "gauge",
	       "Open buckets whose torn tail the last start cut.", u->ku_torn_buckets);
	single(f, "kvfs_recovery_lost_keys", "gauge",
	       "Keys the last start dropped: their record is missing or unreadable.",
	       u->ku_lost_keys);
}

/* Compaction and cache mode (only with an SSD tier). */
static void render_gc(FILE *f, const struct sample *sm)
{
	const struct kv_gc_stats *g = &sm->sm_gc_stats;
	uint64_t written = sm->sm_u.ku_ssd_written;
	/* (written + copied) / written in thousandths, printed as a decimal */
	uint64_t wa =
	    written ? (uint64_t)((double)(written + g->gs_copied) * 1000.0 / (double)written + 0.5)
		    : 1000;

	single(f, "kvfs_gc_passes_total", "counter", "Compaction passes that found victims.",
	       g->gs_passes);
	family(f, "kvfs_gc_buckets_total", "counter",
	       "Victim buckets by result: compacted (live records copied), dropped (none live), "
	       "recycled (an output written over a victim's file).");
	value1(f, "kvfs_gc_buckets_total", "result", "compacted", g->gs_compacted);
	value1(f, "kvfs_gc_buckets_total", "result", "dropped", g->gs_dropped);
	value1(f, "kvfs_gc_buckets_total", "result", "recycled", g->gs_recycled);
	single(f, "kvfs_gc_reclaimed_bytes_total", "counter",
	       "Bytes of victims dropped, less the copies written.", g->gs_reclaimed);
	single(f, "kvfs_gc_rewritten_bytes_total", "counter",
	       "Bytes of live records copied and switched.", g->gs_rewritten);
	single(f, "kvfs_gc_copied_bytes_total", "counter", "Bytes copied, switched or not.",
	       g->gs_copied);
	family(f, "kvfs_gc_write_amplification", "gauge",
	       "(bytes written to buckets + bytes compaction copied) / bytes written.");
	fprintf(f, "kvfs_gc_write_amplification %" PRIu64 ".%03" PRIu64 "\n", wa / 1000, wa % 1000);
	single(f, "kvfs_gc_revalidation_skips_total", "counter",
	       "Copies not switched: their key changed meanwhile.", g->gs_skips);
	single(f, "kvfs_gc_checksum_failures_total", "counter",
	       "Records not copied: they failed their checksums.", g->gs_csum_failures);
	family(f, "kvfs_gc_seconds_total", "counter", "Time spent in compaction passes.");
	fputs("kvfs_gc_seconds_total ", f);
	put_seconds(f, g->gs_ns);
	fputc('\n', f);
	single(f, "kvfs_gc_room_waits_total", "counter",
	       "Times an offload found the quota full and waited.", g->gs_room_waits);
	single(f, "kvfs_evicted_keys_total", "counter", "Keys cache mode (--evict=lru) deleted.",
	       g->gs_evicted_keys);
	single(f, "kvfs_evicted_bytes_total", "counter", "Bytes of the keys cache mode deleted.",
	       g->gs_evicted_bytes);
	family(f, "kvfs_evict_invalidations_total", "counter",
	       "Evicted names told to the kernel (result=\"sent\") or dropped untold.");
	value1(f, "kvfs_evict_invalidations_total", "result", "sent", sm->sm_told);
	value1(f, "kvfs_evict_invalidations_total", "result", "dropped", sm->sm_untold);
}

/* The shared tier on RADOS (only when it is on). */
static void render_shared(FILE *f, struct kv_fs *fs, const struct sample *sm)
{
	const struct kv_shared_stats *s = &sm->sm_sh;
	static const char *const qs[] = {"0.5", "0.9", "0.99"};
	const uint64_t qv[] = {s->ss_lat_p50, s->ss_lat_p90, s->ss_lat_p99};
	const char *err;

	family(f, "kvfs_shared_info", "gauge", "The RADOS pool and namespace shared; always 1.");
	fputs("kvfs_shared_info{pool=\"", f);
	put_label(f, kv_shared_pool(fs->kf_shared));
	fputs("\",namespace=\"", f);
	put_label(f, kv_shared_namespace(fs->kf_shared));
	fputs("\"} 1\n", f);
	family(f, "kvfs_shared_state", "gauge",
	       "The connection's state: 1 for the state it is in, 0 for the others.");
	for (int st = KV_SHARED_CONNECTING; st <= KV_SHARED_UNREACHABLE; st++)
		value1(f, "kvfs_shared_state", "state",
		       kv_shared_state_name((enum kv_shared_state)st),
		       s->ss_state == (enum kv_shared_state)st);
	family(f, "kvfs_shared_last_error_info", "gauge",
	       "The last failure (errno name and text); always 1, absent before any.");
	if (s->ss_last_err) {
		err = strerrorname_np(-s->ss_last_err);
		fprintf(f, "kvfs_shared_last_error_info{errno=\"%s\",text=\"", err ? err : "other");
		put_label(f, s->ss_last_error_text);
		fputs("\"} 1\n", f);
	}
	single(f, "kvfs_shared_healthy", "gauge", "1 when the last cluster operation answered.",
	       s->ss_healthy);
	single(f, "kvfs_shared_connect_attempts_total", "counter", "Connection attempts.",
	       s->ss_connect_attempts);
	single(f, "kvfs_shared_connect_failures_total", "counter",
	       "Connection attempts that failed.", s->ss_connect_failures);
	family(f, "kvfs_shared_objects_total", "counter", "RADOS objects read and written.");
	value1(f, "kvfs_shared_objects_total", "op", "read", s->ss_objects_read);
	value1(f, "kvfs_shared_objects_total", "op", "write", s->ss_objects_written);
	family(f, "kvfs_shared_bytes_total", "counter", "Bytes read from and written to RADOS.");
	value1(f, "kvfs_shared_bytes_total", "op", "read", s->ss_bytes_read);
	value1(f, "kvfs_shared_bytes_total", "op", "write", s->ss_bytes_written);
	single(f, "kvfs_shared_prefetched_total", "counter",
	       "Values brought in by a batch's prefetch.", s->ss_prefetched);
	family(f, "kvfs_shared_entries_total", "counter",
	       "Directory entries published and removed.");
	value1(f, "kvfs_shared_entries_total", "op", "put", s->ss_puts);
	value1(f, "kvfs_shared_entries_total", "op", "delete", s->ss_deletes);
	single(f, "kvfs_shared_backlog_changes", "gauge", "Changes waiting to be sent.",
	       s->ss_backlog);
	single(f, "kvfs_shared_backlog_bytes", "gauge", "Bytes of the values of waiting changes.",
	       s->ss_backlog_bytes);
	single(f, "kvfs_shared_replayed_changes", "gauge",
	       "Changes the log held at the start (not sent before the last stop).",
	       s->ss_replayed);
	single(f, "kvfs_shared_gc_sweeps_total", "counter", "Background sweeps of the pool.",
	       s->ss_gc_sweeps);
	single(f, "kvfs_shared_gc_removed_objects_total", "counter",
	       "Orphan objects the sweeps removed.", s->ss_gc_removed);
	family(f, "kvfs_shared_failures_total", "counter",
	       "Cluster operations that failed, by result: error or timeout.");
	value1(f, "kvfs_shared_failures_total", "result", "error", s->ss_errors);
	value1(f, "kvfs_shared_failures_total", "result", "timeout", s->ss_timeouts);
	family(f, "kvfs_shared_op_latency_seconds", "summary",
	       "Latency of each cluster operation (bucket upper edges).");
	for (unsigned int i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		fprintf(f, "kvfs_shared_op_latency_seconds{quantile=\"%s\"} ", qs[i]);
		put_seconds(f, qv[i]);
		fputc('\n', f);
	}
}

int kv_fs_metrics_render(struct kv_fs *fs, char **buf, size_t *len)
{
	uint64_t now = kv_now_ns();
	struct sample sm;
	struct le_set ls;
	char *out = NULL;
	size_t out_len = 0;
	FILE *f;
	int bad;

	take_sample(fs, &sm);
	le_set_init(&ls);
	f = open_memstream(&out, &out_len);
	if (!f)
		return -ENOMEM;
	family(f, "kvfs_build_info", "gauge", "The kvfs version; always 1.");
	fprintf(f, "kvfs_build_info{version=\"%s\",metrics_http=\"%s\"} 1\n", KVFS_VERSION,
		kv_fs_metrics_built() ? "libmicrohttpd" : "none");
	family(f, "kvfs_uptime_seconds", "gauge", "Time since the daemon started serving.");
	fputs("kvfs_uptime_seconds ", f);
	put_seconds(f, now > fs->kf_stats.ks_start_ns ? now - fs->kf_stats.ks_start_ns : 0);
	fputc('\n', f);
	render_requests(f, &fs->kf_stats, &ls);
	render_memory(f, &sm);
	if (sm.sm_u.ku_ssd)
		render_ssd(f, fs, &sm);
	if (sm.sm_gc)
		render_gc(f, &sm);
	if (fs->kf_shared)
		render_shared(f, fs, &sm);
	bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		free(out);
		return -ENOMEM;
	}
	*buf = out;
	*len = out_len;
	return 0;
}
