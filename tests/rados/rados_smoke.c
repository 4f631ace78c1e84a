// SPDX-License-Identifier: MIT
/*
 * rados_smoke — proves that the test cluster of scripts/ceph-cluster.sh and
 * librados's C API do what the RADOS tier will rely on. Built and driven by
 * tests/integration/test_rados_cluster.py; not part of the kvfs build.
 *
 *   rados_smoke CONF POOL io           objects, omap compare-and-set, aio
 *                                      reads, xattrs, stat, listing
 *   rados_smoke CONF POOL verify       the objects `io` left are still there
 *                                      (after an OSD restart)
 *   rados_smoke CONF POOL osd-down S   with the OSD stopped: a write, a read
 *                                      and an aio read each fail with
 *                                      -ETIMEDOUT within S seconds (+ slack)
 *   rados_smoke CONF POOL mon-down S   with the monitor stopped: connecting
 *                                      fails within S seconds (+ slack)
 *
 * Every mode connects with rados_osd_op_timeout, rados_mon_op_timeout and
 * client_mount_timeout set (S, default 10), so no call can block forever.
 * Objects go to the namespace "smoke" of POOL. Prints one line per check;
 * exits 0 when all passed, 1 on the first failure, 2 on bad usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rados/librados.h>

#define SMOKE_NS       "smoke"
#define SMOKE_DIR      "smoke.dir"
#define SMOKE_NDATA    16
#define SMOKE_DATA_LEN (1u << 20) /* each data object: 1 MiB */
#define SMOKE_SLACK    5.0	  /* seconds allowed beyond a timeout */

static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("FAIL: ", stdout);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	exit(1);
}

static void ok(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ok: ", stdout);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Fails unless r == want (both 0 or -errno). */
static void expect(int r, int want, const char *what)
{
	if (r != want)
		fail("%s returned %d (%s), expected %d (%s)", what, r, strerror(-r), want,
		     strerror(-want));
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Deterministic bytes of data object i. */
static void fill(char *buf, size_t len, unsigned int i)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1);

	for (size_t k = 0; k < len; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[k] = (char)x;
	}
}

static void data_name(char *name, size_t len, unsigned int i)
{
	snprintf(name, len, "smoke.data.%02u", i);
}

/*
 * Connects to the cluster of `conf` with every client timeout set to
 * `timeout_s`. The timeouts are set after reading the file, so they win over
 * it. Returns 0 or -errno (rados_connect's).
 */
static int smoke_connect(const char *conf, const char *timeout_s, rados_t *out)
{
	rados_t c;
	int r;

	r = rados_create2(&c, "ceph", "client.admin", 0);
	if (r < 0)
		return r;
	r = rados_conf_read_file(c, conf);
	if (r < 0)
		goto out_shutdown;
	static const char *const opts[] = {"rados_osd_op_timeout", "rados_mon_op_timeout",
					   "client_mount_timeout"};
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		r = rados_conf_set(c, opts[i], timeout_s);
		if (r < 0)
			goto out_shutdown;
	}
	r = rados_connect(c);
	if (r < 0)
		goto out_shutdown;
	*out = c;
	return 0;

out_shutdown:
	rados_shutdown(c);
	return r;
}

static rados_ioctx_t open_pool(rados_t c, const char *pool)
{
	rados_ioctx_t io;
	int r = rados_ioctx_create(c, pool, &io);

	if (r < 0)
		fail("rados_ioctx_create(%s): %s", pool, strerror(-r));
	rados_ioctx_set_namespace(io, SMOKE_NS);
	return io;
}

/*
 * The directory entry protocol the tier will use: one omap key per child
 * whose value starts with the entry's version; a put replaces it only if it
 * still holds the version the writer read (omap_cmp EQ), in the same write
 * op as the new value (omap_set), so the op is all or nothing.
 * Returns rados_write_op_operate's result; *prval gets the cmp's own.
 */
static int dir_cas(rados_ioctx_t io, const char *key, const char *expect_val, const char *new_val,
		   int *prval)
{
	rados_write_op_t op = rados_create_write_op();
	size_t klen = strlen(key), vlen = strlen(new_val);
	int r;

	*prval = 12345; /* shows whether librados wrote it */
	rados_write_op_omap_cmp(op, key, LIBRADOS_CMPXATTR_OP_EQ, expect_val, strlen(expect_val),
				prval);
	rados_write_op_omap_set2(op, &key, &new_val, &klen, &vlen, 1);
	r = rados_write_op_operate(op, io, SMOKE_DIR, NULL, 0);
	rados_release_write_op(op);
	return r;
}

