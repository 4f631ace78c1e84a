/* SPDX-License-Identifier: MIT */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/dev.h"

void kv_config_defaults(struct kv_config *cfg)
{
	long pages = sysconf(_SC_PHYS_PAGES);
	long psz = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 1ull << 30;

	memset(cfg, 0, sizeof(*cfg));
	cfg->kc_mem_size = ram / 4;
	cfg->kc_threads = 16;
	/* --uring=off: over io_uring 1 MiB reads of values in DRAM ran at 0.70-0.73x (README) */
	cfg->kc_uring = 2;
	cfg->kc_numa_node = -1;
	cfg->kc_ssd_size_auto = true;
	cfg->kc_ssd_size = UINT64_MAX;
	cfg->kc_bucket_size = 64ull << 20;
	cfg->kc_bucket_keys = 16384;
	cfg->kc_flush_delay_ns = 20ull * 1000 * 1000;
	cfg->kc_backpressure_ns = 30ull * 1000 * 1000 * 1000;
	cfg->kc_readahead = 8ull << 20;
	cfg->kc_gc = true;
	cfg->kc_gc_interval_ns = 1000ull * 1000 * 1000;
	cfg->kc_gc_dead_ratio = 0.25;
	cfg->kc_gc_high_watermark = 0.9;
	cfg->kc_gc_low_watermark = 0.8;
	cfg->kc_gc_max_buckets = 4;
	cfg->kc_rados_timeout_ns = 10ull * 1000 * 1000 * 1000;
	cfg->kc_rados_cache_ttl_ns = 1000ull * 1000 * 1000;
	cfg->kc_rados_gc_grace_ns = 3600ull * 1000 * 1000 * 1000;
	cfg->kc_rados_gc_interval_ns = 6 * 3600ull * 1000 * 1000 * 1000;
}

void kv_config_free(struct kv_config *cfg)
{
	free(cfg->kc_data_dir);
	free(cfg->kc_mountpoint);
	free(cfg->kc_trace);
	free(cfg->kc_metrics);
	free(cfg->kc_rados_pool);
	free(cfg->kc_rados_conf);
	free(cfg->kc_rados_id);
	free(cfg->kc_rados_namespace);
	cfg->kc_data_dir = NULL;
	cfg->kc_mountpoint = NULL;
	cfg->kc_trace = NULL;
	cfg->kc_metrics = NULL;
	cfg->kc_rados_pool = cfg->kc_rados_conf = NULL;
	cfg->kc_rados_id = cfg->kc_rados_namespace = NULL;
}

/* Parses the leading decimal digits of s; *end points past them. Returns 0, -EINVAL or -ERANGE. */
static int leading_number(const char *s, unsigned long long *v, char **end)
{
	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, end, 10);
	return errno ? -ERANGE : 0;
}

int kv_parse_size(const char *s, uint64_t *out)
{
	unsigned shift = 0;
	unsigned long long v;
	char *end;
	int err = leading_number(s, &v, &end);

	if (err)
		return err;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	case '\0':
		break;
	default:
		return -EINVAL;
	}
	if (shift) {
		end++;
		if (toupper((unsigned char)*end) == 'I' && toupper((unsigned char)end[1]) == 'B')
			end += 2;
		else if (toupper((unsigned char)*end) == 'B')
			end++;
	}
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

int kv_parse_duration(const char *s, uint64_t *ns)
{
	static const struct {
		const char *u;
		uint64_t mul;
	} units[] = {{"ns", 1},
		     {"us", 1000},
		     {"ms", 1000000},
		     {"s", 1000000000},
		     {"min", 60000000000ull},
		     {"h", 3600000000000ull},
		     {"", 1000000}};
	unsigned long long v;
	char *end;
	int err = leading_number(s, &v, &end);

	if (err)
		return err;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].u) == 0) {
			if (v > UINT64_MAX / units[i].mul)
				return -ERANGE;
			*ns = v * units[i].mul;
			return 0;
		}
	}
	return -EINVAL;
}

