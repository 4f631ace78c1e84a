/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_stats.c — histogram mapping and percentiles, op counting,
 * concurrent recording, and the JSON document (checked by python3's json).
 *
 * The bucket mapping is private to stats.c; the tests observe it through the
 * public struct: record one sample into an empty histogram, find the bucket
 * that became 1, and ask kv_hist_percentile(100) for that bucket's upper edge.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rados/shared.h"
#include "core/stats.h"

/* Where one value lands: its bucket index and that bucket's upper edge. */
struct probe {
	unsigned int pr_bucket;
	uint64_t pr_edge;
};

static struct probe probe(struct kv_hist *h, uint64_t v)
{
	struct probe p = {.pr_bucket = KV_HIST_BUCKETS};

	kv_hist_record(h, v);
	assert_int_equal(kv_hist_count(h), 1);
	for (unsigned int i = 0; i < KV_HIST_BUCKETS; i++) {
		if (atomic_load(&h->kh_bucket[i])) {
			p.pr_bucket = i;
			break;
		}
	}
	assert_true(p.pr_bucket < KV_HIST_BUCKETS);
	p.pr_edge = kv_hist_percentile(h, 100.0);
	atomic_store(&h->kh_bucket[p.pr_bucket], 0);
	return p;
}

/*
 * Walks every bucket from 0 up: each bucket's upper edge is in the bucket,
 * edge + 1 is in the very next one, and the walk ends at UINT64_MAX inside
 * the array. Together: the buckets tile the whole uint64 range, in order.
 */
static void test_hist_buckets_tile_range(void **state)
{
	static struct kv_hist h;
	uint64_t v = 0;
	unsigned int expect = 0, walked = 0;

	(void)state;
	for (;;) {
		struct probe p = probe(&h, v), q;

		assert_int_equal(p.pr_bucket, expect);
		assert_true(p.pr_edge >= v);
		q = probe(&h, p.pr_edge);
		assert_int_equal(q.pr_bucket, p.pr_bucket);
		assert_true(q.pr_edge == p.pr_edge);
		/* Relative width: the edge is at most 12.5% above the lower edge. */
		if (v < 16) {
			assert_true(p.pr_edge == v);
			assert_int_equal(p.pr_bucket, (unsigned int)v);
		} else {
			assert_true(p.pr_edge - v < (v >> KV_HIST_SUB_BITS));
		}
		walked++;
		if (p.pr_edge == UINT64_MAX)
			break;
		v = p.pr_edge + 1;
		expect++;
	}
	assert_true(walked <= KV_HIST_BUCKETS);
	assert_int_equal(walked, (65 - KV_HIST_SUB_BITS) << KV_HIST_SUB_BITS);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t xorshift64(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
 * A sorted sweep (every value to 5000, then values near each power of two,
 * then random values at every magnitude): the bucket index never decreases,
 * each value is at most its bucket's upper edge and above the upper edge of
 * every lower bucket seen.
 */
static void test_hist_mapping_monotonic(void **state)
{
	enum { N_SMALL = 5000, N_RANDOM = 4000 };
	static struct kv_hist h;
	size_t n = 0, cap = N_SMALL + 64 * 7 + N_RANDOM;
	uint64_t *vals = calloc(cap, sizeof(*vals));
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	struct probe prev = {0};

	(void)state;
	assert_non_null(vals);
	for (uint64_t v = 0; v < N_SMALL; v++)
		vals[n++] = v;
	for (unsigned int b = 0; b < 64; b++) {
		uint64_t p2 = UINT64_C(1) << b;

		vals[n++] = p2;
		vals[n++] = p2 - 1;
		vals[n++] = p2 + 1;
		vals[n++] = p2 | (p2 >> 1);
		vals[n++] = p2 | (p2 - 1);
		vals[n++] = p2 + (p2 >> 3);
		vals[n++] = p2 + (p2 >> 3) - 1;
	}
	for (int i = 0; i < N_RANDOM; i++)
		vals[n++] = xorshift64(&seed) >> (i % 64);
	assert_true(n == cap);
	qsort(vals, n, sizeof(*vals), cmp_u64);

	for (size_t i = 0; i < n; i++) {
		struct probe p = probe(&h, vals[i]);

		assert_true(vals[i] <= p.pr_edge);
		if (i == 0)
			assert_int_equal(p.pr_bucket, 0);
		if (i > 0) {
			assert_true(p.pr_bucket >= prev.pr_bucket);
			assert_true(p.pr_edge >= prev.pr_edge);
			if (p.pr_bucket != prev.pr_bucket)
				assert_true(vals[i] > prev.pr_edge);
			else
				assert_true(p.pr_edge == prev.pr_edge);
		}
		prev = p;
	}
	assert_true(prev.pr_edge == UINT64_MAX); /* the sweep reaches the top bucket */
	free(vals);
}

static void test_hist_empty(void **state)
{
	static struct kv_hist h;

	(void)state;
	assert_int_equal(kv_hist_count(&h), 0);
	assert_int_equal(kv_hist_percentile(&h, 50.0), 0);
	assert_int_equal(kv_hist_percentile(&h, 99.0), 0);
	assert_int_equal(kv_hist_percentile(&h, 100.0), 0);
}

static void test_hist_percentiles_uniform(void **state)
{
	static struct kv_hist h;
	uint64_t p50, p90, p99, p100;

	(void)state;
	for (uint64_t v = 1; v <= 10000; v++)
		kv_hist_record(&h, v);
	assert_int_equal(kv_hist_count(&h), 10000);
	p50 = kv_hist_percentile(&h, 50.0);
	p90 = kv_hist_percentile(&h, 90.0);
	p99 = kv_hist_percentile(&h, 99.0);
	p100 = kv_hist_percentile(&h, 100.0);
	assert_in_range(p50, 5000, 5000 + 5000 / 8);
	assert_in_range(p90, 9000, 9000 + 9000 / 8);
	assert_in_range(p99, 9900, 9900 + 9900 / 8);
	assert_in_range(p100, 10000, 10000 + 10000 / 8);
	/* The smallest percentile is the first sample's bucket: 1 is exact. */
	assert_int_equal(kv_hist_percentile(&h, 0.001), 1);
}

/* Few samples: p50 of {10, 20, 1000000} is the bucket of 20, never below. */
static void test_hist_percentiles_small(void **state)
{
	static struct kv_hist h;

	(void)state;
	kv_hist_record(&h, 10);
	kv_hist_record(&h, 20);
	kv_hist_record(&h, 1000000);
	assert_int_equal(kv_hist_percentile(&h, 33.0), 10);
	assert_in_range(kv_hist_percentile(&h, 50.0), 20, 21);
	assert_in_range(kv_hist_percentile(&h, 99.0), 1000000, 1000000 + 1000000 / 8);
}

static void test_op_names(void **state)
{
	static const char *const want[KV_OP__COUNT] = {
	    "lookup",  "getattr", "setattr",  "mkdir",	   "rmdir",    "create",    "open",
	    "read",    "write",	  "flush",    "release",   "fsync",    "unlink",    "rename",
	    "opendir", "readdir", "statfs",   "fallocate", "getxattr", "listxattr", "setxattr",
	    "ioctl",   "symlink", "readlink", "mknod",	   "lseek",    "other",
	};

	(void)state;
	assert_int_equal(KV_OP__COUNT, 27);
	for (int i = 0; i < KV_OP__COUNT; i++)
		assert_string_equal(kv_op_name((enum kv_op)i), want[i]);
	assert_string_equal(kv_op_name(KV_OP_IOCTL), "ioctl");
	assert_string_equal(kv_op_name(KV_OP__COUNT), "other");
}

static void test_op_counting(void **state)
{
	static struct kv_stats st;
	const struct kv_op_stats *rd = &st.ks_op[KV_OP_READ];
	const struct kv_op_stats *wr = &st.ks_op[KV_OP_WRITE];
	uint64_t now;

	(void)state;
	kv_stats_init(&st);
	assert_true(st.ks_start_ns > 0);
	now = kv_now_ns();
	kv_stats_op(&st, KV_OP_READ, now - 2000000, 4096, 0);
	kv_stats_op(&st, KV_OP_READ, now - 2000000, 8192, 0);
	kv_stats_op(&st, KV_OP_READ, now - 2000000, 0, -EIO);
	kv_stats_op(&st, KV_OP_WRITE, now, 100, -ENOSPC);
	kv_stats_op(&st, KV_OP_WRITE, now, 0, -ENOSPC);
	kv_stats_op(&st, KV_OP_WRITE, now, 0, -5000);
	kv_stats_op(&st, KV_OP_WRITE, now, 0, INT_MIN);
	kv_stats_op(&st, KV_OP_WRITE, now, 0, -(KV_STATS_MAX_ERRNO - 1));

	assert_int_equal(atomic_load(&rd->kos_calls), 3);
	assert_int_equal(atomic_load(&rd->kos_errors), 1);
	assert_int_equal(atomic_load(&rd->kos_bytes), 4096 + 8192);
	assert_int_equal(kv_hist_count(&rd->kos_lat), 3);
	/* Each read took at least 2 ms: no percentile may report less. */
	assert_true(kv_hist_percentile(&rd->kos_lat, 50.0) >= 2000000);

	assert_int_equal(atomic_load(&wr->kos_calls), 5);
	assert_int_equal(atomic_load(&wr->kos_errors), 5);
	assert_int_equal(atomic_load(&wr->kos_bytes), 100);
	assert_int_equal(kv_hist_count(&wr->kos_lat), 5);

	assert_int_equal(atomic_load(&st.ks_errno[EIO]), 1);
	assert_int_equal(atomic_load(&st.ks_errno[ENOSPC]), 2);
	assert_int_equal(atomic_load(&st.ks_errno[KV_STATS_MAX_ERRNO - 1]), 3);
	assert_int_equal(atomic_load(&st.ks_errno[0]), 0);
	for (int op = 0; op < KV_OP__COUNT; op++)
		if (op != KV_OP_READ && op != KV_OP_WRITE)
			assert_int_equal(atomic_load(&st.ks_op[op].kos_calls), 0);
}

/* A start time in the future is a 0 ns sample, not a wrapped-around huge one. */
static void test_op_future_start(void **state)
{
	static struct kv_stats st;

	(void)state;
	kv_stats_init(&st);
	kv_stats_op(&st, KV_OP_GETATTR, kv_now_ns() + 1000000000000ull, 0, 0);
	assert_int_equal(atomic_load(&st.ks_op[KV_OP_GETATTR].kos_calls), 1);
	assert_int_equal(atomic_load(&st.ks_op[KV_OP_GETATTR].kos_errors), 0);
	assert_int_equal(kv_hist_percentile(&st.ks_op[KV_OP_GETATTR].kos_lat, 100.0), 0);
}

enum { N_THREADS = 8, N_PER_THREAD = 20000 };

struct worker {
	struct kv_stats *wk_st;
	int wk_id;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < N_PER_THREAD; i++) {
		uint64_t start = kv_now_ns();

		kv_stats_op(w->wk_st, KV_OP_WRITE, start, 3, (i % 4 == 0) ? -EAGAIN : 0);
		kv_stats_op(w->wk_st, (enum kv_op)(i % KV_OP__COUNT), start, 1, 0);
		kv_hist_record(&w->wk_st->ks_op[KV_OP_OTHER].kos_lat,
			       (uint64_t)w->wk_id << (i % 40));
	}
	return NULL;
}

static void test_concurrent_totals(void **state)
{
	static struct kv_stats st;
	pthread_t th[N_THREADS];
	struct worker w[N_THREADS];
	uint64_t calls = 0, bytes = 0, samples = 0;

	(void)state;
	kv_stats_init(&st);
	for (int i = 0; i < N_THREADS; i++) {
		w[i] = (struct worker){.wk_st = &st, .wk_id = i + 1};
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < N_THREADS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);

	for (int op = 0; op < KV_OP__COUNT; op++) {
		calls += atomic_load(&st.ks_op[op].kos_calls);
		bytes += atomic_load(&st.ks_op[op].kos_bytes);
		samples += kv_hist_count(&st.ks_op[op].kos_lat);
	}
	assert_int_equal(calls, 2 * N_THREADS * N_PER_THREAD);
	assert_int_equal(bytes, 4 * N_THREADS * N_PER_THREAD);
	assert_int_equal(samples, 3 * N_THREADS * N_PER_THREAD);
	assert_int_equal(atomic_load(&st.ks_op[KV_OP_WRITE].kos_errors),
			 N_THREADS * N_PER_THREAD / 4);
	assert_int_equal(atomic_load(&st.ks_errno[EAGAIN]), N_THREADS * N_PER_THREAD / 4);
	/* Writes: N_PER_THREAD from the first call, plus their share of the second. */
	assert_int_equal(atomic_load(&st.ks_op[KV_OP_WRITE].kos_calls),
			 N_THREADS *
			     (N_PER_THREAD + (N_PER_THREAD / KV_OP__COUNT +
					      (KV_OP_WRITE < N_PER_THREAD % KV_OP__COUNT))));
}

/* Writes len bytes of s to a new temp file; returns its path (malloc'ed). */
static char *write_temp(const char *s, size_t len)
{
	const char *dir = getenv("TMPDIR");
	char *path;
	int fd;

	if (!dir || !*dir)
		dir = "/tmp";
	assert_true(asprintf(&path, "%s/kvfs_test_stats.XXXXXX", dir) > 0);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, s, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
	return path;
}

/*
 * Checks the document with python3's json module: exact top-level shape,
 * every op in enum order with integer fields, and the exact counters the test
 * recorded. argv: json file, then the op names in enum order.
 */
static const char json_checker[] =
    "import json, sys\n"
    "d = json.load(open(sys.argv[1]))\n"
    "names = sys.argv[2:]\n"
    "assert list(d) == ['uptime_s', 'ops', 'errors', 'ioctl', 'gpu', 'pool',\n"
    "                   'namespace'], list(d)\n"
    "assert d['gpu']['backend'] == 'none' and d['gpu']['devices'] == 0, d['gpu']\n"
    "assert d['gpu']['pool_pinned'] == 0 and d['gpu']['pool_pin_target'] == 0, d['gpu']\n"
    "assert d['gpu']['note'] == '', d['gpu']\n"
    "assert isinstance(d['uptime_s'], float) and 0 <= d['uptime_s'] < 3600\n"
    "assert list(d['ops']) == names, list(d['ops'])\n"
    "for n, o in d['ops'].items():\n"
    "    assert list(o) == ['calls', 'errors', 'bytes', 'lat_ns'], (n, o)\n"
    "    assert list(o['lat_ns']) == ['p50', 'p90', 'p99'], (n, o)\n"
    "    vals = [o['calls'], o['errors'], o['bytes']] + list(o['lat_ns'].values())\n"
    "    assert all(type(v) is int and v >= 0 for v in vals), (n, o)\n"
    "    if o['calls'] == 0:\n"
    "        assert o['errors'] == o['bytes'] == 0 and set(o['lat_ns'].values()) == {0}\n"
    "r = d['ops']['read']\n"
    "assert (r['calls'], r['errors'], r['bytes']) == (3, 1, 12288), r\n"
    "assert 5000000 <= r['lat_ns']['p50'] <= r['lat_ns']['p90'] <= r['lat_ns']['p99'], r\n"
    "assert d['ops']['mkdir'] == {'calls': 1, 'errors': 1, 'bytes': 0,\n"
    "    'lat_ns': d['ops']['mkdir']['lat_ns']}\n"
    "assert d['errors'] == {'EIO': 1, 'EEXIST': 1, 'ENOSPC': 2, 'other': 1}, d['errors']\n"
    "assert d['pool'] == {'size': 1 << 30, 'used': 1 << 20, 'free': (1 << 30) - (1 << 20),"
    " 'reserved': 2 << 21, 'cow_bytes': 3 << 21}\n"
    "assert d['namespace'] == {'keys': 7, 'dirs': 3, 'symlinks': 5, 'fifos_sockets': 4,\n"
    "    'open_handles': 2, 'bytes': 123456789012, 'last_seq': 2**64 - 1}, d['namespace']\n"
    "io = d['ioctl']\n"
    "assert list(io) == ['regions', 'layouts', 'ssd_direct_keys', 'lookup', 'put', 'get',\n"
    "    'remove', 'stages', 'key_errors'], list(io)\n"
    "assert (io['regions'], io['layouts']) == (3, 1), io\n"
    "g = io['get']\n"
    "assert (g['calls'], g['keys'], g['failed_keys'], g['bytes']) == (2, 12, 2, 1 << 20), g\n"
    "assert 2000000 <= g['lat_ns']['p50'] <= g['lat_ns']['p99'], g\n"
    "assert io['lookup']['calls'] == io['put']['calls'] == io['remove']['calls'] == 0, io\n"
    "assert list(io['stages']) == ['validate', 'index', 'copy_in', 'copy_out', 'ssd_read']\n"
    "co = io['stages']['copy_out']\n"
    "assert (co['batches'], co['total_ns']) == (2, 3000), co\n"
    "assert 1000 <= co['p50'] <= co['p99'] and co['p99'] >= 2000, co\n"
    "assert io['stages']['copy_in'] == {'batches': 0, 'total_ns': 0, 'p50': 0, 'p90': 0,\n"
    "    'p99': 0}, io['stages']['copy_in']\n"
    "assert io['key_errors'] == {'ENOENT': 1, 'EMSGSIZE': 1}, io['key_errors']\n";

static void test_render_json(void **state)
{
	static struct kv_stats st;
	const struct kv_stats_gauges g = {
	    .kg_pool_size = 1ull << 30,
	    .kg_pool_used = 1ull << 20,
	    .kg_pool_reserved = 2ull << 21,
	    .kg_cow_bytes = 3ull << 21,
	    .kg_keys = 7,
	    .kg_dirs = 3,
	    .kg_symlinks = 5,
	    .kg_specials = 4,
	    .kg_open = 2,
	    .kg_bytes = 123456789012ull,
	    .kg_last_seq = UINT64_MAX,
	};
	char *buf = NULL, *json_path, *py_path, *cmd, *p;
	size_t len = 0, cmd_len = 0;
	FILE *f;
	uint64_t now;
	int rc;

	(void)state;
	if (system("command -v python3 >/dev/null 2>&1") != 0)
		skip(); /* python3 is the JSON parser this test trusts; none here */
	kv_stats_init(&st);
	now = kv_now_ns();
	kv_stats_op(&st, KV_OP_READ, now - 5000000, 4096, 0);
	kv_stats_op(&st, KV_OP_READ, now - 5000000, 8192, 0);
	kv_stats_op(&st, KV_OP_READ, now - 5000000, 0, -EIO);
	kv_stats_op(&st, KV_OP_MKDIR, now, 0, -EEXIST);
	kv_stats_op(&st, KV_OP_WRITE, now, 0, -ENOSPC);
	kv_stats_op(&st, KV_OP_IOCTL, now, 0, -ENOSPC);
	kv_stats_op(&st, KV_OP_OTHER, now, 0, -4095);
	{
		uint64_t ns[KV_STAGE__COUNT] = {[KV_STAGE_COPY_OUT] = 1000};

		kv_stats_ioc(&st, KV_IOC_GET, now - 2000000, 4, 0, 1 << 19, ns);
		ns[KV_STAGE_COPY_OUT] = 2000;
		kv_stats_ioc(&st, KV_IOC_GET, now - 2000000, 8, 2, 1 << 19, ns);
		kv_stats_key_error(&st, -ENOENT);
		kv_stats_key_error(&st, -EMSGSIZE);
		atomic_store(&st.ks_regions, 3);
		atomic_store(&st.ks_layouts, 1);
	}

	assert_int_equal(kv_stats_render(&st, &g, &buf, &len), 0);
	assert_non_null(buf);
	assert_int_equal(len, strlen(buf));
	assert_true(len > 2 && buf[len - 1] == '\n');
	/* Uptime: seconds with exactly three decimals. */
	p = strstr(buf, "\"uptime_s\": ");
	assert_non_null(p);
	p += strlen("\"uptime_s\": ");
	p += strspn(p, "0123456789");
	assert_int_equal(p[0], '.');
	assert_int_equal(strspn(p + 1, "0123456789"), 3);

	json_path = write_temp(buf, len);
	py_path = write_temp(json_checker, sizeof(json_checker) - 1);
	f = open_memstream(&cmd, &cmd_len);
	assert_non_null(f);
	fprintf(f, "python3 %s %s", py_path, json_path);
	for (int op = 0; op < KV_OP__COUNT; op++)
		fprintf(f, " %s", kv_op_name((enum kv_op)op));
	assert_int_equal(fclose(f), 0);
	rc = system(cmd);
	unlink(json_path);
	unlink(py_path);
	if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 0))
		fail_msg("python3 rejected the stats JSON:\n%s", buf);
	free(cmd);
	free(py_path);
	free(json_path);
	free(buf);
}