/* Reads omap key `key` of SMOKE_DIR into val; returns its length or -errno. */
static int dir_get(rados_ioctx_t io, const char *key, char *val, size_t len)
{
	rados_read_op_t op = rados_create_read_op();
	rados_omap_iter_t it = NULL;
	size_t klen = strlen(key), vlen = 0;
	char *k = NULL, *v = NULL;
	int prval = 0, r;

	rados_read_op_omap_get_vals_by_keys2(op, &key, 1, &klen, &it, &prval);
	r = rados_read_op_operate(op, io, SMOKE_DIR, 0);
	rados_release_read_op(op);
	if (r < 0)
		return r;
	if (prval < 0) {
		rados_omap_get_end(it);
		return prval;
	}
	r = rados_omap_get_next2(it, &k, &v, &klen, &vlen);
	if (r == 0 && k == NULL)
		r = -ENOENT;
	else if (r == 0 && vlen < len) {
		memcpy(val, v, vlen);
		val[vlen] = '\0';
		r = (int)vlen;
	} else if (r == 0)
		r = -ERANGE;
	rados_omap_get_end(it);
	return r;
}

static void check_omap_cas(rados_ioctx_t io)
{
	char val[64];
	int prval, r;

	/* omap_cmp on an object that does not exist */
	rados_remove(io, SMOKE_DIR);
	r = dir_cas(io, "k", "", "v1", &prval);
	expect(r, -ENOENT, "omap_cmp on a missing object");
	ok("omap_cmp on a missing object: %d (%s), prval %d", r, strerror(-r), prval);

	/* creating the object in the same op makes the first CAS work */
	rados_write_op_t op = rados_create_write_op();
	const char *key = "k0", *v = "v0";
	size_t klen = 2, vlen = 2;
	rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, NULL);
	rados_write_op_omap_cmp(op, key, LIBRADOS_CMPXATTR_OP_EQ, "", 0, &prval);
	rados_write_op_omap_set2(op, &key, &v, &klen, &vlen, 1);
	r = rados_write_op_operate(op, io, SMOKE_DIR, NULL, 0);
	rados_release_write_op(op);
	expect(r, 0, "create + omap_cmp + omap_set on a missing object");
	ok("create(IDEMPOTENT) + omap_cmp + omap_set in one op on a missing object works");

	/* a missing key compares as the empty value: "create if absent" */
	r = dir_cas(io, "k", "", "v1", &prval);
	expect(r, 0, "CAS '' -> v1 on a missing key");
	ok("CAS on a missing key with expected '' succeeds (prval %d)", prval);

	r = dir_cas(io, "k", "v1", "v2", &prval);
	expect(r, 0, "CAS v1 -> v2");
	ok("CAS v1 -> v2 succeeds (prval %d)", prval);

	r = dir_cas(io, "k", "v1", "v3", &prval);
	expect(r, -ECANCELED, "stale CAS v1 -> v3");
	ok("stale CAS v1 -> v3 fails: %d (%s), prval %d", r, strerror(-r), prval);

	r = dir_cas(io, "k", "", "v4", &prval);
	expect(r, -ECANCELED, "create-if-absent CAS on an existing key");
	ok("create-if-absent on an existing key fails: %d (%s)", r, strerror(-r));

	r = dir_get(io, "k", val, sizeof(val));
	if (r < 0 || strcmp(val, "v2") != 0)
		fail("after the failed CAS the entry is %d '%s', expected 'v2'", r,
		     r < 0 ? "" : val);
	ok("the failed CAS changed nothing: k = %s", val);

	r = dir_get(io, "absent", val, sizeof(val));
	expect(r, -ENOENT, "reading a missing omap key");
	ok("reading a missing omap key: the read op succeeds with no entry");

	/* other comparisons: GT on the bytes, NE as the OSD knows it */
	op = rados_create_write_op();
	rados_write_op_omap_cmp(op, "k", LIBRADOS_CMPXATTR_OP_GT, "v1", 2, &prval);
	r = rados_write_op_operate(op, io, SMOKE_DIR, NULL, 0);
	rados_release_write_op(op);
	expect(r, 0, "omap_cmp GT ('v2' > 'v1')");
	op = rados_create_write_op();
	rados_write_op_omap_cmp(op, "k", LIBRADOS_CMPXATTR_OP_NE, "v1", 2, &prval);
	r = rados_write_op_operate(op, io, SMOKE_DIR, NULL, 0);
	rados_release_write_op(op);
	ok("omap_cmp GT works; omap_cmp NE: %d (%s)", r, strerror(-r));

	/* an omap delete guarded the same way (a tombstone-then-remove) */
	op = rados_create_write_op();
	key = "k";
	klen = 1;
	rados_write_op_omap_cmp(op, "k", LIBRADOS_CMPXATTR_OP_EQ, "v2", 2, &prval);
	rados_write_op_omap_rm_keys2(op, &key, &klen, 1);
	r = rados_write_op_operate(op, io, SMOKE_DIR, NULL, 0);
	rados_release_write_op(op);
	expect(r, 0, "guarded omap_rm_keys");
	expect(dir_get(io, "k", val, sizeof(val)), -ENOENT, "reading the removed key");
	ok("guarded omap key removal");
}

