/* SPDX-License-Identifier: MIT */
/*
 * kvfs-bench — the KV-connector benchmark: the work an inference engine's
 * KV connector gives a store, through the ioctl path or through POSIX I/O.
 *
 *	kvfs-bench [options] DIR
 *
 * The model has --layers=L layers; like vLLM's KV cache, each layer is one
 * tensor (per thread: --blocks=N blocks of --layer-bytes=B bytes, NUMA-local
 * and page-aligned, tensor l at l * N * B), so block b of layer l lies at
 * base_l + b * B. A KV block is one key whose value is the concatenation of
 * its slice in every layer (L * B bytes). Each of --requests=R requests
 * (spread over --threads=T threads, request r on thread r % T) handles N
 * such blocks, named by a 64-bit hash of (r, b) in hex, directly in DIR:
 *
 *   write     store the N blocks
 *   is_exist  ask whether the N blocks are stored (a miss is a failure)
 *   get       load the N blocks and check every byte (a short or failed
 *             get, or one wrong byte, is a failure)
 *   all       write, then is_exist, then get
 *   memcpy    no store at all: a single copy of the same bytes a get moves
 *             (per block, its L slices from a contiguous source into the
 *             layer tensors) — the baseline for get. As each get reads
 *             values no earlier request read, each request copies from a
 *             source no earlier request touched: the source is as large as
 *             all of the thread's requests (a source reused by every
 *             request would come from the CPU cache, not from DRAM as a
 *             get's values do, and the baseline would be too fast)
 *
 * --path=ioctl registers each thread's tensors as one region (--region=shm:
 * shared memory the daemon maps; --region=proc: process memory the daemon
 * reaches with process_vm_readv/writev) and one layout with a segment per
 * layer, and sends each request as one libkvfs batch call (lookup, put or
 * get of N keys by (name, layout, block)) with the trace id
 * scenario << 48 | (request + 1) (scenario 1 = write, 2 = is_exist,
 * 3 = get; 3 << 48 alone is the untimed get that warms a shm region, see
 * warm_region), so a slow request can be found in the daemon's --trace file.
 * --path=posix does the same work with open/writev/close, stat and
 * open/readv/close per block, the layer slices gathered by the iovec.
 *
 * Timing covers the request calls only: filling the source tensors before a
 * write, poisoning the destination before a get and checking it after are
 * not timed, nor is one get before the timed ones that warms the daemon's
 * mapping of a --region=shm region (see warm_region). MiB/s is the sum over threads of (bytes a thread moved / time
 * it spent inside requests); latency percentiles are over all requests.
 * Exit status: 0, 1 when any failure was counted, 2 on bad usage or a
 * setup error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <numa.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kvfs/kvfs.h"
#include "kvfs/kvfs_ioctl.h"

enum scenario { SC_WRITE, SC_IS_EXIST, SC_GET, SC_MEMCPY };
static const char *const sc_names[] = {"write", "is_exist", "get", "memcpy"};

enum path { PATH_IOCTL, PATH_POSIX };

/* The command line, immutable once the threads start. */
struct opts {
	const char *o_dir;
	uint32_t o_blocks, o_layers, o_threads;
	uint64_t o_layer_bytes, o_requests;
	enum path o_path;
	bool o_proc_region; /* --region=proc */
	bool o_json;
	int o_nscen;
	enum scenario o_scen[3];
};

/* One worker: its tensors, its ioctl ids, and what it measured in one scenario. */
struct worker {
	const struct opts *w_o;
	struct kvfs *w_kv; /* shared by every worker */
	int w_dirfd;
	unsigned w_id;
	uint8_t *w_mem; /* L tensors of N * B bytes */
	uint8_t *w_src; /* memcpy: N * L * B bytes per request of this worker */
	uint64_t w_src_len;
	uint32_t w_region, w_layout;
	enum scenario w_scen;
	/* results of the current scenario */
	uint64_t w_requests, w_keys, w_bytes, w_failures, w_busy_ns;
	double *w_lat_us; /* one per request of this worker */
	char w_err[160];  /* the first failure, for the report */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static void block_name(char *buf, uint64_t r, uint32_t b)
{
	snprintf(buf, 17, "%016" PRIx64, mix64(r << 20 | b));
}

static uint8_t *slice(const struct worker *w, uint32_t layer, uint32_t b)
{
	const struct opts *o = w->w_o;

	return w->w_mem + ((uint64_t)layer * o->o_blocks + b) * o->o_layer_bytes;
}

/* The bytes of (request, block, layer): 64-bit words seed + i * golden. */
static uint64_t slice_seed(uint64_t r, uint32_t b, uint32_t layer)
{
	return mix64((r << 20 | b) * 4099 + layer);
}

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
	uint64_t i, n = len / 8, w;

