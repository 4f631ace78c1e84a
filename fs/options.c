/* SPDX-License-Identifier: MIT */
#include "fs/options.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/readahead.h"
#include "fs/metrics_http.h"
#include "fs/uring.h"
#include "gpu/dev.h"

const char kv_options_usage[] =
    "usage: kvfs [options] DATA_DIR MOUNTPOINT\n"
    "       kvfs --fsck|--salvage DATA_DIR\n"
    "\n"
    "A FUSE filesystem that is a KV-cache store: every file is a key, its bytes\n"
    "the value, held in a NUMA-local DRAM staging pool.\n"
    "\n"
    "options (also as -o key=value with '_' for '-', and as KVFS_KEY=value):\n"
    "  --mem-size=SIZE     DRAM pool size, K/M/G/T suffixes (default: 1/4 of RAM)\n"
    "  --threads=N         most FUSE worker threads (default: 16)\n"
    "  --numa-node=N       NUMA node of the pool, -1 for the local one (default: -1)\n"
    "  --ssd-size=SIZE     bytes kvfs may use in DATA_DIR; 0 = DRAM only\n"
    "                      (default: 90% of its filesystem's free space at start)\n"
    "  --bucket-size=SIZE  seal a bucket file at this size (default: 64M)\n"
    "  --bucket-keys=N     or at this many keys (default: 16384)\n"
    "  --flush-delay=TIME  most a sealed value waits before it is written, e.g. 20ms\n"
    "                      (default: 20ms)\n"
    "  --promote=on|off    reads of SSD-only values bring them into DRAM (default: off)\n"
    "  --readahead=SIZE    bytes read ahead of each sequential reader of what is only\n"
    "                      on the SSD, at most 32M; 0 = none (default: 8M)\n"
    "  --trace=FILE        append a JSON line per ioctl batch and per key to FILE\n"
    "                      (default: off)\n"
    "  --metrics=ADDR:PORT serve Prometheus metrics at http://ADDR:PORT/metrics;\n"
    "                      :PORT for every address, [IPV6]:PORT (default: off;\n"
    "                      the same text is always in MOUNTPOINT/.kvfs/metrics)\n"
    "  --gc=on|off         the compaction thread (default: on)\n"
    "  --gc-interval=TIME  how often it looks for buckets to compact (default: 1s)\n"
    "  --gc-dead-ratio=R   compact a bucket this dead, 0..1 (default: 0.25)\n"
    "  --gc-high-watermark=R  above this share of --ssd-size compact the deadest\n"
    "                      buckets whatever their ratio, at full speed (default: 0.9)\n"
    "  --gc-low-watermark=R   --evict=lru evicts down to this share (default: 0.8)\n"
    "  --gc-max-buckets=N  buckets per pass (default: 4)\n"
    "  --gc-rate=SIZE      bytes/s compaction copies below the high watermark\n"
    "                      (default: 0 = 256 MiB/s; above the watermark: unpaced)\n"
    "  --evict=none|lru    at the quota: none = new puts fail with ENOSPC,\n"
    "                      lru = delete least recently used keys (default: none)\n"
    "  --gpu=auto|cuda|off device backend: cuda = CUDA regions or refuse to start,\n"
    "                      auto = CUDA when a usable device is present (default: auto)\n"
    "  --uring=auto|on|off carry FUSE requests over io_uring (Linux 6.14+, with\n"
    "                      /sys/module/fuse/parameters/enable_uring set): auto = when\n"
    "                      the kernel offers it, else /dev/fuse; on = or refuse to\n"
    "                      start; off = /dev/fuse only (default: off)\n"
    "  --rados-pool=POOL   share keys through this Ceph RADOS pool (default: off;\n"
    "                      needs a kvfs built with librados)\n"
    "  --rados-conf=FILE   the cluster's ceph.conf (default: /etc/ceph/ceph.conf)\n"
    "  --rados-id=NAME     the client id, without 'client.' (default: admin)\n"
    "  --rados-namespace=NS  mounts on the same pool and namespace share keys\n"
    "                      (default: the empty namespace)\n"
    "  --rados-timeout=TIME  most any cluster operation waits, whole seconds,\n"
    "                      at least 1s (default: 10s)\n"
    "  --rados-cache-ttl=TIME  names looked up in the cluster may be this stale\n"
    "                      (default: 1s)\n"
    "  --rados-sync[=on|off]  fsync also waits for the cluster (default: off)\n"
    "  --rados-gc          kvfs --rados-gc --rados-pool=POOL [--rados-*]: remove the\n"
    "                      data objects no entry refers to, then exit\n"
    "  --rados-gc-grace=TIME  --rados-gc spares objects younger than this (default 1h)\n"
    "  --rados-gc-interval=TIME  the daemon sweeps the pool as --rados-gc does this\n"
    "                      often (default 6h; 0: never)\n"
    "  --fsck              kvfs --fsck DATA_DIR: check a data directory, report, exit\n"
    "  --salvage           kvfs --salvage DATA_DIR: rebuild the metadata from the buckets\n"
    "  -f                  stay in the foreground\n"
    "  -d                  debug: log every FUSE request (implies -f)\n"
    "  -o OPT[,OPT...]     kvfs settings or FUSE mount options (allow_other, ro, ...)\n"
    "  -h, --help          print this help\n"
    "  -V, --version       print the version\n"
    "\n"
    "stop: fusermount3 -u MOUNTPOINT, Ctrl-C or SIGTERM\n";