static void check_objects(rados_ioctx_t io, char **bufs)
{
	char name[64], got[64];
	uint64_t size;
	time_t mtime;
	int r;

	for (unsigned int i = 0; i < SMOKE_NDATA; i++) {
		data_name(name, sizeof(name), i);
		fill(bufs[i], SMOKE_DATA_LEN, i);
		r = rados_write_full(io, name, bufs[i], SMOKE_DATA_LEN);
		expect(r, 0, "rados_write_full");
	}
	ok("wrote %u objects of %u bytes", SMOKE_NDATA, SMOKE_DATA_LEN);

	data_name(name, sizeof(name), 0);
	r = rados_stat(io, name, &size, &mtime);
	expect(r, 0, "rados_stat");
	if (size != SMOKE_DATA_LEN || labs((long)(time(NULL) - mtime)) > 60)
		fail("rados_stat: size %" PRIu64 ", mtime %ld", size, (long)mtime);
	ok("rados_stat: size %" PRIu64 ", mtime %lds ago", size, (long)(time(NULL) - mtime));
	r = rados_stat(io, "smoke.absent", &size, &mtime);
	expect(r, -ENOENT, "rados_stat of a missing object");

	/* xattrs: set, get, exclusive create, compare-and-set */
	r = rados_setxattr(io, name, "kvfs.seq", "42", 2);
	expect(r, 0, "rados_setxattr");
	r = rados_getxattr(io, name, "kvfs.seq", got, sizeof(got));
	if (r != 2 || memcmp(got, "42", 2) != 0)
		fail("rados_getxattr returned %d", r);
	r = rados_getxattr(io, name, "kvfs.absent", got, sizeof(got));
	ok("xattr set/get; a missing xattr: %d (%s)", r, strerror(-r));

	rados_write_op_t op = rados_create_write_op();
	rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
	rados_write_op_setxattr(op, "kvfs.seq", "1", 1);
	r = rados_write_op_operate(op, io, name, NULL, 0);
	rados_release_write_op(op);
	expect(r, -EEXIST, "exclusive create of an existing object");
	op = rados_create_write_op();
	rados_write_op_cmpxattr(op, "kvfs.seq", LIBRADOS_CMPXATTR_OP_EQ, "41", 2);
	rados_write_op_setxattr(op, "kvfs.seq", "43", 2);
	r = rados_write_op_operate(op, io, name, NULL, 0);
	rados_release_write_op(op);
	expect(r, -ECANCELED, "stale cmpxattr");
	ok("exclusive create of an existing object: -EEXIST; stale cmpxattr: -ECANCELED");

	r = rados_read(io, "smoke.absent", got, sizeof(got), 0);
	expect(r, -ENOENT, "rados_read of a missing object");
	r = rados_remove(io, "smoke.absent");
	expect(r, -ENOENT, "rados_remove of a missing object");
	ok("read/remove of a missing object: -ENOENT");
}