	for (i = 0; i < n; i++) {
		w = seed + i * 0x9E3779B97F4A7C15ull;
		memcpy(p + i * 8, &w, 8);
	}
	w = seed + n * 0x9E3779B97F4A7C15ull;
	memcpy(p + n * 8, &w, len % 8);
}

/* Returns the offset of the first wrong byte, or len. */
static uint64_t check(const uint8_t *p, uint64_t len, uint64_t seed)
{
	uint64_t i, n = len / 8, w;

	for (i = 0; i < n; i++) {
		w = seed + i * 0x9E3779B97F4A7C15ull;
		if (memcmp(p + i * 8, &w, 8))
			break;
	}
	for (uint64_t j = i * 8; j < len; j++) {
		w = seed + (j / 8) * 0x9E3779B97F4A7C15ull;
		if (p[j] != ((const uint8_t *)&w)[j % 8])
			return j;
	}
	return len;
}

static void fail(struct worker *w, uint64_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(struct worker *w, uint64_t n, const char *fmt, ...)
{
	va_list ap;

	if (w->w_failures == 0 && n) {
		va_start(ap, fmt);
		vsnprintf(w->w_err, sizeof(w->w_err), fmt, ap);
		va_end(ap);
	}
	w->w_failures += n;
}

/* The untimed part before a request: sources for a write, poison for a get. */
static void prepare(struct worker *w, uint64_t r)
{
	const struct opts *o = w->w_o;

	for (uint32_t b = 0; b < o->o_blocks; b++)
		for (uint32_t l = 0; l < o->o_layers; l++) {
			if (w->w_scen == SC_WRITE)
				fill(slice(w, l, b), o->o_layer_bytes, slice_seed(r, b, l));
			else if (w->w_scen == SC_GET)
				memset(slice(w, l, b), 0xA5, o->o_layer_bytes);
		}
}

/* The untimed part after a get: every byte of every block. */
static void verify(struct worker *w, uint64_t r, const bool *bad)
{
	const struct opts *o = w->w_o;
	char name[17];

	for (uint32_t b = 0; b < o->o_blocks; b++) {
		if (bad[b])
			continue;
		for (uint32_t l = 0; l < o->o_layers; l++) {
			uint64_t at = check(slice(w, l, b), o->o_layer_bytes, slice_seed(r, b, l));

			if (at < o->o_layer_bytes) {
				block_name(name, r, b);
				fail(w, 1, "get %s: wrong byte at layer %u offset %" PRIu64, name,
				     l, at);
				break;
			}
		}
	}
}

static ssize_t full_io(int fd, struct iovec *iov, int n, bool wr)
{
	ssize_t done = 0, k;

	while (n > 0) {
		k = wr ? writev(fd, iov, n) : readv(fd, iov, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		done += k;
		while (n > 0 && (size_t)k >= iov->iov_len) {
			k -= (ssize_t)iov->iov_len;
			iov++, n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + k;
			iov->iov_len -= (size_t)k;
		}
	}
	return done;
}

/* One POSIX block: open/writev/close, stat, or open/readv/close (+ EOF check). */
static void posix_block(struct worker *w, uint64_t r, uint32_t b, struct iovec *iov, bool *bad)
{
	const struct opts *o = w->w_o;
	uint64_t want = (uint64_t)o->o_layers * o->o_layer_bytes;
	char name[17], extra;
	struct stat stb;
	ssize_t k;
	int fd;

	block_name(name, r, b);
	if (w->w_scen == SC_IS_EXIST) {
		if (fstatat(w->w_dirfd, name, &stb, 0))
			fail(w, 1, "stat %s: %s", name, strerror(errno));
		return;
	}
	for (uint32_t l = 0; l < o->o_layers; l++)
		iov[l] = (struct iovec){slice(w, l, b), o->o_layer_bytes};
	fd = w->w_scen == SC_WRITE
		 ? openat(w->w_dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
		 : openat(w->w_dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*bad = true;
		fail(w, 1, "open %s: %s", name, strerror(errno));
		return;
	}
	k = full_io(fd, iov, (int)o->o_layers, w->w_scen == SC_WRITE);
	if (k == (ssize_t)want && w->w_scen == SC_GET && read(fd, &extra, 1) != 0)
		k = -EMSGSIZE;
	if (close(fd) && k >= 0)
		k = -errno;
	if (k != (ssize_t)want) {
		*bad = true;
		fail(w, 1, "%s %s: %s", sc_names[w->w_scen], name,
		     k < 0 ? strerror((int)-k) : "short transfer");
		return;
	}
	if (w->w_scen != SC_IS_EXIST)
		w->w_bytes += want;
}

/* The keys of request r: block b of request r is block b of the worker's layout. */
static void request_keys(struct worker *w, uint64_t r, struct kvfs_key *keys, char *names,
			 const char **nameps)
{
	for (uint32_t b = 0; b < w->w_o->o_blocks; b++) {
		block_name(names + b * 17, r, b);
		nameps[b] = names + b * 17;
		keys[b] = (struct kvfs_key){
		    .kk_name = nameps[b], .kk_layout = w->w_layout, .kk_block = b};
	}
}

/*
 * One untimed get of the worker's first request, into its shared-memory
 * region: the daemon's first copy into each page of its mapping of a new
 * region pays a page fault (on a VM with shadow page tables, ~4 us per
 * 4 KiB: ~30 ms for 32 MiB), once per registration. A connector registers
 * its KV cache once, and the memcpy baseline touches its buffers before
 * timing (alloc_local's memset), so the timed gets start from the same
 * footing. Its outcome is not counted: the timed request is the same. Its
 * trace id is 3 << 48 (get, request 0).
 */
static void warm_region(struct worker *w, struct kvfs_key *keys, char *names, const char **nameps,
			struct kvfs_status *st)
{
	struct kvfs_summary sum;

	request_keys(w, w->w_id, keys, names, nameps);
	(void)kvfs_get(w->w_kv, keys, w->w_o->o_blocks, (uint64_t)(SC_GET + 1) << 48, st, &sum);
}

static void ioctl_request(struct worker *w, uint64_t r, struct kvfs_key *keys, char *names,
			  const char **nameps, struct kvfs_status *st, bool *bad)
{
	const struct opts *o = w->w_o;
	uint64_t want = (uint64_t)o->o_layers * o->o_layer_bytes;
	struct kvfs_summary sum;
	uint64_t trace = (uint64_t)(w->w_scen + 1) << 48 | (r + 1); /* scenario, request */
	int err;

	request_keys(w, r, keys, names, nameps);
	if (w->w_scen == SC_IS_EXIST)
		err = kvfs_lookup(w->w_kv, nameps, o->o_blocks, trace, st, &sum);
	else if (w->w_scen == SC_WRITE)
		err = kvfs_put(w->w_kv, keys, o->o_blocks, 0, trace, st, &sum);
	else
		err = kvfs_get(w->w_kv, keys, o->o_blocks, trace, st, &sum);
	if (err) {
		memset(bad, 1, o->o_blocks);
		fail(w, o->o_blocks, "%s request %" PRIu64 ": %s", sc_names[w->w_scen], r,
		     strerror(-err));
		return;
	}
	for (uint32_t b = 0; b < o->o_blocks; b++) {
		bool ok = w->w_scen == SC_IS_EXIST ? st[b].ks_result >= 0
						   : st[b].ks_result == (int64_t)want;

		if (!ok) {
			bad[b] = true;
			fail(w, 1, "%s %s: %s", sc_names[w->w_scen], nameps[b],
			     st[b].ks_result < 0 ? strerror((int)-st[b].ks_result) : "wrong size");
		} else if (w->w_scen != SC_IS_EXIST) {
			w->w_bytes += want;
		}
	}
}

/* The worker's i-th request copies the i-th N * L * B bytes of the source. */
static void memcpy_request(struct worker *w, uint64_t i)
{
	const struct opts *o = w->w_o;
	const uint8_t *src = w->w_src + i * o->o_blocks * o->o_layers * o->o_layer_bytes;

	for (uint32_t b = 0; b < o->o_blocks; b++)
		for (uint32_t l = 0; l < o->o_layers; l++) {
			memcpy(slice(w, l, b), src, o->o_layer_bytes);
			src += o->o_layer_bytes;
		}
	w->w_bytes += (uint64_t)o->o_blocks * o->o_layers * o->o_layer_bytes;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const struct opts *o = w->w_o;
	struct kvfs_key *keys = calloc(o->o_blocks, sizeof(*keys));
	struct kvfs_status *st = calloc(o->o_blocks, sizeof(*st));
	const char **nameps = calloc(o->o_blocks, sizeof(*nameps));
	char *names = calloc(o->o_blocks, 17);
	struct iovec *iov = calloc(o->o_layers, sizeof(*iov));
	bool *bad = calloc(o->o_blocks, 1);
	uint64_t t0, dt;

	if (!keys || !st || !nameps || !names || !iov || !bad) {
		fail(w, 1, "out of memory");
		goto out_free;
	}
	if (w->w_scen == SC_GET && o->o_path == PATH_IOCTL && !o->o_proc_region &&
	    w->w_id < o->o_requests)
		warm_region(w, keys, names, nameps, st);
	for (uint64_t r = w->w_id; r < o->o_requests; r += o->o_threads) {
		prepare(w, r);
		memset(bad, 0, o->o_blocks);
		t0 = now_ns();
		if (w->w_scen == SC_MEMCPY)
			memcpy_request(w, w->w_requests);
		else if (o->o_path == PATH_IOCTL)
			ioctl_request(w, r, keys, names, nameps, st, bad);
		else
			for (uint32_t b = 0; b < o->o_blocks; b++)
				posix_block(w, r, b, iov, &bad[b]);
		dt = now_ns() - t0;
		w->w_busy_ns += dt;
		w->w_lat_us[w->w_requests++] = (double)dt / 1000.0;
		w->w_keys += o->o_blocks;
		if (w->w_scen == SC_GET)
			verify(w, r, bad);
	}
out_free:
	free(bad);
	free(iov);
	free(names);
	free(nameps);
	free(st);
	free(keys);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static double pct(const double *v, uint64_t n, double p)
{
	uint64_t rank;

	if (n == 0)
		return 0;
	rank = (uint64_t)(p / 100.0 * (double)n + 0.999999);
	if (rank < 1)
		rank = 1;
	return v[(rank > n ? n : rank) - 1];
}

struct result {
	enum scenario r_scen;
	uint64_t r_requests, r_keys, r_bytes, r_failures;
	double r_mib_s, r_p50, r_p90, r_p99;
};

static int run_scenario(const struct opts *o, struct worker *ws, enum scenario sc,
			struct result *res)
{
	double *all = calloc(o->o_requests ? o->o_requests : 1, sizeof(*all));
	pthread_t *tids = calloc(o->o_threads, sizeof(*tids));
	uint64_t n = 0;

	if (!all || !tids) {
		free(all);
		free(tids);
		return -ENOMEM;
	}
	*res = (struct result){.r_scen = sc};
	for (unsigned t = 0; t < o->o_threads; t++) {
		struct worker *w = &ws[t];

		w->w_scen = sc;
		w->w_requests = w->w_keys = w->w_bytes = w->w_failures = w->w_busy_ns = 0;
		w->w_err[0] = 0;
		if (pthread_create(&tids[t], NULL, worker_main, w)) {
			fprintf(stderr, "kvfs-bench: cannot start a thread\n");
			exit(2);
		}
	}
	for (unsigned t = 0; t < o->o_threads; t++) {
		struct worker *w = &ws[t];

		pthread_join(tids[t], NULL);
		res->r_requests += w->w_requests;
		res->r_keys += w->w_keys;
		res->r_bytes += w->w_bytes;
		res->r_failures += w->w_failures;
		if (w->w_busy_ns)
			res->r_mib_s +=
			    (double)w->w_bytes / 1048576.0 / ((double)w->w_busy_ns / 1e9);
		memcpy(all + n, w->w_lat_us, w->w_requests * sizeof(*all));
		n += w->w_requests;
		if (w->w_err[0])
			fprintf(stderr,
				"kvfs-bench: %s: thread %u: %" PRIu64 " failures, first: %s\n",
				sc_names[sc], t, w->w_failures, w->w_err);
	}
	qsort(all, n, sizeof(*all), cmp_double);
	res->r_p50 = pct(all, n, 50);
	res->r_p90 = pct(all, n, 90);
	res->r_p99 = pct(all, n, 99);
	free(all);
	free(tids);
	return 0;
}

static const char *path_name(const struct opts *o, enum scenario sc)
{
	if (sc == SC_MEMCPY)
		return "memcpy";
	return o->o_path == PATH_IOCTL ? "ioctl" : "posix";
}

static void report(const struct opts *o, const struct result *res, int n)
{
	if (o->o_json) {
		printf("{\"scenarios\": [");
		for (int i = 0; i < n; i++) {
			const struct result *r = &res[i];

			printf("%s{\"scenario\": \"%s\", \"path\": \"%s\", \"requests\": %" PRIu64
			       ", \"keys\": %" PRIu64 ", \"bytes\": %" PRIu64
			       ", \"failures\": %" PRIu64 ", \"mib_s\": %.1f, \"p50_us\": %.1f"
			       ", \"p90_us\": %.1f, \"p99_us\": %.1f}",
			       i ? ", " : "", sc_names[r->r_scen], path_name(o, r->r_scen),
			       r->r_requests, r->r_keys, r->r_bytes, r->r_failures, r->r_mib_s,
			       r->r_p50, r->r_p90, r->r_p99);
		}
		printf("]}\n");
		return;
	}
	printf("%-9s %-6s %9s %9s %14s %8s %10s %10s %10s %10s\n", "scenario", "path", "requests",
	       "keys", "bytes", "failures", "MiB/s", "p50_us", "p90_us", "p99_us");
	for (int i = 0; i < n; i++) {
		const struct result *r = &res[i];

		printf("%-9s %-6s %9" PRIu64 " %9" PRIu64 " %14" PRIu64 " %8" PRIu64
		       " %10.1f %10.1f %10.1f %10.1f\n",
		       sc_names[r->r_scen], path_name(o, r->r_scen), r->r_requests, r->r_keys,
		       r->r_bytes, r->r_failures, r->r_mib_s, r->r_p50, r->r_p90, r->r_p99);
	}
}

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: kvfs-bench [options] DIR\n"
	       "  --blocks=N        blocks (keys) per request (16)\n"
	       "  --layers=L        layers of the model, at most 256: a block is one slice per "
	       "layer (32)\n"
	       "  --layer-bytes=B   bytes of one block in one layer; K/M/G suffixes (64K)\n"
	       "  --requests=R      requests in all (64)\n"
	       "  --threads=T       threads, at most 1024; request r runs on thread r %% T (1)\n"
	       "  --scenario=S      write | is_exist | get | all | memcpy (all)\n"
	       "  --path=P          ioctl | posix (ioctl)\n"
	       "  --region=K        ioctl path: shm (shared memory) | proc (process memory) (shm)\n"
	       "  --json            one JSON object instead of a table\n"
	       "Exit status: 0, 1 when a failure was counted, 2 on bad usage or setup errors.\n");
}

static int parse_u64(const char *s, uint64_t *v, bool suffix)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -1;
	if (suffix && *end) {
		const char *sfx = "KMGT";
		const char *p = strchr(sfx, *end & ~0x20);

		if (!p || end[1])
			return -1;
		for (int i = 0; i <= p - sfx; i++) {
			if (x > UINT64_MAX / 1024)
				return -1;
			x *= 1024;
		}
		end++;
	}
	if (*end)
		return -1;
	*v = x;
	return 0;
}

static void bad_option(const char *name, const char *val)
{
	fprintf(stderr, "kvfs-bench: bad value '%s' for --%s\n", val, name);
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {{"blocks", required_argument, NULL, 'b'},
					   {"layers", required_argument, NULL, 'l'},
					   {"layer-bytes", required_argument, NULL, 'B'},
					   {"requests", required_argument, NULL, 'r'},
					   {"threads", required_argument, NULL, 't'},
					   {"scenario", required_argument, NULL, 's'},
					   {"path", required_argument, NULL, 'p'},
					   {"region", required_argument, NULL, 'k'},
					   {"json", no_argument, NULL, 'j'},
					   {"help", no_argument, NULL, 'h'},
					   {NULL, 0, NULL, 0}};
	uint64_t v;
	int c, idx;

	*o = (struct opts){.o_blocks = 16,
			   .o_layers = 32,
			   .o_threads = 1,
			   .o_layer_bytes = 64 << 10,
			   .o_requests = 64,
			   .o_path = PATH_IOCTL,
			   .o_nscen = 3,
			   .o_scen = {SC_WRITE, SC_IS_EXIST, SC_GET}};
	while ((c = getopt_long(argc, argv, "h", lo, &idx)) != -1) {
		const char *name = c == '?' || c == 'h' ? "" : lo[idx].name;

		switch (c) {
		case 'b':
		case 'l':
		case 't':
			if (parse_u64(optarg, &v, false) || v == 0 ||
			    v > (c == 'b'   ? 1u << 20 /* block_name() packs b in 20 bits */
				 : c == 'l' ? KVFS_LAYOUT_MAX_SEGS /* one segment per layer */
					    : 1024))
				bad_option(name, optarg);
			*(c == 'b'   ? &o->o_blocks
			  : c == 'l' ? &o->o_layers
				     : &o->o_threads) = (uint32_t)v;
			break;
		case 'B':
			if (parse_u64(optarg, &o->o_layer_bytes, true) || o->o_layer_bytes == 0)
				bad_option(name, optarg);
			break;
		case 'r':
			if (parse_u64(optarg, &o->o_requests, false) || o->o_requests > 1u << 30)
				bad_option(name, optarg);
			break;
		case 's':
			o->o_nscen = 1;
			if (!strcmp(optarg, "all"))
				o->o_nscen = 3;
			else if (!strcmp(optarg, "write"))
				o->o_scen[0] = SC_WRITE;
			else if (!strcmp(optarg, "is_exist"))
				o->o_scen[0] = SC_IS_EXIST;
			else if (!strcmp(optarg, "get"))
				o->o_scen[0] = SC_GET;
			else if (!strcmp(optarg, "memcpy"))
				o->o_scen[0] = SC_MEMCPY;
			else
				bad_option(name, optarg);
			break;
		case 'p':
			if (!strcmp(optarg, "ioctl"))
				o->o_path = PATH_IOCTL;
			else if (!strcmp(optarg, "posix"))
				o->o_path = PATH_POSIX;
			else
				bad_option(name, optarg);
			break;
		case 'k':
			if (strcmp(optarg, "shm") && strcmp(optarg, "proc"))
				bad_option(name, optarg);
			o->o_proc_region = !strcmp(optarg, "proc");
			break;
		case 'j':
			o->o_json = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		exit(2);
	}
	o->o_dir = argv[optind];
	if (o->o_layer_bytes > (1ull << 40) / o->o_layers / o->o_blocks) {
		fprintf(stderr, "kvfs-bench: --blocks x --layers x --layer-bytes is over 1 TiB\n");
		exit(2);
	}
}

static void die(const char *what, int err)
{
	fprintf(stderr, "kvfs-bench: %s: %s\n", what, strerror(err));
	exit(2);
}

/* NUMA-local (where libnuma works) and page-aligned memory, faulted in. */
static void *alloc_local(uint64_t len)
{
	void *p = numa_available() < 0 ? NULL : numa_alloc_local(len);

	if (!p && numa_available() < 0 && posix_memalign(&p, (size_t)sysconf(_SC_PAGESIZE), len))
		p = NULL;
	if (!p)
		die("cannot allocate the buffers", ENOMEM);
	memset(p, 0, len);
	return p;
}

static void free_local(void *p, uint64_t len)
{
	if (!p)
		return;
	if (numa_available() < 0)
		free(p);
	else
		numa_free(p, len);
}

/* Gives worker t its tensors and, on the ioctl path, its region and layout. */
static void setup_worker(const struct opts *o, struct worker *w, bool need_src)
{
	uint64_t tensor = (uint64_t)o->o_blocks * o->o_layer_bytes, total = tensor * o->o_layers;
	uint64_t mine = (o->o_requests - w->w_id + o->o_threads - 1) / o->o_threads;
	struct kvfs_segment *seg;
	void *mem;
	int err;

	w->w_lat_us = calloc(o->o_requests / o->o_threads + 1, sizeof(double));
	if (!w->w_lat_us)
		die("cannot allocate", ENOMEM);
	if (need_src && mine) {
		if (__builtin_mul_overflow(mine, total, &w->w_src_len))
			die("the memcpy source", ENOMEM);
		w->w_src = alloc_local(w->w_src_len);
	}
	if (o->o_path == PATH_POSIX || !w->w_kv) {
		w->w_mem = alloc_local(total);
		return;
	}
	if (o->o_proc_region) {
		w->w_mem = alloc_local(total);
		err = kvfs_region_register(w->w_kv, w->w_mem, total, &w->w_region);
	} else {
		err = kvfs_region_alloc(w->w_kv, total, -1, &mem, &w->w_region);
		w->w_mem = mem;
	}
	if (err)
		die("cannot register the tensors as a region", -err);
	seg = calloc(o->o_layers, sizeof(*seg));
	if (!seg)
		die("cannot allocate", ENOMEM);
	for (uint32_t l = 0; l < o->o_layers; l++)
		seg[l] = (struct kvfs_segment){.ks_region = w->w_region,
					       .ks_base = l * tensor,
					       .ks_stride = o->o_layer_bytes,
					       .ks_len = o->o_layer_bytes};
	err = kvfs_layout_register(w->w_kv, seg, o->o_layers, &w->w_layout, NULL);
	free(seg);
	if (err)
		die("cannot register the layout", -err);
}

int main(int argc, char **argv)
{
	struct result res[3];
	struct worker *ws;
	struct kvfs *kv = NULL;
	struct opts o;
	uint64_t failures = 0;
	bool need_kv, need_src = false;
	int dirfd, err;

	parse(argc, argv, &o);
	if (o.o_threads > o.o_requests && o.o_requests)
		o.o_threads = (uint32_t)o.o_requests;
	dirfd = open(o.o_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		die(o.o_dir, errno);
	need_kv = o.o_path == PATH_IOCTL;
	for (int i = 0; i < o.o_nscen; i++) {
		if (o.o_scen[i] == SC_MEMCPY)
			need_kv = false, need_src = true;
	}
	if (need_kv) {
		err = kvfs_open(o.o_dir, &kv);
		if (err)
			die(err == -ENOTTY ? "not a kvfs directory (no ioctl path)" : o.o_dir,
			    -err);
	}
	ws = calloc(o.o_threads, sizeof(*ws));
	if (!ws)
		die("cannot allocate", ENOMEM);
	for (unsigned t = 0; t < o.o_threads; t++) {
		ws[t] = (struct worker){.w_o = &o, .w_kv = kv, .w_dirfd = dirfd, .w_id = t};
		setup_worker(&o, &ws[t], need_src);
		if (ws[t].w_src)
			fill(ws[t].w_src, ws[t].w_src_len, t);
	}
	for (int i = 0; i < o.o_nscen; i++) {
		err = run_scenario(&o, ws, o.o_scen[i], &res[i]);
		if (err)
			die("cannot run", -err);
		failures += res[i].r_failures;
	}
	report(&o, res, o.o_nscen);
	err = kvfs_close(kv);
	if (err)
		fprintf(stderr, "kvfs-bench: closing the kvfs handle: %s\n", strerror(-err));
	for (unsigned t = 0; t < o.o_threads; t++) {
		uint64_t total = (uint64_t)o.o_blocks * o.o_layers * o.o_layer_bytes;

		free(ws[t].w_lat_us);
		free_local(ws[t].w_src, ws[t].w_src_len);
		if (!kv || o.o_proc_region) /* kvfs_close unmapped the shared memory */
			free_local(ws[t].w_mem, total);
	}
	close(dirfd);
	free(ws);
	return failures ? 1 : 0;
}
