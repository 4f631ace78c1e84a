/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_copy_pool.c — the helper threads of large host copies
 * (gpu/copy_pool.h): every part runs once, idle helpers run parts beside
 * the caller, a caller never waits for helpers busy with another run, and
 * the pool stops cleanly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "gpu/copy_pool.h"

/* How long a part waits for something another thread should do: far longer than it takes. */
#define PATIENCE_NS (10ull * 1000000000ull)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until *flag is set, or PATIENCE_NS. Returns whether it was set. */
static bool wait_flag(atomic_bool *flag)
{
	uint64_t t0 = now_ns();

	while (!atomic_load(flag)) {
		if (now_ns() - t0 > PATIENCE_NS)
			return false;
		usleep(100);
	}
	return true;
}

struct count {
	atomic_int c_runs[KV_COPY_PARTS_MAX];
};

static void count_part(void *arg, unsigned i)
{
	struct count *c = arg;

	atomic_fetch_add(&c->c_runs[i], 1);
}

/* Any number of helpers, any number of parts: each part once, all done on return. */
static void test_each_part_once(void **state)
{
	(void)state;
	for (unsigned h = 0; h <= KV_COPY_HELPERS_MAX + 1; h++) {
		struct kv_copy_pool *p = NULL;

		assert_int_equal(kv_copy_pool_create(h, &p), 0);
		assert_int_equal(kv_copy_pool_width(p),
				 (h > KV_COPY_HELPERS_MAX ? KV_COPY_HELPERS_MAX : h) + 1);
		for (int round = 0; round < 200; round++) {
			for (unsigned n = 1; n <= KV_COPY_PARTS_MAX; n++) {
				struct count c = {0};

				kv_copy_pool_run(p, count_part, &c, n);
				for (unsigned i = 0; i < KV_COPY_PARTS_MAX; i++)
					assert_int_equal(atomic_load(&c.c_runs[i]), i < n);
			}
		}
		kv_copy_pool_destroy(p);
	}
	assert_true(kv_copy_pool_default_helpers() <= KV_COPY_HELPERS_MAX);
}

struct meet {
	atomic_bool m_started[KV_COPY_PARTS_MAX];
	pthread_t m_thread[KV_COPY_PARTS_MAX];
	bool m_saw_all[KV_COPY_PARTS_MAX];
};

/* Each part returns only once every part has started: they all run at once, or time out. */
static void meet_part(void *arg, unsigned i)
{
	struct meet *m = arg;

	m->m_thread[i] = pthread_self();
	atomic_store(&m->m_started[i], true);
	m->m_saw_all[i] = true;
	for (unsigned k = 0; k < KV_COPY_PARTS_MAX; k++)
		m->m_saw_all[i] &= wait_flag(&m->m_started[k]);
}

/* With helpers idle, the parts run on them, each on its own, while the caller runs part 0. */
static void test_parts_run_beside_the_caller(void **state)
{
	struct kv_copy_pool *p = NULL;

	(void)state;
	assert_int_equal(kv_copy_pool_create(KV_COPY_HELPERS_MAX, &p), 0);
	for (int round = 0; round < 20; round++) {
		struct meet m = {0};

		kv_copy_pool_run(p, meet_part, &m, KV_COPY_PARTS_MAX);
		for (unsigned i = 0; i < KV_COPY_PARTS_MAX; i++)
			assert_true(m.m_saw_all[i]);
		for (unsigned i = 1; i < KV_COPY_PARTS_MAX; i++) {
			assert_false(pthread_equal(m.m_thread[i], pthread_self()));
			for (unsigned k = 0; k < i; k++)
				assert_false(pthread_equal(m.m_thread[i], m.m_thread[k]));
		}
	}
	kv_copy_pool_destroy(p);
}

/*
 * A run whose part 1 holds the only helper until released: part 0, on the
 * caller, returns only once part 1 has started, so a helper started it.
 */
struct hog {
	struct kv_copy_pool *h_pool;
	atomic_bool h_running, h_release;
	bool h_started;	 /* part 0 saw part 1 start in time */
	bool h_released; /* part 1 saw h_release in time */
};

static void hog_part(void *arg, unsigned i)
{
	struct hog *h = arg;

	if (i == 0) {
		h->h_started = wait_flag(&h->h_running);
		return;
	}
	atomic_store(&h->h_running, true);
	h->h_released = wait_flag(&h->h_release);
}

static void *hog_main(void *arg)
{
	struct hog *h = arg;

	kv_copy_pool_run(h->h_pool, hog_part, h, 2);
	return NULL;
}

/* With the helper busy with another run, a run does all its parts itself, at once. */
static void test_busy_helpers_are_not_waited_for(void **state)
{
	struct hog h = {0};
	struct count c = {0};
	pthread_t t;
	uint64_t t0;

	(void)state;
	assert_int_equal(kv_copy_pool_create(1, &h.h_pool), 0);
	assert_int_equal(pthread_create(&t, NULL, hog_main, &h), 0);
	assert_true(wait_flag(&h.h_running));
	t0 = now_ns();
	kv_copy_pool_run(h.h_pool, count_part, &c, KV_COPY_PARTS_MAX);
	assert_true(now_ns() - t0 < PATIENCE_NS / 2);
	for (unsigned i = 0; i < KV_COPY_PARTS_MAX; i++)
		assert_int_equal(atomic_load(&c.c_runs[i]), 1);
	atomic_store(&h.h_release, true);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(h.h_started);
	assert_true(h.h_released);
	kv_copy_pool_destroy(h.h_pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_each_part_once),
	    cmocka_unit_test(test_parts_run_beside_the_caller),
	    cmocka_unit_test(test_busy_helpers_are_not_waited_for),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
