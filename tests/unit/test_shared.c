/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_shared.c — the shared tier's connection state machine
 * (core/shared.h) without a cluster: a conf file that does not exist makes
 * every attempt fail at once, so the mount-side behaviour shows in
 * milliseconds: kv_shared_start returns at once, the state goes
 * "unreachable" with the errno, attempts are retried, and a stop during
 * the backoff returns at once. Built without librados, start says
 * -ENOTSUP. The real cluster is in tests/integration/test_rados_tier.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/shared.h"
#include "core/stats.h"
#include "core/store.h"
#include "ssd/rados.h"
#include "ssd/rados_format.h"

static void test_unreachable_and_stop(void **state)
{
	struct kv_config cfg;
	struct kv_shared *sh = NULL;
	struct kv_shared_stats s;
	struct kv_store *st;
	uint64_t t0;
	int i;

	(void)state;
	kv_config_defaults(&cfg);
	cfg.kc_mem_size = 16 << 20;
	assert_int_equal(kv_store_create(&st, &cfg, -1), 0);
	cfg.kc_rados_pool = "kv";
	cfg.kc_rados_conf = "/nonexistent/kvfs-test/ceph.conf";
	cfg.kc_rados_timeout_ns = 1000000000ull;
	t0 = kv_now_ns();
	if (!kv_shared_built()) {
		assert_int_equal(kv_shared_start(&cfg, st, 1, &sh), -ENOTSUP);
		assert_null(sh);
		kv_store_destroy(st);
		return;
	}
	assert_int_equal(kv_shared_start(&cfg, st, 1, &sh), 0);
	assert_true(kv_now_ns() - t0 < 500000000ull);
	assert_string_equal(kv_shared_pool(sh), "kv");
	assert_string_equal(kv_shared_namespace(sh), "");
	/* the first attempt fails at once (no conf), the second one a second later */
	for (i = 0; i < 300; i++) {
		kv_shared_stats(sh, &s);
		if (s.ss_connect_failures >= 2)
			break;
		usleep(10000);
	}
	assert_int_equal(s.ss_state, KV_SHARED_UNREACHABLE);
	assert_true(s.ss_connect_failures >= 2);
	assert_true(s.ss_connect_attempts >= s.ss_connect_failures);
	assert_int_equal(s.ss_last_err, -ENOENT);
	assert_non_null(strstr(s.ss_last_error_text, "conf: "));
	assert_int_equal(s.ss_objects_read + s.ss_bytes_written + s.ss_errors + s.ss_timeouts, 0);
	/* changes made meanwhile wait in the queue, counted */
	{
		struct kv_cred c = {0};
		struct kv_inode *d;
		struct kv_attr a;

		assert_int_equal(kv_store_mkdir(st, kv_store_root(st), "m", 0755, &c, &d, &a), 0);
		kv_store_forget(st, d, 1);
		assert_int_equal(kv_store_rmdir(st, kv_store_root(st), "m"), 0);
		kv_shared_stats(sh, &s);
		assert_int_equal(s.ss_backlog, 2);
		/* not connected: a sync gives up after the timeout */
		assert_int_equal(kv_shared_sync(sh), -EIO);
	}
	/* now in a backoff of 2 s: the stop does not wait for it */
	t0 = kv_now_ns();
	kv_shared_stop(sh);
	assert_true(kv_now_ns() - t0 < 500000000ull);
	kv_shared_stop(NULL);
	kv_store_destroy(st);
}

/* Object names (ssd/rados_format.h): fixed width, parsed back, nothing else parses. */
static void test_names(void **state)
{
	char oid[KV_RADOS_OID_MAX], d1[KV_RADOS_OID_MAX], d2[KV_RADOS_OID_MAX];
	uint64_t node, seq;
	uint32_t i;

	(void)state;
	kv_rados_data_oid(oid, 0x0123456789abcdefull, 42, 7);
	assert_string_equal(oid, "x.0123456789abcdef.000000000000002a.00000007");
	assert_true(kv_rados_parse_data_oid(oid, &node, &seq, &i));
	assert_true(node == 0x0123456789abcdefull && seq == 42 && i == 7);
	kv_rados_data_oid(oid, UINT64_MAX, UINT64_MAX, UINT32_MAX);
	assert_true(kv_rados_parse_data_oid(oid, &node, &seq, &i));
	assert_true(node == UINT64_MAX && seq == UINT64_MAX && i == UINT32_MAX);
	assert_false(kv_rados_parse_data_oid("x.0123456789abcdef.000000000000002a.0000007", &node,
					     &seq, &i));
	assert_false(kv_rados_parse_data_oid("x.0123456789ABCDEF.000000000000002a.00000007", &node,
					     &seq, &i));
	assert_false(kv_rados_parse_data_oid("d.0123456789abcdef0123456789abcdef", &node, &seq, &i));
	kv_rados_dir_oid(d1, "/", 1);
	kv_rados_dir_oid(d2, "/a", 2);
	assert_int_equal(strlen(d1), 2 + 32);
	assert_memory_equal(d1, "d.", 2);
	assert_string_not_equal(d1, d2);
	kv_rados_dir_oid(d2, "/ab", 2); /* only len bytes count */
	kv_rados_dir_oid(oid, "/a", 2);
	assert_string_equal(d2, oid);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_unreachable_and_stop),
	    cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
