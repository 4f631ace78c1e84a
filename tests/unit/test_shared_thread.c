/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_shared_thread.c — the shared tier's connection state
 * machine (rados/shared_thread.c, rados/shared.h) without a cluster: a
 * conf file that does not exist makes every attempt fail at once, so the
 * mount-side behaviour shows in milliseconds: kv_shared_start returns at
 * once, the state goes "unreachable" with the errno, attempts are
 * retried, and a stop during the backoff returns at once. Built without
 * librados, start says -ENOTSUP. The real cluster is in
 * tests/integration/test_rados_tier.py and test_rados_shared.py.
 */
#include <errno.h>

#include "shared_fixture.h"
#include "rados/shared.h"
#include "core/stats.h"
#include "core/store.h"
#include "rados/rados_log.h"

static void test_unreachable_and_stop(void **state)
{
	struct kv_config cfg;
	struct kv_shared *sh = NULL;
	struct kv_shared_stats s;
	struct kv_store *st;
	char dir[64];
	uint64_t t0;
	int i, dirfd;

	(void)state;
	kv_config_defaults(&cfg);
	cfg.kc_mem_size = 16 << 20;
	assert_int_equal(kv_store_create(&st, &cfg, -1), 0);
	cfg.kc_rados_pool = "kv";
	cfg.kc_rados_conf = "/nonexistent/kvfs-test/ceph.conf";
	cfg.kc_rados_timeout_ns = 1000000000ull;
	t0 = kv_now_ns();
	if (!kv_shared_built()) {
		assert_int_equal(kv_shared_start(&cfg, st, 1, -1, &sh), -ENOTSUP);
		assert_null(sh);
		kv_store_destroy(st);
		return;
	}
	dirfd = scratch_dir(dir);
	assert_int_equal(kv_shared_start(&cfg, st, 1, dirfd, &sh), 0);
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
	/* the changes not sent are in DATA_DIR/rados.log: a new start queues them again */
	assert_int_equal(kv_shared_start(&cfg, st, 1, dirfd, &sh), 0);
	kv_shared_stats(sh, &s);
	assert_int_equal(s.ss_replayed, 2);
	assert_int_equal(s.ss_backlog, 2);
	assert_int_equal(kv_shared_persist(sh), 0);
	kv_shared_stop(sh);
	/* another pool: that log is set aside, not sent there */
	cfg.kc_rados_pool = "other";
	assert_int_equal(kv_shared_start(&cfg, st, 1, dirfd, &sh), 0);
	kv_shared_stats(sh, &s);
	assert_int_equal(s.ss_replayed + s.ss_backlog, 0);
	kv_shared_stop(sh);
	assert_int_equal(faccessat(dirfd, KV_RLOG_NAME ".old", F_OK, 0), 0);
	rm_dir(dirfd, dir);
	kv_store_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_unreachable_and_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