/* Reads every data object back, all SMOKE_NDATA reads in flight at once. */
static void check_aio_reads(rados_ioctx_t io, char **bufs)
{
	rados_completion_t comp[SMOKE_NDATA];
	char *got = malloc((size_t)SMOKE_NDATA * SMOKE_DATA_LEN);
	char name[64];
	double t0 = now();
	int r;

	if (!got)
		fail("out of memory");
	for (unsigned int i = 0; i < SMOKE_NDATA; i++) {
		data_name(name, sizeof(name), i);
		r = rados_aio_create_completion2(NULL, NULL, &comp[i]);
		expect(r, 0, "rados_aio_create_completion2");
		r = rados_aio_read(io, name, comp[i], got + (size_t)i * SMOKE_DATA_LEN,
				   SMOKE_DATA_LEN, 0);
		expect(r, 0, "rados_aio_read submit");
	}
	for (unsigned int i = 0; i < SMOKE_NDATA; i++) {
		rados_aio_wait_for_complete(comp[i]);
		r = rados_aio_get_return_value(comp[i]);
		rados_aio_release(comp[i]);
		if (r != (int)SMOKE_DATA_LEN)
			fail("aio read %u returned %d", i, r);
		if (bufs && memcmp(got + (size_t)i * SMOKE_DATA_LEN, bufs[i], SMOKE_DATA_LEN) != 0)
			fail("aio read %u: bytes differ", i);
	}
	ok("%u aio reads in flight: every byte matches (%.1f ms)", SMOKE_NDATA, (now() - t0) * 1e3);

	/* a read past the end returns 0 bytes; of a missing object, -ENOENT */
	rados_aio_create_completion2(NULL, NULL, &comp[0]);
	data_name(name, sizeof(name), 0);
	rados_aio_read(io, name, comp[0], got, 4096, 2 * SMOKE_DATA_LEN);
	rados_aio_wait_for_complete(comp[0]);
	r = rados_aio_get_return_value(comp[0]);
	rados_aio_release(comp[0]);
	expect(r, 0, "aio read past the end");
	rados_aio_create_completion2(NULL, NULL, &comp[0]);
	rados_aio_read(io, "smoke.absent", comp[0], got, 4096, 0);
	rados_aio_wait_for_complete(comp[0]);
	r = rados_aio_get_return_value(comp[0]);
	rados_aio_release(comp[0]);
	expect(r, -ENOENT, "aio read of a missing object");
	ok("aio read past the end: 0; of a missing object: -ENOENT");
	free(got);
}

/*
 * Lists the pool, every namespace, as a GC sweep would; returns how many
 * objects of SMOKE_NS whose names start with "smoke." it saw.
 */
static unsigned int list_smoke(rados_ioctx_t io)
{
	rados_list_ctx_t ctx;
	const char *entry, *key, *nspace;
	size_t elen, klen, nlen;
	unsigned int n = 0, all = 0;
	int r;

	rados_ioctx_set_namespace(io, LIBRADOS_ALL_NSPACES);
	r = rados_nobjects_list_open(io, &ctx);
	expect(r, 0, "rados_nobjects_list_open");
	while ((r = rados_nobjects_list_next2(ctx, &entry, &key, &nspace, &elen, &klen, &nlen)) ==
	       0) {
		all++;
		if (nlen == strlen(SMOKE_NS) && memcmp(nspace, SMOKE_NS, nlen) == 0 && elen > 6 &&
		    memcmp(entry, "smoke.", 6) == 0)
			n++;
	}
	rados_nobjects_list_close(ctx);
	rados_ioctx_set_namespace(io, SMOKE_NS);
	expect(r, -ENOENT, "the end of the listing");
	ok("listing all namespaces: %u objects, %u of them smoke.* in '%s'", all, n, SMOKE_NS);
	return n;
}

static int mode_io(const char *conf, const char *pool, const char *timeout)
{
	char *bufs[SMOKE_NDATA];
	rados_t c;
	int r;

	double t0 = now();
	r = smoke_connect(conf, timeout, &c);
	expect(r, 0, "connect");
	ok("connected in %.1f ms", (now() - t0) * 1e3);
	rados_ioctx_t io = open_pool(c, pool);

	for (unsigned int i = 0; i < SMOKE_NDATA; i++) {
		bufs[i] = malloc(SMOKE_DATA_LEN);
		if (!bufs[i])
			fail("out of memory");
	}
	check_objects(io, bufs);
	check_omap_cas(io);
	check_aio_reads(io, bufs);
	unsigned int n = list_smoke(io);
	if (n != SMOKE_NDATA + 1)
		fail("listing found %u smoke objects, expected %u", n, SMOKE_NDATA + 1);

	/* the default namespace does not see them */
	rados_ioctx_set_namespace(io, "");
	char name[64];
	uint64_t size;
	time_t mtime;
	data_name(name, sizeof(name), 0);
	r = rados_stat(io, name, &size, &mtime);
	expect(r, -ENOENT, "stat in another namespace");
	ok("another namespace does not see them");

	for (unsigned int i = 0; i < SMOKE_NDATA; i++)
		free(bufs[i]);
	rados_ioctx_destroy(io);
	rados_shutdown(c);
	return 0;
}