int kv_config_render(const struct kv_config *cfg, char **buf, size_t *len)
{
	FILE *f = open_memstream(buf, len);

	if (!f)
		return -ENOMEM;
	fprintf(f, "version = %s\n", KVFS_VERSION);
	fprintf(f, "data_dir = %s\n", cfg->kc_data_dir ? cfg->kc_data_dir : "");
	fprintf(f, "mountpoint = %s\n", cfg->kc_mountpoint ? cfg->kc_mountpoint : "");
	fprintf(f, "mem_size = %llu\n", (unsigned long long)cfg->kc_mem_size);
	fprintf(f, "threads = %u\n", cfg->kc_threads);
	fprintf(f, "numa_node = %d\n", cfg->kc_numa_node);
	fprintf(f, "ssd_size = %llu\n", (unsigned long long)cfg->kc_ssd_size);
	fprintf(f, "bucket_size = %llu\n", (unsigned long long)cfg->kc_bucket_size);
	fprintf(f, "bucket_keys = %u\n", cfg->kc_bucket_keys);
	fprintf(f, "flush_delay_ms = %.3f\n", cfg->kc_flush_delay_ns / 1e6);
	fprintf(f, "promote = %s\n", cfg->kc_promote ? "on" : "off");
	fprintf(f, "readahead = %llu\n", (unsigned long long)cfg->kc_readahead);
	fprintf(f, "gc = %s\n", cfg->kc_gc ? "on" : "off");
	fprintf(f, "gc_interval_ms = %.3f\n", cfg->kc_gc_interval_ns / 1e6);
	fprintf(f, "gc_dead_ratio = %.3f\n", cfg->kc_gc_dead_ratio);
	fprintf(f, "gc_high_watermark = %.3f\n", cfg->kc_gc_high_watermark);
	fprintf(f, "gc_low_watermark = %.3f\n", cfg->kc_gc_low_watermark);
	fprintf(f, "gc_max_buckets = %u\n", cfg->kc_gc_max_buckets);
	fprintf(f, "gc_rate = %llu\n", (unsigned long long)cfg->kc_gc_rate);
	fprintf(f, "evict = %s\n", cfg->kc_evict_lru ? "lru" : "none");
	fprintf(f, "allow_other = %d\n", cfg->kc_allow_other);
	fprintf(f, "debug = %d\n", cfg->kc_debug);
	fprintf(f, "trace = %s\n", cfg->kc_trace ? cfg->kc_trace : "off");
	fprintf(f, "metrics = %s\n", cfg->kc_metrics ? cfg->kc_metrics : "off");
	fprintf(f, "gpu = %s\n", kv_dev_mode_name((enum kv_dev_mode)cfg->kc_gpu));
	fprintf(f, "uring = %s\n", cfg->kc_uring == 1 ? "on" : cfg->kc_uring == 2 ? "off" : "auto");
#ifdef KVFS_FAULTS
	fprintf(f, "faults = on\n"); /* KVFS_FAULT crash points compiled in (a test build) */
#else
	fprintf(f, "faults = off\n");
#endif
	fprintf(f, "rados_pool = %s\n", cfg->kc_rados_pool ? cfg->kc_rados_pool : "");
	fprintf(f, "rados_conf = %s\n",
		cfg->kc_rados_conf ? cfg->kc_rados_conf : KV_RADOS_CONF_DEFAULT);
	fprintf(f, "rados_id = %s\n", cfg->kc_rados_id ? cfg->kc_rados_id : KV_RADOS_ID_DEFAULT);
	fprintf(f, "rados_namespace = %s\n",
		cfg->kc_rados_namespace ? cfg->kc_rados_namespace : "");
	fprintf(f, "rados_timeout_ms = %.3f\n", cfg->kc_rados_timeout_ns / 1e6);
	fprintf(f, "rados_cache_ttl_ms = %.3f\n", cfg->kc_rados_cache_ttl_ns / 1e6);
	fprintf(f, "rados_sync = %s\n", cfg->kc_rados_sync ? "on" : "off");
	fprintf(f, "rados_gc_grace_ms = %.3f\n", cfg->kc_rados_gc_grace_ns / 1e6);
	fprintf(f, "rados_gc_interval_ms = %.3f\n", cfg->kc_rados_gc_interval_ns / 1e6);
	if (fclose(f) != 0)
		return -ENOMEM;
	return 0;
}
