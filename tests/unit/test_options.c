/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_options.c — the command line (fs/options.h) and the
 * settings it fills (core/config.h).
 *
 * Each test parses a NULL-terminated argument list (argv[0] added) with an
 * explicit environment, from the defaults, and frees what the parse
 * allocated: the config's strings and the FUSE option list.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "fs/options.h"
#include "gpu/dev.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* One parse: its inputs' results. */
struct parse {
	int p_rc;
	struct kv_config p_cfg;
	struct kv_config p_defaults;
	char *p_fuse;
	char p_err[256];
};

/* Parses argv (NULL-terminated, without argv[0]) under env (NULL-terminated, or NULL). */
static void parse_env(struct parse *p, char **env, const char *const *args)
{
	char *argv[32];
	int argc = 0;

	argv[argc++] = "kvfs";
	for (; *args; args++) {
		assert_true(argc < 31);
		argv[argc++] = (char *)*args;
	}
	argv[argc] = NULL;
	kv_config_defaults(&p->p_cfg);
	p->p_defaults = p->p_cfg;
	p->p_fuse = NULL;
	memset(p->p_err, 0, sizeof(p->p_err));
	p->p_rc =
	    kv_options_parse(argc, argv, env, &p->p_cfg, &p->p_fuse, p->p_err, sizeof(p->p_err));
}

#define PARSE_ENV(p, env, ...) parse_env((p), (env), (const char *const[]){__VA_ARGS__, NULL})
#define PARSE(p, ...)	       PARSE_ENV((p), NULL, __VA_ARGS__)

static void parse_free(struct parse *p)
{
	kv_config_free(&p->p_cfg);
	assert_null(p->p_cfg.kc_data_dir);
	assert_null(p->p_cfg.kc_mountpoint);
	free(p->p_fuse);
	p->p_fuse = NULL;
}

/* A successful mount: rc, both positionals, and the FUSE options. */
static void check_run(struct parse *p, const char *fuse)
{
	if (p->p_rc != KV_OPT_RUN) {
		parse_free(p);
		fail_msg("rc %d, err '%s'", p->p_rc, p->p_err);
	}
	assert_string_equal(p->p_cfg.kc_data_dir, "data");
	assert_string_equal(p->p_cfg.kc_mountpoint, "mnt");
	assert_non_null(p->p_fuse);
	assert_string_equal(p->p_fuse, fuse);
}

/* A refusal: -EINVAL, and one line that names `what` (and `what2` when given). */
static void check_err(struct parse *p, const char *what, const char *what2)
{
	parse_free(p);
	if (p->p_rc != -EINVAL)
		fail_msg("rc %d, want -EINVAL; err '%s'", p->p_rc, p->p_err);
	if (!strstr(p->p_err, what))
		fail_msg("message '%s' does not name '%s'", p->p_err, what);
	if (what2 && !strstr(p->p_err, what2))
		fail_msg("message '%s' does not name '%s'", p->p_err, what2);
	assert_null(strchr(p->p_err, '\n'));
}

static void test_parse_size_good(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
	    {"0", 0},
	    {"10", 10},
	    {"4096", 4096},
	    {"512k", 512ull << 10},
	    {"512K", 512ull << 10},
	    {"64M", 64 * MIB},
	    {"64m", 64 * MIB},
	    {"4G", 4 * GIB},
	    {"4g", 4 * GIB},
	    {"2T", 2ull << 40},
	    {"1GiB", GIB},
	    {"1gib", GIB},
	    {"1GIB", GIB},
	    {"3MB", 3 * MIB},
	    {"3mb", 3 * MIB},
	    {"8KiB", 8192},
	    {"007M", 7 * MIB},
	    {"18446744073709551615", UINT64_MAX},
	    {"16777215T", 16777215ull << 40},
	    {"17179869183G", 17179869183ull << 30},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		uint64_t v = 12345;
		int rc = kv_parse_size(good[i].s, &v);

		if (rc != 0 || v != good[i].v)
			fail_msg("'%s': rc %d, %llu", good[i].s, rc, (unsigned long long)v);
	}
}

