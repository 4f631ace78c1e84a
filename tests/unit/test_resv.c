/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_resv.c — reserved extent sets (core/resv.h), against a
 * plain bitmap: every add and cut, random and at the edges, leaves the
 * ranges sorted, apart, counted right and holding exactly the model's bits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/resv.h"

#define N 512 /* extents the model covers */

static void check(const struct kv_resv *rv, const bool *model)
{
	uint64_t count = 0;

	for (uint32_t k = 0; k < N; k++) {
		assert_int_equal(kv_resv_has(rv, k), model[k]);
		count += model[k];
	}
	assert_int_equal(kv_resv_count(rv), count);
	if (!count) {
		assert_null(rv);
		return;
	}
	for (uint32_t i = 0; i < rv->rv_n; i++) {
		assert_true(rv->rv_r[i].xr_first < rv->rv_r[i].xr_end);
		if (i) /* apart: adjacent ranges are one */
			assert_true(rv->rv_r[i - 1].xr_end < rv->rv_r[i].xr_first);
	}
}

static void add(struct kv_resv **rv, bool *model, uint32_t first, uint32_t end)
{
	/* Only extents not yet in the set are ever added: add its gaps in [first, end). */
	for (uint32_t k = first; k < end;) {
		uint32_t e = k;

		while (e < end && !model[e])
			e++;
		assert_int_equal(kv_resv_add(rv, k, e), 0);
		for (uint32_t j = k; j < e; j++)
			model[j] = true;
		k = e + 1;
	}
}

static void cut(struct kv_resv **rv, bool *model, uint32_t first, uint32_t end)
{
	int64_t want = 0;

	for (uint32_t k = first; k < end && k < N; k++) {
		want += model[k];
		model[k] = false;
	}
	assert_int_equal(kv_resv_cut(rv, first, end), want);
}

static void test_edges(void **state)
{
	struct kv_resv *rv = NULL;
	bool model[N] = {0};

	(void)state;
	check(rv, model);
	add(&rv, model, 10, 20);
	add(&rv, model, 30, 40);
	add(&rv, model, 20, 30); /* joins both neighbours */
	check(rv, model);
	assert_int_equal(rv->rv_n, 1);
	add(&rv, model, 0, 5);
	add(&rv, model, 5, 10); /* joins both */
	assert_int_equal(rv->rv_n, 1);
	cut(&rv, model, 15, 16); /* a split */
	check(rv, model);
	assert_int_equal(rv->rv_n, 2);
	cut(&rv, model, 3, 35); /* trims one end of each, drops nothing */
	check(rv, model);
	cut(&rv, model, 0, UINT32_MAX); /* all: the set goes */
	check(rv, model);
	assert_int_equal(kv_resv_cut(&rv, 0, 10), 0);
	assert_int_equal(kv_resv_add(&rv, 7, 7), 0); /* empty */
	assert_null(rv);
}

static void test_random_against_a_bitmap(void **state)
{
	struct kv_resv *rv = NULL;
	bool model[N] = {0};

	(void)state;
	srand(7);
	for (int i = 0; i < 4000; i++) {
		uint32_t a = (uint32_t)rand() % N, len = 1 + (uint32_t)rand() % 40;
		uint32_t b = a + len < N ? a + len : N;

		if (rand() % 3)
			add(&rv, model, a, b);
		else
			cut(&rv, model, a, b);
		check(rv, model);
	}
	kv_resv_free(rv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_edges),
	    cmocka_unit_test(test_random_against_a_bitmap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