/* Fresh stats: an empty "errors" object, every op at zero; still valid JSON. */
static void test_render_empty(void **state)
{
	static struct kv_stats st;
	const struct kv_stats_gauges g = {0};
	char *buf = NULL, *path, *cmd;
	size_t len = 0;
	int rc;

	(void)state;
	if (system("command -v python3 >/dev/null 2>&1") != 0)
		skip();
	kv_stats_init(&st);
	assert_int_equal(kv_stats_render(&st, &g, &buf, &len), 0);
	assert_non_null(strstr(buf, "\"errors\": {}"));
	assert_non_null(strstr(buf, "\"pool\": {\"size\": 0, \"used\": 0, \"free\": 0, "
				    "\"reserved\": 0, \"cow_bytes\": 0}"));
	for (int op = 0; op < KV_OP__COUNT; op++) {
		char *key;

		assert_true(asprintf(&key, "\"%s\": {\"calls\": 0,", kv_op_name((enum kv_op)op)) >
			    0);
		assert_non_null(strstr(buf, key));
		free(key);
	}
	path = write_temp(buf, len);
	assert_true(asprintf(&cmd,
			     "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
			     "assert d[\"errors\"] == {} and len(d[\"ops\"]) == %d' %s",
			     KV_OP__COUNT, path) > 0);
	rc = system(cmd);
	unlink(path);
	if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 0))
		fail_msg("python3 rejected the empty stats JSON:\n%s", buf);
	free(cmd);
	free(path);
	free(buf);
}