static void test_parse_size_bad(void **state)
{
	static const char *const bad[] = {
	    "",	   "G",	   "K",	    "iB",  "12X", "-1",	 "+1",	  " 1",
	    "1 ",  "1.5G", "1GG",   "1Gi", "1iB", "1P",	 "1E",	  "0x10",
	    "1e9", "1GBB", "1GiBx", "1 G", "4G ", "M64", "1_000", "\xe2\x88\x9e",
	};
	static const char *const overflow[] = {
	    "18446744073709551616",  "99999999999999999999999", "16777216T",
	    "17179869184G",	     "17592186044416M",		"18014398509481984K",
	    "99999999999999999999G",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 12345;
		int rc = kv_parse_size(bad[i], &v);

		if (rc != -EINVAL)
			fail_msg("'%s': rc %d, want -EINVAL", bad[i], rc);
	}
	for (size_t i = 0; i < sizeof(overflow) / sizeof(overflow[0]); i++) {
		uint64_t v = 12345;
		int rc = kv_parse_size(overflow[i], &v);

		if (rc != -ERANGE)
			fail_msg("'%s': rc %d, want -ERANGE", overflow[i], rc);
	}
	{
		uint64_t v = 12345;

		assert_int_equal(kv_parse_size(NULL, &v), -EINVAL);
	}
}

static void test_defaults(void **state)
{
	struct kv_config cfg;

	(void)state;
	memset(&cfg, 0xa5, sizeof(cfg));
	kv_config_defaults(&cfg);
	assert_null(cfg.kc_data_dir);
	assert_null(cfg.kc_mountpoint);
	assert_true(cfg.kc_mem_size > 0);
	assert_int_equal(cfg.kc_threads, 16);
	assert_int_equal(cfg.kc_numa_node, -1);
	assert_false(cfg.kc_foreground);
	assert_false(cfg.kc_debug);
	assert_false(cfg.kc_allow_other);
	kv_config_free(&cfg);
	kv_config_free(&cfg);
}

static void test_positional(void **state)
{
	struct parse p;

	(void)state;
	PARSE(&p, "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, p.p_defaults.kc_mem_size);
	assert_int_equal(p.p_cfg.kc_threads, 16);
	assert_int_equal(p.p_cfg.kc_numa_node, -1);
	assert_false(p.p_cfg.kc_foreground);
	assert_false(p.p_cfg.kc_debug);
	assert_false(p.p_cfg.kc_allow_other);
	parse_free(&p);

	/* Options may come before, between and after the positionals. */
	PARSE(&p, "-f", "data", "--threads=3", "mnt", "-o", "ro");
	check_run(&p, "ro");
	assert_true(p.p_cfg.kc_foreground);
	assert_int_equal(p.p_cfg.kc_threads, 3);
	parse_free(&p);

	/* After "--", everything is positional. */
	PARSE(&p, "--", "-data", "-mnt");
	assert_int_equal(p.p_rc, KV_OPT_RUN);
	assert_string_equal(p.p_cfg.kc_data_dir, "-data");
	assert_string_equal(p.p_cfg.kc_mountpoint, "-mnt");
	parse_free(&p);
}

static void test_mem_size(void **state)
{
	struct parse p;

	(void)state;
	PARSE(&p, "--mem-size=64M", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 64 * MIB);
	parse_free(&p);

	PARSE(&p, "--mem-size", "64M", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 64 * MIB);
	parse_free(&p);

	PARSE(&p, "data", "mnt", "-o", "mem_size=32M");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 32 * MIB);
	parse_free(&p);

	PARSE(&p, "-omem_size=1GiB", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, GIB);
	parse_free(&p);

	/* The last of equal strength wins. */
	PARSE(&p, "--mem-size=1G", "data", "mnt", "--mem-size", "2G");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 2 * GIB);
	parse_free(&p);

	PARSE(&p, "-o", "mem_size=32M", "data", "mnt", "-o", "mem_size=16M");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 16 * MIB);
	parse_free(&p);

	PARSE(&p, "-o", "mem_size=32M,mem_size=24M", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 24 * MIB);
	parse_free(&p);
}