/* A kvfs setting: --NAME=VALUE, -o KEY=VALUE (NAME with '_' for '-'), KVFS_KEY. */
struct setting {
	const char *s_name;
	int (*s_set)(struct kv_config *cfg, const char *val);
};

static int set_mem_size(struct kv_config *cfg, const char *val)
{
	uint64_t v;
	int err = kv_parse_size(val, &v);

	if (err)
		return err;
	if (v < (1u << 20))
		return -ERANGE;
	cfg->kc_mem_size = v;
	return 0;
}

static int parse_long(const char *val, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(val, &end, 10);
	if (errno || end == val || *end)
		return -EINVAL;
	if (v < lo || v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

static int set_threads(struct kv_config *cfg, const char *val)
{
	long v;
	int err = parse_long(val, 1, 1024, &v);

	if (!err)
		cfg->kc_threads = (unsigned)v;
	return err;
}

static int set_numa_node(struct kv_config *cfg, const char *val)
{
	long v;
	int err = parse_long(val, -1, 1023, &v);

	if (!err)
		cfg->kc_numa_node = (int)v;
	return err;
}

static int set_ssd_size(struct kv_config *cfg, const char *val)
{
	int err = kv_parse_size(val, &cfg->kc_ssd_size);

	if (!err)
		cfg->kc_ssd_size_auto = false;
	return err;
}

static int set_bucket_size(struct kv_config *cfg, const char *val)
{
	uint64_t v;
	int err = kv_parse_size(val, &v);

	if (err)
		return err;
	if (v < (1u << 20) || v > (1ull << 40))
		return -ERANGE;
	cfg->kc_bucket_size = v;
	return 0;
}

static int set_bucket_keys(struct kv_config *cfg, const char *val)
{
	long v;
	int err = parse_long(val, 1, 1 << 24, &v);

	if (!err)
		cfg->kc_bucket_keys = (uint32_t)v;
	return err;
}

#define SEC (1000ull * 1000 * 1000)

/* An on/off switch. Returns 0 or -EINVAL. */
static int parse_switch(const char *val, bool *out)
{
	if (!strcmp(val, "on"))
		*out = true;
	else if (!strcmp(val, "off"))
		*out = false;
	else
		return -EINVAL;
	return 0;
}

/* A duration (kv_parse_duration) in [lo, hi] ns. Returns 0, -EINVAL or -ERANGE. */
static int parse_duration_in(const char *val, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v;
	int err = kv_parse_duration(val, &v);

	if (err)
		return err;
	if (v < lo || v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

static int set_flush_delay(struct kv_config *cfg, const char *val)
{
	return parse_duration_in(val, 0, 10 * SEC, &cfg->kc_flush_delay_ns);
}

static int set_promote(struct kv_config *cfg, const char *val)
{
	return parse_switch(val, &cfg->kc_promote);
}

static int set_readahead(struct kv_config *cfg, const char *val)
{
	uint64_t v;
	int err = kv_parse_size(val, &v);

	if (err)
		return err;
	if (v > KV_RA_MAX_WINDOW)
		return -ERANGE;
	cfg->kc_readahead = v;
	return 0;
}

static int set_trace(struct kv_config *cfg, const char *val)
{
	char *path;

	if (!*val)
		return -EINVAL;
	path = strdup(val);
	if (!path)
		return -ENOMEM;
	free(cfg->kc_trace);
	cfg->kc_trace = path;
	return 0;
}

/* --metrics=ADDR:PORT (fs/metrics_http.h); the address is resolved when the server starts. */
static int set_metrics(struct kv_config *cfg, const char *val)
{
	char *spec;

	if (kv_fs_metrics_check(val))
		return -EINVAL;
	spec = strdup(val);
	if (!spec)
		return -ENOMEM;
	free(cfg->kc_metrics);
	cfg->kc_metrics = spec;
	return 0;
}

/* --- compaction and cache mode --- */

static int set_gc(struct kv_config *cfg, const char *val)
{
	return parse_switch(val, &cfg->kc_gc);
}

static int set_gc_interval(struct kv_config *cfg, const char *val)
{
	return parse_duration_in(val, 1000 * 1000, 3600 * SEC, &cfg->kc_gc_interval_ns);
}

/* A ratio: a decimal number in [0, 1]. */
static int parse_ratio(const char *val, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (errno || end == val || *end || v != v)
		return -EINVAL;
	if (v < 0 || v > 1)
		return -ERANGE;
	*out = v;
	return 0;
}

static int set_gc_dead_ratio(struct kv_config *cfg, const char *val)
{
	return parse_ratio(val, &cfg->kc_gc_dead_ratio);
}

static int set_gc_high_watermark(struct kv_config *cfg, const char *val)
{
	return parse_ratio(val, &cfg->kc_gc_high_watermark);
}

static int set_gc_low_watermark(struct kv_config *cfg, const char *val)
{
	return parse_ratio(val, &cfg->kc_gc_low_watermark);
}

static int set_gc_max_buckets(struct kv_config *cfg, const char *val)
{
	long v;
	int err = parse_long(val, 1, 1 << 20, &v);

	if (!err)
		cfg->kc_gc_max_buckets = (uint32_t)v;
	return err;
}

static int set_gc_rate(struct kv_config *cfg, const char *val)
{
	return kv_parse_size(val, &cfg->kc_gc_rate);
}

static int set_evict(struct kv_config *cfg, const char *val)
{
	if (!strcmp(val, "lru"))
		cfg->kc_evict_lru = true;
	else if (!strcmp(val, "none"))
		cfg->kc_evict_lru = false;
	else
		return -EINVAL;
	return 0;
}

static int set_uring(struct kv_config *cfg, const char *val)
{
	if (!strcmp(val, "auto"))
		cfg->kc_uring = KV_URING_AUTO;
	else if (!strcmp(val, "on"))
		cfg->kc_uring = KV_URING_ON;
	else if (!strcmp(val, "off"))
		cfg->kc_uring = KV_URING_OFF;
	else
		return -EINVAL;
	return 0;
}

static int set_gpu(struct kv_config *cfg, const char *val)
{
	if (!strcmp(val, "auto"))
		cfg->kc_gpu = KV_DEV_AUTO;
	else if (!strcmp(val, "cuda"))
		cfg->kc_gpu = KV_DEV_CUDA;
	else if (!strcmp(val, "off"))
		cfg->kc_gpu = KV_DEV_OFF;
	else
		return -EINVAL;
	return 0;
}

/* --- the shared tier on RADOS (rados/shared.h) --- */

/* Replaces *slot with a copy of val; an empty val is refused unless empty_ok. */
static int set_string(char **slot, const char *val, bool empty_ok)
{
	char *copy;

	if (!*val && !empty_ok)
		return -EINVAL;
	copy = strdup(val);
	if (!copy)
		return -ENOMEM;
	free(*slot);
	*slot = copy;
	return 0;
}

static int set_rados_pool(struct kv_config *cfg, const char *val)
{
	return set_string(&cfg->kc_rados_pool, val, false);
}

static int set_rados_conf(struct kv_config *cfg, const char *val)
{
	return set_string(&cfg->kc_rados_conf, val, false);
}

static int set_rados_id(struct kv_config *cfg, const char *val)
{
	return set_string(&cfg->kc_rados_id, val, false);
}

static int set_rados_namespace(struct kv_config *cfg, const char *val)
{
	return set_string(&cfg->kc_rados_namespace, val, true);
}

static int set_rados_timeout(struct kv_config *cfg, const char *val)
{
	return parse_duration_in(val, SEC, 3600 * SEC, &cfg->kc_rados_timeout_ns);
}

static int set_rados_cache_ttl(struct kv_config *cfg, const char *val)
{
	return parse_duration_in(val, 0, 3600 * SEC, &cfg->kc_rados_cache_ttl_ns);
}

static int set_rados_gc_grace(struct kv_config *cfg, const char *val)
{
	return parse_duration_in(val, 0, 30 * 24 * 3600 * SEC, &cfg->kc_rados_gc_grace_ns);
}

static int set_rados_gc_interval(struct kv_config *cfg, const char *val)
{
	return parse_duration_in(val, 0, 30 * 24 * 3600 * SEC, &cfg->kc_rados_gc_interval_ns);
}

static int set_rados_sync(struct kv_config *cfg, const char *val)
{
	return parse_switch(val, &cfg->kc_rados_sync);
}

static const struct setting settings[] = {
    {"mem-size", set_mem_size},
    {"threads", set_threads},
    {"numa-node", set_numa_node},
    {"ssd-size", set_ssd_size},
    {"bucket-size", set_bucket_size},
    {"bucket-keys", set_bucket_keys},
    {"flush-delay", set_flush_delay},
    {"promote", set_promote},
    {"readahead", set_readahead},
    {"trace", set_trace},
    {"metrics", set_metrics},
    {"gc", set_gc},
    {"gc-interval", set_gc_interval},
    {"gc-dead-ratio", set_gc_dead_ratio},
    {"gc-high-watermark", set_gc_high_watermark},
    {"gc-low-watermark", set_gc_low_watermark},
    {"gc-max-buckets", set_gc_max_buckets},
    {"gc-rate", set_gc_rate},
    {"evict", set_evict},
    {"gpu", set_gpu},
    {"uring", set_uring},
    {"rados-pool", set_rados_pool},
    {"rados-conf", set_rados_conf},
    {"rados-id", set_rados_id},
    {"rados-namespace", set_rados_namespace},
    {"rados-timeout", set_rados_timeout},
    {"rados-cache-ttl", set_rados_cache_ttl},
    {"rados-sync", set_rados_sync},
    {"rados-gc-grace", set_rados_gc_grace},
    {"rados-gc-interval", set_rados_gc_interval},
};

/* A switch that may stand alone: --NAME and -o KEY without a value mean "on". */
static bool is_switch(const struct setting *s)
{
	return s->s_set == set_rados_sync;
}

/* Words of an fstab line that mean nothing to a mount of kvfs. */
static const char *const fstab_only[] = {
    "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail",
};

/* Compares a setting name with a key spelled with '_' or '-' (key is len bytes). */
static bool name_is(const char *name, const char *key, size_t len)
{
	size_t i;

	for (i = 0; i < len && name[i]; i++)
		if (name[i] != key[i] && !(name[i] == '-' && key[i] == '_'))
			return false;
	return i == len && name[i] == '\0';
}

static const struct setting *find_setting(const char *key, size_t len)
{
	for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
		if (name_is(settings[i].s_name, key, len))
			return &settings[i];
	return NULL;
}

static int fail(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int apply(const struct setting *s, struct kv_config *cfg, const char *val,
		 const char *spelled, char *err, size_t err_len)
{
	int rc = val ? s->s_set(cfg, val) : -EINVAL;

	if (rc == -ERANGE)
		return fail(err, err_len, "kvfs: value '%s' out of range for %s", val, spelled);
	if (rc)
		return fail(err, err_len, "kvfs: bad value '%s' for %s", val ? val : "", spelled);
	return 0;
}

static int apply_env(char **env, struct kv_config *cfg, char *err, size_t err_len)
{
	for (; env && *env; env++) {
		const char *eq = strchr(*env, '='), *key = *env + 5;
		const struct setting *s;

		if (strncmp(*env, "KVFS_", 5) != 0 || !eq)
			continue;
		for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
			s = &settings[i];
			size_t n = strlen(s->s_name);
			bool match = (size_t)(eq - key) == n;

			for (size_t j = 0; match && j < n; j++)
				match = (s->s_name[j] == '-' ? '_' : s->s_name[j] - 'a' + 'A') ==
					key[j];
			if (match) {
				char spelled[64];
				int rc;

				snprintf(spelled, sizeof(spelled), "%.*s", (int)(eq - *env), *env);
				rc = apply(s, cfg, eq + 1, spelled, err, err_len);
				if (rc)
					return rc;
			}
		}
	}
	return 0;
}

/* Appends opt to the comma-separated list *out. */
static int add_fuse_opt(char **out, const char *opt, size_t len)
{
	size_t cur = *out ? strlen(*out) : 0;
	char *n = realloc(*out, cur + len + 2);

	if (!n)
		return -ENOMEM;
	if (cur)
		n[cur++] = ',';
	memcpy(n + cur, opt, len);
	n[cur + len] = '\0';
	*out = n;
	return 0;
}

static bool is_fstab_only(const char *opt, size_t len)
{
	if (len >= 2 && strncmp(opt, "x-", 2) == 0)
		return true;
	for (size_t i = 0; i < sizeof(fstab_only) / sizeof(fstab_only[0]); i++)
		if (strlen(fstab_only[i]) == len && strncmp(fstab_only[i], opt, len) == 0)
			return true;
	return false;
}

/* Parses one -o list: kvfs settings are applied, the rest go to fuse_opts. */
static int parse_o(const char *list, struct kv_config *cfg, char **fuse_opts, char *err,
		   size_t err_len)
{
	const char *p = list;

	while (*p) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);
		size_t klen = eq ? (size_t)(eq - p) : len;
		const struct setting *s = find_setting(p, klen);
		int rc = 0;

		if (s) {
			char *val = eq		   ? strndup(eq + 1, len - klen - 1)
				    : is_switch(s) ? strdup("on")
						   : NULL;
			char *spelled = strndup(p, len);

			rc = spelled ? apply(s, cfg, val, spelled, err, err_len) : -ENOMEM;
			free(val);
			free(spelled);
		} else if (len && !is_fstab_only(p, len)) {
			if ((klen == strlen("allow_other") &&
			     strncmp(p, "allow_other", klen) == 0) ||
			    (klen == strlen("allow_root") && strncmp(p, "allow_root", klen) == 0))
				cfg->kc_allow_other = true;
			rc = add_fuse_opt(fuse_opts, p, len);
		}
		if (rc)
			return rc;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int set_positional(struct kv_config *cfg, const char *arg, char *err, size_t err_len)
{
	char **slot = !cfg->kc_data_dir	    ? &cfg->kc_data_dir
		      : !cfg->kc_mountpoint ? &cfg->kc_mountpoint
					    : NULL;

	if (!slot)
		return fail(err, err_len, "kvfs: unexpected argument '%s'", arg);
	*slot = strdup(arg);
	return *slot ? 0 : -ENOMEM;
}

/*
 * Parses "--name=value" or "--name value"; *i advances past what it used.
 * Only checks the name unless `set`, so long options can be applied after
 * every -o option (they are stronger).
 */
static int parse_long_opt(int argc, char **argv, int *i, bool set, struct kv_config *cfg, char *err,
			  size_t err_len)
{
	const char *arg = argv[*i] + 2, *eq = strchr(arg, '=');
	size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
	const struct setting *s = find_setting(arg, len);
	const char *val;
	char spelled[80];

	snprintf(spelled, sizeof(spelled), "--%.*s", (int)len, arg);
	if (!s || memchr(arg, '_', len))
		return fail(err, err_len, "kvfs: unknown option '%s'", spelled);
	if (!eq && !is_switch(s) && *i + 1 >= argc)
		return fail(err, err_len, "kvfs: option '%s' needs a value", spelled);
	val = eq ? eq + 1 : is_switch(s) ? "on" : argv[++*i];
	return set ? apply(s, cfg, val, spelled, err, err_len) : 0;
}

/* One pass over argv: pass 0 takes everything but long settings, pass 1 only those. */
static int parse_pass(int argc, char **argv, int pass, struct kv_config *cfg, char **fuse_opts,
		      char *err, size_t err_len)
{
	bool positional_only = false, first = pass == 0;
	int rc = 0;

	for (int i = 1; !rc && i < argc; i++) {
		const char *a = argv[i];

		if (positional_only || a[0] != '-' || a[1] == '\0')
			rc = first ? set_positional(cfg, a, err, err_len) : 0;
		else if (!strcmp(a, "--"))
			positional_only = true;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return KV_OPT_HELP;
		else if (!strcmp(a, "-V") || !strcmp(a, "--version"))
			return KV_OPT_VERSION;
		else if (!strcmp(a, "-f"))
			cfg->kc_foreground = true;
		else if (!strcmp(a, "--fsck"))
			cfg->kc_fsck = true;
		else if (!strcmp(a, "--salvage"))
			cfg->kc_salvage = true;
		else if (!strcmp(a, "--rados-gc"))
			cfg->kc_rados_gc = true;
		else if (!strcmp(a, "-d"))
			cfg->kc_debug = cfg->kc_foreground = true;
		else if (!strncmp(a, "-o", 2) && (a[2] || i + 1 < argc)) {
			const char *list = a[2] ? a + 2 : argv[++i];

			rc = first ? parse_o(list, cfg, fuse_opts, err, err_len) : 0;
		} else if (!strncmp(a, "--", 2))
			rc = parse_long_opt(argc, argv, &i, !first, cfg, err, err_len);
		else
			rc = fail(err, err_len, "kvfs: unknown option '%s'", a);
	}
	return rc;
}

int kv_options_parse(int argc, char **argv, char **environ_, struct kv_config *cfg,
		     char **fuse_opts, char *err, size_t err_len)
{
	int rc;

	*fuse_opts = NULL;
	rc = add_fuse_opt(fuse_opts, "", 0);
	if (!rc)
		rc = apply_env(environ_, cfg, err, err_len);
	for (int pass = 0; !rc && pass < 2; pass++)
		rc = parse_pass(argc, argv, pass, cfg, fuse_opts, err, err_len);
	if (rc)
		return rc;
	if (cfg->kc_fsck + cfg->kc_salvage + cfg->kc_rados_gc > 1)
		return fail(err, err_len, "kvfs: --fsck, --salvage and --rados-gc exclude each other");
	if (cfg->kc_rados_gc) {
		if (!cfg->kc_rados_pool || cfg->kc_data_dir)
			return fail(err, err_len, "kvfs: --rados-gc takes --rados-pool (and the other "
						  "--rados-* options) only");
		return KV_OPT_RADOS_GC;
	}
	if (cfg->kc_fsck || cfg->kc_salvage) {
		if (!cfg->kc_data_dir || cfg->kc_mountpoint)
			return fail(err, err_len, "kvfs: --%s takes DATA_DIR only",
				    cfg->kc_fsck ? "fsck" : "salvage");
		return cfg->kc_fsck ? KV_OPT_FSCK : KV_OPT_SALVAGE;
	}
	if (!cfg->kc_mountpoint)
		return fail(err, err_len, "kvfs: need DATA_DIR and MOUNTPOINT (see --help)");
	if (cfg->kc_gc_low_watermark > cfg->kc_gc_high_watermark)
		return fail(err, err_len, "kvfs: --gc-low-watermark is above --gc-high-watermark");
	return KV_OPT_RUN;
}