static int mode_verify(const char *conf, const char *pool, const char *timeout)
{
	char *bufs[SMOKE_NDATA];
	rados_t c;
	int r;

	r = smoke_connect(conf, timeout, &c);
	expect(r, 0, "connect");
	rados_ioctx_t io = open_pool(c, pool);
	for (unsigned int i = 0; i < SMOKE_NDATA; i++) {
		bufs[i] = malloc(SMOKE_DATA_LEN);
		if (!bufs[i])
			fail("out of memory");
		fill(bufs[i], SMOKE_DATA_LEN, i);
	}
	check_aio_reads(io, bufs);
	for (unsigned int i = 0; i < SMOKE_NDATA; i++)
		free(bufs[i]);
	rados_ioctx_destroy(io);
	rados_shutdown(c);
	return 0;
}

/* Fails unless `elapsed` is within the timeout plus slack. */
static void within(double elapsed, double timeout, const char *what, int r)
{
	if (elapsed > timeout + SMOKE_SLACK)
		fail("%s took %.1f s, timeout %.0f s", what, elapsed, timeout);
	ok("%s: %d (%s) after %.1f s (timeout %.0f s)", what, r, strerror(-r), elapsed, timeout);
}

static int mode_osd_down(const char *conf, const char *pool, const char *timeout)
{
	double limit = atof(timeout), t0;
	char buf[4096], name[64];
	rados_completion_t comp;
	rados_t c;
	int r;

	t0 = now();
	r = smoke_connect(conf, timeout, &c);
	expect(r, 0, "connect with the OSD down");
	ok("connect with the OSD down works (the monitor answers) in %.1f ms", (now() - t0) * 1e3);
	rados_ioctx_t io = open_pool(c, pool);
	data_name(name, sizeof(name), 0);

	t0 = now();
	r = rados_write_full(io, "smoke.down", "x", 1);
	expect(r, -ETIMEDOUT, "write with the OSD down");
	within(now() - t0, limit, "write with the OSD down", r);

	t0 = now();
	r = rados_read(io, name, buf, sizeof(buf), 0);
	expect(r, -ETIMEDOUT, "read with the OSD down");
	within(now() - t0, limit, "read with the OSD down", r);

	t0 = now();
	rados_aio_create_completion2(NULL, NULL, &comp);
	r = rados_aio_read(io, name, comp, buf, sizeof(buf), 0);
	expect(r, 0, "aio read submit with the OSD down");
	rados_aio_wait_for_complete(comp);
	r = rados_aio_get_return_value(comp);
	rados_aio_release(comp);
	expect(r, -ETIMEDOUT, "aio read with the OSD down");
	within(now() - t0, limit, "aio read with the OSD down", r);

	rados_ioctx_destroy(io);
	rados_shutdown(c);
	return 0;
}

static int mode_mon_down(const char *conf, const char *timeout)
{
	double t0 = now();
	rados_t c;
	int r;

	r = smoke_connect(conf, timeout, &c);
	if (r == 0)
		fail("connect succeeded with the monitor down");
	within(now() - t0, atof(timeout), "connect with the monitor down", r);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: %s CONF POOL io|verify|osd-down|mon-down [TIMEOUT_S]\n",
			argv[0]);
		return 2;
	}
	const char *conf = argv[1], *pool = argv[2], *mode = argv[3];
	const char *timeout = argc == 5 ? argv[4] : "10";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(mode, "io") == 0)
		return mode_io(conf, pool, timeout);
	if (strcmp(mode, "verify") == 0)
		return mode_verify(conf, pool, timeout);
	if (strcmp(mode, "osd-down") == 0)
		return mode_osd_down(conf, pool, timeout);
	if (strcmp(mode, "mon-down") == 0)
		return mode_mon_down(conf, timeout);
	fprintf(stderr, "%s: unknown mode %s\n", argv[0], mode);
	return 2;
}