/*
 * options.h: settings come "weakest first, from its default, a KVFS_*
 * variable, an -o key=value option, or a --long-option=VALUE": a long option
 * beats -o wherever either stands on the line.
 */
static void test_long_option_beats_o(void **state)
{
	struct parse p;
	uint64_t before, after;

	(void)state;
	PARSE(&p, "-o", "mem_size=32M", "--mem-size=64M", "data", "mnt");
	check_run(&p, "");
	before = p.p_cfg.kc_mem_size;
	parse_free(&p);

	PARSE(&p, "--mem-size=64M", "-o", "mem_size=32M", "data", "mnt");
	check_run(&p, "");
	after = p.p_cfg.kc_mem_size;
	parse_free(&p);

	assert_int_equal(before, 64 * MIB);
	assert_int_equal(after, 64 * MIB);
}

static void test_o_options(void **state)
{
	struct parse p;

	(void)state;
	/* FUSE mount options pass through in order; allow_other is also noted. */
	PARSE(&p, "-o", "allow_other,ro", "data", "mnt");
	check_run(&p, "allow_other,ro");
	assert_true(p.p_cfg.kc_allow_other);
	parse_free(&p);

	PARSE(&p, "-o", "mem_size=32M,allow_other", "data", "mnt");
	check_run(&p, "allow_other");
	assert_int_equal(p.p_cfg.kc_mem_size, 32 * MIB);
	assert_true(p.p_cfg.kc_allow_other);
	parse_free(&p);

	PARSE(&p, "-o", "ro", "-o", "fsname=kv,max_read=131072", "data", "mnt", "-oallow_other");
	check_run(&p, "ro,fsname=kv,max_read=131072,allow_other");
	assert_true(p.p_cfg.kc_allow_other);
	parse_free(&p);

	/* fstab-only words are dropped; look-alikes are not. */
	PARSE(
	    &p, "-o",
	    "defaults,auto,noauto,user,nouser,users,_netdev,nofail,x-systemd.automount,x-gvfs-hide",
	    "data", "mnt");
	check_run(&p, "");
	assert_false(p.p_cfg.kc_allow_other);
	parse_free(&p);

	PARSE(&p, "-o", "defaults,threads=4,default_permissions,nofail,auto_unmount,numa_node=0",
	      "data", "mnt");
	check_run(&p, "default_permissions,auto_unmount");
	assert_int_equal(p.p_cfg.kc_threads, 4);
	assert_int_equal(p.p_cfg.kc_numa_node, 0);
	assert_false(p.p_cfg.kc_allow_other);
	parse_free(&p);

	/* Empty items are nothing. */
	PARSE(&p, "-o", ",ro,,", "data", "mnt");
	check_run(&p, "ro");
	parse_free(&p);
}

