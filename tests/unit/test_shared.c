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

static void test_unreachable_and_stop(void **state)
{
	struct kv_config cfg;
	struct kv_shared *sh = NULL;
	struct kv_shared_stats s;
	uint64_t t0;
	int i;

	(void)state;
	kv_config_defaults(&cfg);
	cfg.kc_rados_pool = "kv";
	cfg.kc_rados_conf = "/nonexistent/kvfs-test/ceph.conf";
	cfg.kc_rados_timeout_ns = 1000000000ull;
	t0 = kv_now_ns();
	if (!kv_shared_built()) {
		assert_int_equal(kv_shared_start(&cfg, &sh), -ENOTSUP);
		assert_null(sh);
		return;
	}
	assert_int_equal(kv_shared_start(&cfg, &sh), 0);
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
	/* now in a backoff of 2 s: the stop does not wait for it */
	t0 = kv_now_ns();
	kv_shared_stop(sh);
	assert_true(kv_now_ns() - t0 < 500000000ull);
	kv_shared_stop(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_unreachable_and_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
