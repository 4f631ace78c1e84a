/* SPDX-License-Identifier: MIT */
/*
 * core/stats.c — counters, log-scale latency histograms and their JSON form.
 *
 * Memory ordering: every counter is an independent relaxed atomic. A reader
 * (kv_hist_percentile, kv_stats_render) sees each counter at some value it
 * really had, but not all counters at one instant: an op's "calls" may run a
 * few samples ahead of or behind its histogram. Nothing here orders other
 * memory, and nothing needs to.
 */
#include "core/stats.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/dev.h"

/*
 * Bucket mapping, with S = KV_HIST_SUB_BITS:
 *
 *   v < 2^(S+1)         bucket v                      (exact, width 1)
 *   otherwise, with m = the index of v's highest set bit (m > S):
 *                       bucket ((m - S + 1) << S) | ((v >> (m - S)) & (2^S - 1))
 *
 * A bucket above the exact range holds the 2^(m-S) values sharing v's top
 * S + 1 bits, so it is at most 1/2^S of its lower edge wide. The index grows
 * with v, and the exact range is what the general formula gives at m = S, so
 * the mapping is monotonic and gapless. The largest index, at m = 63, is
 * ((64 - S) << S) | (2^S - 1) = (65 - S) * 2^S - 1: 495 of 512 for S = 3.
 */
#define HIST_SUB_MASK	  ((UINT64_C(1) << KV_HIST_SUB_BITS) - 1)
#define HIST_EXACT	  (UINT64_C(2) << KV_HIST_SUB_BITS)
#define HIST_USED_BUCKETS ((65 - KV_HIST_SUB_BITS) << KV_HIST_SUB_BITS)

static_assert(KV_HIST_SUB_BITS >= 1 && KV_HIST_SUB_BITS < 8, "sub-bucket bits out of range");
static_assert(HIST_USED_BUCKETS <= KV_HIST_BUCKETS, "histogram mapping overflows the array");
static_assert(KV_STATS_MAX_ERRNO >= 2, "need at least one errno slot and the 'other' slot");

static unsigned int hist_bucket(uint64_t v)
{
	unsigned int m, shift;

	if (v < HIST_EXACT)
		return (unsigned int)v;
	m = 63u - (unsigned int)__builtin_clzll(v);
	shift = m - KV_HIST_SUB_BITS;
	return ((shift + 1) << KV_HIST_SUB_BITS) | (unsigned int)((v >> shift) & HIST_SUB_MASK);
}

/* The largest value mapped to bucket b (b < HIST_USED_BUCKETS). */
static uint64_t hist_upper_edge(unsigned int b)
{
	unsigned int shift;
	uint64_t lower;

	if (b < HIST_EXACT)
		return b;
	shift = (b >> KV_HIST_SUB_BITS) - 1;
	lower = ((HIST_SUB_MASK + 1) | (b & HIST_SUB_MASK)) << shift;
	/* lower + width - 1, in this order: the top bucket ends at UINT64_MAX. */
	return lower + ((UINT64_C(1) << shift) - 1);
}

/* Copies the buckets into snap and returns their total. */
static uint64_t hist_snapshot(const struct kv_hist *h, uint64_t snap[KV_HIST_BUCKETS])
{
	uint64_t total = 0;

	for (unsigned int i = 0; i < KV_HIST_BUCKETS; i++) {
		snap[i] = atomic_load_explicit(&h->kh_bucket[i], memory_order_relaxed);
		total += snap[i];
	}
	return total;
}

/*
 * The pct-th percentile of a snapshot: the upper edge of the bucket holding
 * the sample of rank ceil(pct / 100 * total), rank clamped to [1, total].
 */