static void test_environment(void **state)
{
	char *env[] = {"PATH=/usr/bin", "KVFS_MEM_SIZE=48M", "HOME=/root", NULL};
	char *env2[] = {"KVFS_THREADS=8", "KVFS_NUMA_NODE=0", NULL};
	char *bad[] = {"KVFS_MEM_SIZE=banana", NULL};
	struct parse p;

	(void)state;
	PARSE_ENV(&p, env, "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 48 * MIB);
	parse_free(&p);

	/* The command line overrides the environment, whatever the form. */
	PARSE_ENV(&p, env, "--mem-size=64M", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 64 * MIB);
	parse_free(&p);

	PARSE_ENV(&p, env, "data", "mnt", "-o", "mem_size=32M");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_mem_size, 32 * MIB);
	parse_free(&p);

	PARSE_ENV(&p, env2, "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_threads, 8);
	assert_int_equal(p.p_cfg.kc_numa_node, 0);
	assert_int_equal(p.p_cfg.kc_mem_size, p.p_defaults.kc_mem_size);
	parse_free(&p);

	PARSE_ENV(&p, env2, "--threads", "2", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_threads, 2);
	parse_free(&p);

	PARSE_ENV(&p, bad, "data", "mnt");
	check_err(&p, "KVFS_MEM_SIZE", "banana");
}

/* --trace=FILE in its three forms, strongest winning; an empty name is refused. */
static void test_trace(void **state)
{
	char *env[] = {"KVFS_TRACE=/env.jsonl", NULL};
	struct parse p;

	(void)state;
	PARSE(&p, "data", "mnt");
	check_run(&p, "");
	assert_null(p.p_cfg.kc_trace);
	parse_free(&p);

	PARSE(&p, "--trace=/t/a.jsonl", "data", "mnt");
	check_run(&p, "");
	assert_string_equal(p.p_cfg.kc_trace, "/t/a.jsonl");
	parse_free(&p);
	assert_null(p.p_cfg.kc_trace);

	PARSE(&p, "data", "mnt", "-o", "trace=rel.jsonl,allow_other");
	check_run(&p, "allow_other");
	assert_string_equal(p.p_cfg.kc_trace, "rel.jsonl");
	parse_free(&p);

	PARSE_ENV(&p, env, "data", "mnt");
	check_run(&p, "");
	assert_string_equal(p.p_cfg.kc_trace, "/env.jsonl");
	parse_free(&p);

	PARSE_ENV(&p, env, "--trace", "/cli", "data", "mnt", "-o", "trace=/o");
	check_run(&p, "");
	assert_string_equal(p.p_cfg.kc_trace, "/cli");
	parse_free(&p);

	PARSE(&p, "--trace=", "data", "mnt");
	check_err(&p, "--trace", NULL);
}

/* --gpu=auto|cuda|off in its three forms; anything else is refused; auto by default. */
static void test_gpu(void **state)
{
	char *env[] = {"KVFS_GPU=off", NULL};
	struct parse p;

	(void)state;
	PARSE(&p, "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_gpu, KV_DEV_AUTO);
	parse_free(&p);

	PARSE(&p, "--gpu=cuda", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_gpu, KV_DEV_CUDA);
	parse_free(&p);

	PARSE(&p, "data", "mnt", "-o", "gpu=off,allow_other");
	check_run(&p, "allow_other");
	assert_int_equal(p.p_cfg.kc_gpu, KV_DEV_OFF);
	parse_free(&p);

	PARSE_ENV(&p, env, "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_gpu, KV_DEV_OFF);
	parse_free(&p);

	PARSE_ENV(&p, env, "--gpu=auto", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_gpu, KV_DEV_AUTO);
	parse_free(&p);

	PARSE(&p, "--gpu=rocm", "data", "mnt");
	check_err(&p, "--gpu", "rocm");
}

static void test_threads_numa(void **state)
{
	static const char *const bad_threads[] = {"0", "1025", "-1", "abc", "", "4x", "4 "};
	static const char *const bad_nodes[] = {"-2", "x", "", "1.0", "0x1"};
	struct parse p;

	(void)state;
	PARSE(&p, "--threads=1", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_threads, 1);
	parse_free(&p);

	PARSE(&p, "--threads=1024", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_threads, 1024);
	parse_free(&p);

	PARSE(&p, "-o", "threads=7", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_threads, 7);
	parse_free(&p);

	for (size_t i = 0; i < sizeof(bad_threads) / sizeof(bad_threads[0]); i++) {
		char arg[64];

		snprintf(arg, sizeof(arg), "--threads=%s", bad_threads[i]);
		PARSE(&p, arg, "data", "mnt");
		check_err(&p, "--threads", NULL);
	}
	PARSE(&p, "data", "mnt", "-o", "threads=0");
	check_err(&p, "threads", NULL);

	PARSE(&p, "--numa-node=0", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_numa_node, 0);
	parse_free(&p);

	PARSE(&p, "--numa-node", "1", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_numa_node, 1);
	parse_free(&p);

	PARSE(&p, "--numa-node=3", "--numa-node=-1", "data", "mnt");
	check_run(&p, "");
	assert_int_equal(p.p_cfg.kc_numa_node, -1);
	parse_free(&p);

	for (size_t i = 0; i < sizeof(bad_nodes) / sizeof(bad_nodes[0]); i++) {
		char arg[64];

		snprintf(arg, sizeof(arg), "--numa-node=%s", bad_nodes[i]);
		PARSE(&p, arg, "data", "mnt");
		check_err(&p, "--numa-node", NULL);
	}
}

static void test_flags(void **state)
{
	struct parse p;

	(void)state;
	PARSE(&p, "-f", "data", "mnt");
	check_run(&p, "");
	assert_true(p.p_cfg.kc_foreground);
	assert_false(p.p_cfg.kc_debug);
	parse_free(&p);

	/* -d implies -f. */
	PARSE(&p, "data", "mnt", "-d");
	check_run(&p, "");
	assert_true(p.p_cfg.kc_debug);
	assert_true(p.p_cfg.kc_foreground);
	parse_free(&p);
}

static void test_help_version(void **state)
{
	static const char *const help[] = {"-h", "--help"};
	static const char *const version[] = {"-V", "--version"};
	struct parse p;

	(void)state;
	for (int i = 0; i < 2; i++) {
		PARSE(&p, help[i]);
		assert_int_equal(p.p_rc, KV_OPT_HELP);
		parse_free(&p);
		PARSE(&p, "data", "mnt", help[i]);
		assert_int_equal(p.p_rc, KV_OPT_HELP);
		parse_free(&p);
		PARSE(&p, version[i]);
		assert_int_equal(p.p_rc, KV_OPT_VERSION);
		parse_free(&p);
		PARSE(&p, "data", version[i], "mnt");
		assert_int_equal(p.p_rc, KV_OPT_VERSION);
		parse_free(&p);
	}
	assert_non_null(strstr(kv_options_usage, "usage: kvfs"));
	assert_non_null(strstr(kv_options_usage, "--mem-size"));
	assert_non_null(strstr(kv_options_usage, "--threads"));
	assert_non_null(strstr(kv_options_usage, "--numa-node"));
}

static void test_errors(void **state)
{
	struct parse p;

	(void)state;
	PARSE(&p, "--no-such", "data", "mnt");
	check_err(&p, "--no-such", NULL);

	PARSE(&p, "data", "mnt", "--no-such=3");
	check_err(&p, "--no-such", NULL);

	PARSE(&p, "--mem-size=banana", "data", "mnt");
	check_err(&p, "--mem-size", "banana");

	PARSE(&p, "--mem-size=", "data", "mnt");
	check_err(&p, "--mem-size", NULL);

	PARSE(&p, "--mem_size=1G", "data", "mnt");
	check_err(&p, "--mem_size", NULL);

	PARSE(&p, "--threads_=1", "data", "mnt");
	check_err(&p, "--threads_", NULL);

	PARSE(&p, "data", "mnt", "--mem-size");
	check_err(&p, "--mem-size", NULL);

	PARSE(&p, "-o", "mem_size=banana", "data", "mnt");
	check_err(&p, "mem_size", "banana");

	PARSE(&p, "-o", "mem_size", "data", "mnt");
	check_err(&p, "mem_size", NULL);

	PARSE(&p, "-x", "data", "mnt");
	check_err(&p, "-x", NULL);

	PARSE(&p, "data");
	check_err(&p, "MOUNTPOINT", NULL);

	PARSE(&p, "-f");
	check_err(&p, "MOUNTPOINT", NULL);

	PARSE(&p, "data", "mnt", "extra");
	check_err(&p, "extra", NULL);

	/* A small message buffer is truncated, never overrun. */
	{
		char *argv[] = {"kvfs", "--no-such-option-with-a-long-name", "data", "mnt", NULL};
		char err[8];
		struct kv_config cfg;
		char *fuse = NULL;

		kv_config_defaults(&cfg);
		memset(err, 'z', sizeof(err));
		assert_int_equal(kv_options_parse(4, argv, NULL, &cfg, &fuse, err, sizeof(err)),
				 -EINVAL);
		assert_non_null(memchr(err, '\0', sizeof(err)));
		kv_config_free(&cfg);
		free(fuse);
	}
}

static void test_render(void **state)
{
	struct parse p;
	char *buf = NULL;
	size_t len = 0;

	(void)state;
	PARSE(&p, "--mem-size=64M", "--threads=5", "--numa-node=0", "-o", "allow_other", "data",
	      "mnt");
	check_run(&p, "allow_other");
	assert_int_equal(kv_config_render(&p.p_cfg, &buf, &len), 0);
	assert_non_null(buf);
	assert_int_equal(len, strlen(buf));
	assert_non_null(strstr(buf, "mem_size = 67108864\n"));
	assert_non_null(strstr(buf, "threads = 5\n"));
	assert_non_null(strstr(buf, "numa_node = 0\n"));
	assert_non_null(strstr(buf, "data_dir = data\n"));
	assert_non_null(strstr(buf, "mountpoint = mnt\n"));
	assert_non_null(strstr(buf, "allow_other = 1\n"));
	assert_int_equal(buf[len - 1], '\n');
	free(buf);
	parse_free(&p);

	/* The defaults render too, with no paths. */
	{
		struct kv_config cfg;
		char want[64];

		kv_config_defaults(&cfg);
		assert_int_equal(kv_config_render(&cfg, &buf, &len), 0);
		snprintf(want, sizeof(want), "mem_size = %llu\n",
			 (unsigned long long)cfg.kc_mem_size);
		assert_non_null(strstr(buf, want));
		assert_non_null(strstr(buf, "numa_node = -1\n"));
		assert_non_null(strstr(buf, "threads = 16\n"));
		free(buf);
		kv_config_free(&cfg);
	}
}

/* The shared tier's settings: defaults, three spellings, switches, refusals, rendering. */
static void test_rados(void **state)
{
	char *env[] = {"KVFS_RADOS_POOL=envpool", "KVFS_RADOS_TIMEOUT=3s", "KVFS_RADOS_SYNC=on",
		       NULL};
	char *bad_env[] = {"KVFS_RADOS_TIMEOUT=0", NULL};
	struct parse p;
	char *buf = NULL;
	size_t len = 0;

	(void)state;
	PARSE(&p, "data", "mnt");
	check_run(&p, "");
	assert_null(p.p_cfg.kc_rados_pool);
	assert_null(p.p_cfg.kc_rados_conf);
	assert_null(p.p_cfg.kc_rados_id);
	assert_null(p.p_cfg.kc_rados_namespace);
	assert_int_equal(p.p_cfg.kc_rados_timeout_ns, 10000000000ull);
	assert_int_equal(p.p_cfg.kc_rados_cache_ttl_ns, 1000000000ull);
	assert_false(p.p_cfg.kc_rados_sync);
	assert_int_equal(kv_config_render(&p.p_cfg, &buf, &len), 0);
	assert_non_null(strstr(buf, "rados_pool = \n"));
	assert_non_null(strstr(buf, "rados_conf = /etc/ceph/ceph.conf\n"));
	assert_non_null(strstr(buf, "rados_id = admin\n"));
	assert_non_null(strstr(buf, "rados_namespace = \n"));
	assert_non_null(strstr(buf, "rados_timeout_ms = 10000.000\n"));
	assert_non_null(strstr(buf, "rados_cache_ttl_ms = 1000.000\n"));
	assert_non_null(strstr(buf, "rados_sync = off\n"));
	free(buf);
	parse_free(&p);

	PARSE(&p, "--rados-pool=kv", "--rados-conf=/c/ceph.conf", "--rados-id", "node7",
	      "--rados-namespace=ns1", "--rados-timeout=2500ms", "--rados-cache-ttl=0",
	      "--rados-sync", "data", "mnt");
	check_run(&p, "");
	assert_string_equal(p.p_cfg.kc_rados_pool, "kv");
	assert_string_equal(p.p_cfg.kc_rados_conf, "/c/ceph.conf");
	assert_string_equal(p.p_cfg.kc_rados_id, "node7");
	assert_string_equal(p.p_cfg.kc_rados_namespace, "ns1");
	assert_int_equal(p.p_cfg.kc_rados_timeout_ns, 2500000000ull);
	assert_int_equal(p.p_cfg.kc_rados_cache_ttl_ns, 0);
	assert_true(p.p_cfg.kc_rados_sync);
	assert_int_equal(kv_config_render(&p.p_cfg, &buf, &len), 0);
	assert_non_null(strstr(buf, "rados_pool = kv\n"));
	assert_non_null(strstr(buf, "rados_conf = /c/ceph.conf\n"));
	assert_non_null(strstr(buf, "rados_id = node7\n"));
	assert_non_null(strstr(buf, "rados_namespace = ns1\n"));
	assert_non_null(strstr(buf, "rados_timeout_ms = 2500.000\n"));
	assert_non_null(strstr(buf, "rados_cache_ttl_ms = 0.000\n"));
	assert_non_null(strstr(buf, "rados_sync = on\n"));
	free(buf);
	parse_free(&p);

	/* -o, a bare switch included; the empty namespace is the default one */
	PARSE(&p, "data", "mnt", "-o",
	      "rados_pool=op,rados_namespace=,rados_sync,rados_cache_ttl=5s,allow_other");
	check_run(&p, "allow_other");
	assert_string_equal(p.p_cfg.kc_rados_pool, "op");
	assert_string_equal(p.p_cfg.kc_rados_namespace, "");
	assert_true(p.p_cfg.kc_rados_sync);
	assert_int_equal(p.p_cfg.kc_rados_cache_ttl_ns, 5000000000ull);
	parse_free(&p);

	/* the environment, beaten by -o and the long options */
	PARSE_ENV(&p, env, "data", "mnt");
	check_run(&p, "");
	assert_string_equal(p.p_cfg.kc_rados_pool, "envpool");
	assert_int_equal(p.p_cfg.kc_rados_timeout_ns, 3000000000ull);
	assert_true(p.p_cfg.kc_rados_sync);
	parse_free(&p);

	PARSE_ENV(&p, env, "--rados-sync=off", "data", "mnt", "-o", "rados_pool=o,rados_sync=on",
		  "--rados-pool=cli");
	check_run(&p, "");
	assert_string_equal(p.p_cfg.kc_rados_pool, "cli");
	assert_false(p.p_cfg.kc_rados_sync);
	parse_free(&p);

	PARSE(&p, "--rados-pool=", "data", "mnt");
	check_err(&p, "--rados-pool", NULL);
	PARSE(&p, "-o", "rados_pool", "data", "mnt");
	check_err(&p, "rados_pool", NULL);
	PARSE(&p, "--rados-conf=", "data", "mnt");
	check_err(&p, "--rados-conf", NULL);
	PARSE(&p, "--rados-id=", "data", "mnt");
	check_err(&p, "--rados-id", NULL);
	PARSE(&p, "--rados-timeout=500ms", "data", "mnt");
	check_err(&p, "--rados-timeout", "out of range");
	PARSE(&p, "--rados-timeout=2h", "data", "mnt");
	check_err(&p, "--rados-timeout", "2h");
	PARSE(&p, "--rados-cache-ttl=soon", "data", "mnt");
	check_err(&p, "--rados-cache-ttl", "soon");
	PARSE(&p, "--rados-sync=yes", "data", "mnt");
	check_err(&p, "--rados-sync", "yes");
	PARSE_ENV(&p, bad_env, "data", "mnt");
	check_err(&p, "KVFS_RADOS_TIMEOUT", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_size_good),
	    cmocka_unit_test(test_parse_size_bad),
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_positional),
	    cmocka_unit_test(test_mem_size),
	    cmocka_unit_test(test_long_option_beats_o),
	    cmocka_unit_test(test_o_options),
	    cmocka_unit_test(test_environment),
	    cmocka_unit_test(test_threads_numa),
	    cmocka_unit_test(test_flags),
	    cmocka_unit_test(test_help_version),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_render),
	    cmocka_unit_test(test_trace),
	    cmocka_unit_test(test_gpu),
	    cmocka_unit_test(test_rados),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
