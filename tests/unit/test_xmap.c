/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_xmap.c — extent maps (core/xmap.h): entries stay sorted
 * through set, add and cut, lookups find them, and kv_xmap_alloc (kept,
 * not counted per call) always equals a count made from scratch.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>

#include "core/xmap.h"

static struct kv_loc loc(uint32_t index, uint64_t len)
{
	return (struct kv_loc){.kl_bucket = 1 + index % 3,
			       .kl_off = (uint64_t)index << 22,
			       .kl_len = len,
			       .kl_seq = 7,
			       .kl_head_len = 4096,
			       .kl_index = index};
}

/* What kv_xmap_alloc must say: the data records' bytes, page by page. */
static uint64_t counted(const struct kv_xmap *m)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < kv_xmap_nx(m); i++)
		n += (kv_xmap_cat(m, i)->xe_loc.kl_len + 4095) / 4096 * 4096;
	return n;
}

static void check(const struct kv_xmap *m)
{
	assert_int_equal(kv_xmap_alloc(m), counted(m));
	for (uint32_t i = 0; i < m->xm_n; i++) {
		if (i)
			assert_true(kv_xmap_cat(m, i - 1)->xe_loc.kl_index <
				    kv_xmap_cat(m, i)->xe_loc.kl_index);
		assert_int_equal(kv_xmap_find(m, kv_xmap_cat(m, i)->xe_loc.kl_index), i);
	}
}

static void test_alloc_through_changes(void **state)
{
	struct kv_loc locs[4] = {loc(0, 2 << 20), loc(2, 2 << 20), loc(5, 10),
				 loc(KV_MANIFEST_INDEX, 72)};
	struct kv_loc more[2] = {loc(1, 4097), loc(3, 2 << 20)};
	uint64_t *none[2] = {NULL, NULL};
	struct kv_xmap m;

	(void)state;
	assert_int_equal(kv_xmap_set(&m, 9, (10ull << 20) + 10, locs, 4), 0);
	check(&m);
	assert_int_equal(kv_xmap_alloc(&m), (4 << 20) + 4096);
	assert_int_equal(kv_xmap_add(&m, more, none, 2), 0);
	check(&m);
	assert_int_equal(kv_xmap_alloc(&m), (6 << 20) + 3 * 4096);
	assert_int_equal(kv_xmap_add(&m, more, none, 1), -EEXIST); /* index 1 is there */
	check(&m);
	kv_xmap_cut(&m, 1, 3); /* indexes 1 and 2 */
	check(&m);
	assert_int_equal(kv_xmap_alloc(&m), (4 << 20) + 4096);
	kv_xmap_cut(&m, 0, 3); /* down to the manifest alone: one entry */
	assert_int_equal(m.xm_n, 1);
	assert_int_equal(kv_xmap_alloc(&m), 0);
	kv_xmap_clear(&m);
	assert_int_equal(kv_xmap_alloc(&m), 0);

	/* One WHOLE record. */
	assert_int_equal(kv_xmap_set(&m, 3, 5000, (struct kv_loc[]){loc(0, 5000)}, 1), 0);
	assert_true(kv_xmap_whole(&m));
	assert_int_equal(kv_xmap_alloc(&m), 8192);
	assert_int_equal(kv_xmap_add(&m, (struct kv_loc[]){loc(4, 100)}, none, 1), 0);
	check(&m);
	assert_int_equal(kv_xmap_alloc(&m), 3 * 4096);
	kv_xmap_clear(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_alloc_through_changes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