/* Used pool above its size (gauges sampled at different instants): free is 0. */
static void test_render_pool_overcommit(void **state)
{
	static struct kv_stats st;
	const struct kv_stats_gauges g = {.kg_pool_size = 10, .kg_pool_used = 11};
	char *buf = NULL;
	size_t len = 0;

	(void)state;
	kv_stats_init(&st);
	assert_int_equal(kv_stats_render(&st, &g, &buf, &len), 0);
	assert_non_null(strstr(buf, "\"pool\": {\"size\": 10, \"used\": 11, \"free\": 0, "
				    "\"reserved\": 0, \"cow_bytes\": 0}"));
	free(buf);
}

/* The shared tier's section (rados/shared.h), as fs/ctl.c appends it: valid JSON, exact. */
static void test_render_rados(void **state)
{
	static struct kv_stats st;
	struct kv_shared_stats s = {
	    .ss_state = KV_SHARED_UNREACHABLE,
	    .ss_connect_attempts = 3,
	    .ss_connect_failures = 2,
	    .ss_last_err = -ETIMEDOUT,
	    .ss_bytes_written = 1ull << 40,
	    .ss_timeouts = 7,
	    .ss_hits = 5,
	    .ss_prefetched = 3,
	    .ss_backlog = 2,
	    .ss_backlog_bytes = 4096,
	    .ss_replayed = 9,
	    .ss_lat_p99 = 123456,
	};
	struct kv_stats_gauges g = {0};
	char *sec = NULL, *buf = NULL, *path, *cmd;
	size_t len = 0;
	int rc;

	(void)state;
	if (system("command -v python3 >/dev/null 2>&1") != 0)
		skip();
	strcpy(s.ss_last_error_text, "connect: Connection timed out");
	assert_int_equal(kv_shared_render("kv\"pool", "ns\\1\n", &s, &sec), 0);
	assert_non_null(strstr(sec, "\"state\": \"unreachable\""));
	assert_non_null(strstr(sec, "\"last_error\": \"ETIMEDOUT\""));
	g.kg_extra = sec;
	kv_stats_init(&st);
	assert_int_equal(kv_stats_render(&st, &g, &buf, &len), 0);
	path = write_temp(buf, len);
	assert_true(
	    asprintf(&cmd,
		     "python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[\"rados\"]; "
		     "assert r == {\"state\": \"unreachable\", \"pool\": \"kv\\\"pool\", "
		     "\"namespace\": \"ns\\\\1\\n\", \"connect_attempts\": 3, "
		     "\"connect_failures\": 2, \"last_error\": \"ETIMEDOUT\", "
		     "\"last_error_text\": \"connect: Connection timed out\", "
		     "\"objects_read\": 0, \"objects_written\": 0, \"bytes_read\": 0, "
		     "\"bytes_written\": 2**40, \"errors\": 0, \"timeouts\": 7, "
		     "\"healthy\": False, \"hits\": 5, \"prefetched\": 3, \"puts\": 0, \"deletes\": 0, "
		     "\"backlog\": 2, \"backlog_bytes\": 4096, \"replayed\": 9, \"gc_sweeps\": 0, "
		     "\"gc_removed\": 0, "
		     "\"lat_ns\": {\"p50\": 0, \"p90\": 0, \"p99\": 123456}}, r' %s",
		     path) > 0);
	rc = system(cmd);
	unlink(path);
	if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 0))
		fail_msg("python3 rejected the rados section:\n%s", buf);
	free(cmd);
	free(path);
	free(buf);
	free(sec);

	/* before any failure: last_error is empty; every state has its name */
	memset(&s, 0, sizeof(s));
	s.ss_state = KV_SHARED_CONNECTED;
	assert_int_equal(kv_shared_render("p", "", &s, &sec), 0);
	assert_non_null(strstr(sec, "\"state\": \"connected\", \"pool\": \"p\", "
				    "\"namespace\": \"\", \"connect_attempts\": 0, "
				    "\"connect_failures\": 0, \"last_error\": \"\""));
	free(sec);
	assert_string_equal(kv_shared_state_name(KV_SHARED_CONNECTING), "connecting");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hist_buckets_tile_range),
	    cmocka_unit_test(test_hist_mapping_monotonic),
	    cmocka_unit_test(test_hist_empty),
	    cmocka_unit_test(test_hist_percentiles_uniform),
	    cmocka_unit_test(test_hist_percentiles_small),
	    cmocka_unit_test(test_op_names),
	    cmocka_unit_test(test_op_counting),
	    cmocka_unit_test(test_op_future_start),
	    cmocka_unit_test(test_concurrent_totals),
	    cmocka_unit_test(test_render_json),
	    cmocka_unit_test(test_render_empty),
	    cmocka_unit_test(test_render_pool_overcommit),
	    cmocka_unit_test(test_render_rados),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