static uint64_t hist_snap_percentile(const uint64_t snap[KV_HIST_BUCKETS], uint64_t total,
				     double pct)
{
	double want;
	uint64_t rank, seen = 0;

	if (total == 0)
		return 0;
	want = pct / 100.0 * (double)total;
	if (!(want > 1.0)) /* also NaN */
		rank = 1;
	else if (want >= (double)total)
		rank = total;
	else {
		rank = (uint64_t)want;
		if ((double)rank < want)
			rank++;
	}
	for (unsigned int i = 0; i < HIST_USED_BUCKETS; i++) {
		seen += snap[i];
		if (seen >= rank)
			return hist_upper_edge(i);
	}
	return UINT64_MAX; /* unreachable: the snapshot sums to total */
}

void kv_stats_init(struct kv_stats *st)
{
	/* Zero bytes are zero atomics: uint64_t atomics are lock-free here. */
	static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");
	memset(st, 0, sizeof(*st));
	st->ks_start_ns = kv_now_ns();
}

uint64_t kv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

void kv_hist_record(struct kv_hist *h, uint64_t ns)
{
	atomic_fetch_add_explicit(&h->kh_bucket[hist_bucket(ns)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->kh_sum_ns, ns, memory_order_relaxed);
}

void kv_hist_read(const struct kv_hist *h, struct kv_hist_snap *s)
{
	s->hs_count = hist_snapshot(h, s->hs_bucket);
	s->hs_sum_ns = atomic_load_explicit(&h->kh_sum_ns, memory_order_relaxed);
}

unsigned int kv_hist_bucket_of(uint64_t ns)
{
	return hist_bucket(ns);
}

uint64_t kv_hist_bucket_max(unsigned int b)
{
	return b + 1 < HIST_USED_BUCKETS ? hist_upper_edge(b) : UINT64_MAX;
}

uint64_t kv_hist_percentile(const struct kv_hist *h, double pct)
{
	uint64_t snap[KV_HIST_BUCKETS];
	uint64_t total = hist_snapshot(h, snap);

	return hist_snap_percentile(snap, total, pct);
}

uint64_t kv_hist_count(const struct kv_hist *h)
{
	uint64_t total = 0;

	for (unsigned int i = 0; i < KV_HIST_BUCKETS; i++)
		total += atomic_load_explicit(&h->kh_bucket[i], memory_order_relaxed);
	return total;
}

/* An op outside the enum is counted, and named, as KV_OP_OTHER. */
static enum kv_op op_clamp(enum kv_op op)
{
	return (unsigned int)op < KV_OP__COUNT ? op : KV_OP_OTHER;
}

/*
 * err is a negative errno; a positive one is taken as the same errno. Values
 * from KV_STATS_MAX_ERRNO - 1 up share the last slot, rendered as "other".
 */
static unsigned int errno_slot(int err)
{
	unsigned int e = err < 0 ? 0u - (unsigned int)err : (unsigned int)err;

	return e < KV_STATS_MAX_ERRNO - 1 ? e : KV_STATS_MAX_ERRNO - 1;
}

void kv_stats_op(struct kv_stats *st, enum kv_op op, uint64_t start_ns, uint64_t bytes, int err)
{
	struct kv_op_stats *os = &st->ks_op[op_clamp(op)];
	uint64_t now = kv_now_ns();

	atomic_fetch_add_explicit(&os->kos_calls, 1, memory_order_relaxed);
	if (bytes)
		atomic_fetch_add_explicit(&os->kos_bytes, bytes, memory_order_relaxed);
	if (err) {
		atomic_fetch_add_explicit(&os->kos_errors, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&st->ks_errno[errno_slot(err)], 1, memory_order_relaxed);
	}
	/* A start in the future (a caller's bug) counts as 0 ns, not as ~585 years. */
	kv_hist_record(&os->kos_lat, now > start_ns ? now - start_ns : 0);
}

static const char *const op_names[] = {
    [KV_OP_LOOKUP] = "lookup",	   [KV_OP_GETATTR] = "getattr",	    [KV_OP_SETATTR] = "setattr",
    [KV_OP_MKDIR] = "mkdir",	   [KV_OP_RMDIR] = "rmdir",	    [KV_OP_CREATE] = "create",
    [KV_OP_OPEN] = "open",	   [KV_OP_READ] = "read",	    [KV_OP_WRITE] = "write",
    [KV_OP_FLUSH] = "flush",	   [KV_OP_RELEASE] = "release",	    [KV_OP_FSYNC] = "fsync",
    [KV_OP_UNLINK] = "unlink",	   [KV_OP_RENAME] = "rename",	    [KV_OP_OPENDIR] = "opendir",
    [KV_OP_READDIR] = "readdir",   [KV_OP_STATFS] = "statfs",	    [KV_OP_FALLOCATE] = "fallocate",
    [KV_OP_GETXATTR] = "getxattr", [KV_OP_LISTXATTR] = "listxattr", [KV_OP_SETXATTR] = "setxattr",
    [KV_OP_IOCTL] = "ioctl",	   [KV_OP_SYMLINK] = "symlink",	    [KV_OP_READLINK] = "readlink",
    [KV_OP_MKNOD] = "mknod",	   [KV_OP_LSEEK] = "lseek",	    [KV_OP_OTHER] = "other",
};
static_assert(sizeof(op_names) / sizeof(op_names[0]) == KV_OP__COUNT, "op_names incomplete");

const char *kv_op_name(enum kv_op op)
{
	return op_names[op_clamp(op)];
}

/* Writes "NAME": N for each errno slot with a count, comma-separated. */
static void render_errors(FILE *f, const _Atomic uint64_t *slots)
{
	const char *sep = "";

	for (unsigned int e = 1; e < KV_STATS_MAX_ERRNO; e++) {
		uint64_t n = atomic_load_explicit(&slots[e], memory_order_relaxed);
		const char *name;

		if (!n)
			continue;
		name = e == KV_STATS_MAX_ERRNO - 1 ? "other" : strerrorname_np((int)e);
		if (name)
			fprintf(f, "%s\"%s\": %" PRIu64, sep, name, n);
		else
			fprintf(f, "%s\"errno_%u\": %" PRIu64, sep, e, n);
		sep = ", ";
	}
}

static const char *const ioc_names[] = {[KV_IOC_LOOKUP] = "lookup",
					[KV_IOC_PUT] = "put",
					[KV_IOC_GET] = "get",
					[KV_IOC_REMOVE] = "remove"};
static_assert(sizeof(ioc_names) / sizeof(ioc_names[0]) == KV_IOC__COUNT, "ioc_names incomplete");

static const char *const stage_names[] = {[KV_STAGE_VALIDATE] = "validate",
					  [KV_STAGE_INDEX] = "index",
					  [KV_STAGE_COPY_IN] = "copy_in",
					  [KV_STAGE_COPY_OUT] = "copy_out",
					  [KV_STAGE_SSD_READ] = "ssd_read"};
static_assert(sizeof(stage_names) / sizeof(stage_names[0]) == KV_STAGE__COUNT,
	      "stage_names incomplete");

const char *kv_ioc_name(enum kv_ioc_kind kind)
{
	return (unsigned int)kind < KV_IOC__COUNT ? ioc_names[kind] : "other";
}

const char *kv_stage_name(enum kv_stage stage)
{
	return (unsigned int)stage < KV_STAGE__COUNT ? stage_names[stage] : "other";
}

void kv_stats_ioc(struct kv_stats *st, enum kv_ioc_kind kind, uint64_t start_ns, uint64_t keys,
		  uint64_t failed, uint64_t bytes, const uint64_t ns[KV_STAGE__COUNT])
{
	struct kv_ioc_stats *is = &st->ks_ioc[(unsigned int)kind < KV_IOC__COUNT ? kind : 0];
	uint64_t now = kv_now_ns();

	atomic_fetch_add_explicit(&is->kis_calls, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&is->kis_keys, keys, memory_order_relaxed);
	atomic_fetch_add_explicit(&is->kis_failed, failed, memory_order_relaxed);
	atomic_fetch_add_explicit(&is->kis_bytes, bytes, memory_order_relaxed);
	kv_hist_record(&is->kis_lat, now > start_ns ? now - start_ns : 0);
	for (int s = 0; s < KV_STAGE__COUNT; s++) {
		if (!ns[s])
			continue;
		kv_hist_record(&st->ks_stage[s], ns[s]);
		atomic_fetch_add_explicit(&st->ks_stage_ns[s], ns[s], memory_order_relaxed);
	}
}

void kv_stats_key_error(struct kv_stats *st, int err)
{
	atomic_fetch_add_explicit(&st->ks_key_errno[errno_slot(err)], 1, memory_order_relaxed);
}

/* Writes " p50/p90/p99" members of a histogram: "p50": N, "p90": N, "p99": N. */
static void render_pcts(FILE *f, const struct kv_hist *h)
{
	uint64_t snap[KV_HIST_BUCKETS];
	uint64_t total = hist_snapshot(h, snap);

	fprintf(f, "\"p50\": %" PRIu64 ", \"p90\": %" PRIu64 ", \"p99\": %" PRIu64,
		hist_snap_percentile(snap, total, 50.0), hist_snap_percentile(snap, total, 90.0),
		hist_snap_percentile(snap, total, 99.0));
}

/* The device backend in force and how much of the pool is pinned for it (gpu/dev.h). */
static void render_gpu(FILE *f)
{
	uint64_t pinned, total;
	int drv, rt;

	kv_dev_pin_progress(&pinned, &total);
	kv_dev_versions(&drv, &rt);
	fprintf(f,
		" \"gpu\": {\"backend\": \"%s\", \"built\": \"%s\", \"devices\": %d, "
		"\"driver_version\": %d, \"runtime_version\": %d, \"pool_pinned\": %" PRIu64
		", \"pool_pin_target\": %" PRIu64 ", \"note\": \"",
		kv_dev_backend(), kv_dev_built(), kv_dev_count(), drv, rt, pinned, total);
	for (const char *p = kv_dev_note(); *p; p++) /* plain text: keep it valid JSON */
		fputc(*p == '"' || *p == '\\' || (unsigned char)*p < 0x20 ? '\'' : *p, f);
	fputs("\"},\n", f);
}

static void render_ioctl(FILE *f, const struct kv_stats *st)
{
	fprintf(f,
		" \"ioctl\": {\"regions\": %" PRIu64 ", \"layouts\": %" PRIu64
		", \"ssd_direct_keys\": %" PRIu64 ",\n",
		atomic_load_explicit(&st->ks_regions, memory_order_relaxed),
		atomic_load_explicit(&st->ks_layouts, memory_order_relaxed),
		atomic_load_explicit(&st->ks_ssd_direct, memory_order_relaxed));
	for (int k = 0; k < KV_IOC__COUNT; k++) {
		const struct kv_ioc_stats *is = &st->ks_ioc[k];

		fprintf(f,
			"  \"%s\": {\"calls\": %" PRIu64 ", \"keys\": %" PRIu64
			", \"failed_keys\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"lat_ns\": {",
			ioc_names[k], atomic_load_explicit(&is->kis_calls, memory_order_relaxed),
			atomic_load_explicit(&is->kis_keys, memory_order_relaxed),
			atomic_load_explicit(&is->kis_failed, memory_order_relaxed),
			atomic_load_explicit(&is->kis_bytes, memory_order_relaxed));
		render_pcts(f, &is->kis_lat);
		fputs("}},\n", f);
	}
	fputs("  \"stages\": {", f);
	for (int s = 0; s < KV_STAGE__COUNT; s++) {
		fprintf(f, "%s\"%s\": {\"batches\": %" PRIu64 ", \"total_ns\": %" PRIu64 ", ",
			s ? ",\n             " : "", stage_names[s],
			kv_hist_count(&st->ks_stage[s]),
			atomic_load_explicit(&st->ks_stage_ns[s], memory_order_relaxed));
		render_pcts(f, &st->ks_stage[s]);
		fputs("}", f);
	}
	fputs("},\n  \"key_errors\": {", f);
	render_errors(f, st->ks_key_errno);
	fputs("}},\n", f);
}

static void render_op(FILE *f, const struct kv_stats *st, enum kv_op op)
{
	const struct kv_op_stats *os = &st->ks_op[op];
	uint64_t snap[KV_HIST_BUCKETS];
	uint64_t total = hist_snapshot(&os->kos_lat, snap);

	fprintf(f,
		"  \"%s\": {\"calls\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"bytes\": %" PRIu64
		", \"lat_ns\": {\"p50\": %" PRIu64 ", \"p90\": %" PRIu64 ", \"p99\": %" PRIu64 "}}",
		op_names[op], atomic_load_explicit(&os->kos_calls, memory_order_relaxed),
		atomic_load_explicit(&os->kos_errors, memory_order_relaxed),
		atomic_load_explicit(&os->kos_bytes, memory_order_relaxed),
		hist_snap_percentile(snap, total, 50.0), hist_snap_percentile(snap, total, 90.0),
		hist_snap_percentile(snap, total, 99.0));
}

/*
 * The document is printed with integers only (uptime as seconds "." millis),
 * so the locale's decimal separator never leaks into it. *len excludes the
 * terminating NUL that open_memstream leaves after the newline.
 */
void kv_json_str(FILE *f, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
}

int kv_stats_render(const struct kv_stats *st, const struct kv_stats_gauges *g, char **buf,
		    size_t *len)
{
	uint64_t now = kv_now_ns();
	uint64_t up_ms = now > st->ks_start_ns ? (now - st->ks_start_ns) / 1000000 : 0;
	uint64_t pool_free =
	    g->kg_pool_size > g->kg_pool_used ? g->kg_pool_size - g->kg_pool_used : 0;
	char *out = NULL;
	size_t out_len = 0;
	FILE *f;
	int bad;

	f = open_memstream(&out, &out_len);
	if (!f)
		return -ENOMEM;

	fprintf(f, "{\"uptime_s\": %" PRIu64 ".%03" PRIu64 ",\n \"ops\": {\n", up_ms / 1000,
		up_ms % 1000);
	for (int op = 0; op < KV_OP__COUNT; op++) {
		render_op(f, st, (enum kv_op)op);
		fputs(op + 1 < KV_OP__COUNT ? ",\n" : "},\n", f);
	}
	fputs(" \"errors\": {", f);
	render_errors(f, st->ks_errno);
	fputs("},\n", f);
	render_ioctl(f, st);
	render_gpu(f);
	fprintf(f,
		" \"pool\": {\"size\": %" PRIu64 ", \"used\": %" PRIu64 ", \"free\": %" PRIu64
		", \"reserved\": %" PRIu64 ", \"cow_bytes\": %" PRIu64 "},\n",
		g->kg_pool_size, g->kg_pool_used, pool_free, g->kg_pool_reserved, g->kg_cow_bytes);
	fprintf(f,
		" \"namespace\": {\"keys\": %" PRIu64 ", \"dirs\": %" PRIu64
		", \"symlinks\": %" PRIu64 ", \"fifos_sockets\": %" PRIu64
		", \"open_handles\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"last_seq\": %" PRIu64
		"}%s%s}\n",
		g->kg_keys, g->kg_dirs, g->kg_symlinks, g->kg_specials, g->kg_open, g->kg_bytes,
		g->kg_last_seq, g->kg_extra ? ",\n " : "", g->kg_extra ? g->kg_extra : "");

	bad = ferror(f);
	if (fclose(f) != 0 || bad)
		goto out_free;
	*buf = out;
	*len = out_len;
	return 0;

out_free:
	free(out);
	return -ENOMEM;
}
