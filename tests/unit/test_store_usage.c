/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_store_usage.c — the store's counters and references
 * (core/store.c): what kv_store_usage counts as keys, directories, open
 * files, bytes and inodes, and the references lookups take and
 * kv_store_forget drops. The store and the helpers are
 * tests/unit/store_fixture.h.
 */
#include <stdio.h>

#include "store_fixture.h"

static void test_usage(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *s, *f[4];
	static const uint64_t sizes[4] = {0, 10, 5000, MIB};
	struct kv_store_usage u;
	struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = 7};
	struct kv_attr a;

	(void)state;
	d = mkdir_ok(st, root, "d");
	s = mkdir_ok(st, d, "s");
	for (int i = 0; i < 4; i++) {
		char name[8];

		snprintf(name, sizeof(name), "f%d", i);
		f[i] = make_file(st, i < 2 ? d : s, name, sizes[i], (unsigned)i);
	}
	u = usage(st);
	assert_int_equal(u.ku_keys, 4);
	assert_int_equal(u.ku_dirs, 3);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_bytes, 10 + 5000 + MIB);
	assert_int_equal(u.ku_inodes, 7);
	assert_int_equal(u.ku_last_seq, getattr(st, f[3]).ka_seq);
	assert_int_equal(used(st), 4096 + 8192 + MIB);

	open_ok(st, f[1], O_RDWR);
	open_ok(st, f[2], O_RDONLY);
	assert_int_equal(usage(st).ku_open, 2);
	write_pat(st, f[1], 0, 100, 9);
	assert_int_equal(usage(st).ku_bytes, 100 + 5000 + MIB);
	kv_store_release(st, f[1], O_RDWR);
	kv_store_release(st, f[2], O_RDONLY);
	assert_int_equal(usage(st).ku_open, 0);

	assert_int_equal(kv_store_setattr(st, f[3], &sa, &a), 0);
	assert_int_equal(usage(st).ku_bytes, 100 + 5000 + 7);
	assert_int_equal(usage(st).ku_last_seq, a.ka_seq);

	assert_int_equal(kv_store_unlink(st, s, "f2"), 0);
	assert_int_equal(usage(st).ku_keys, 3);
	kv_store_forget(st, f[2], 1);
	u = usage(st);
	assert_int_equal(u.ku_bytes, 100 + 7);
	assert_int_equal(u.ku_inodes, 6);

	for (int i = 0; i < 4; i++)
		if (i != 2)
			kv_store_forget(st, f[i], 1);
	kv_store_forget(st, s, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

/* Lookups take references that forget(n) drops; the name holds one of its own. */
static void test_references(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *d, *g;

	(void)state;
	f = mknod_ok(st, root, "f");
	open_ok(st, f, O_WRONLY);
	write_pat(st, f, 0, 64 * KIB, 1);
	kv_store_release(st, f, O_WRONLY);
	for (int i = 0; i < 3; i++)
		assert_ptr_equal(lookup_ok(st, root, "f"), f);
	kv_store_forget(st, f, 4);
	assert_int_equal(usage(st).ku_inodes, 2);
	assert_int_equal(used(st), 64 * KIB);
	f = lookup_ok(st, root, "f");
	check_value(st, f, 64 * KIB, 1);
	assert_ptr_equal(lookup_ok(st, root, "f"), f);
	assert_int_equal(kv_store_unlink(st, root, "f"), 0);
	kv_store_forget(st, f, 1);
	assert_int_equal(usage(st).ku_inodes, 2);
	assert_int_equal(used(st), 64 * KIB);
	kv_store_forget(st, f, 1);
	assert_int_equal(usage(st).ku_inodes, 1);
	assert_int_equal(used(st), 0);

	/* Directories too. */
	d = mkdir_ok(st, root, "d");
	assert_ptr_equal(lookup_ok(st, root, "d"), d);
	assert_int_equal(kv_store_rmdir(st, root, "d"), 0);
	kv_store_forget(st, d, 1);
	assert_int_equal(usage(st).ku_inodes, 2);
	kv_store_forget(st, d, 1);
	assert_int_equal(usage(st).ku_inodes, 1);

	/* A transient reference keeps an inode just as well. */
	g = make_file(st, root, "g", 5000, 2);
	kv_inode_get(g);
	assert_int_equal(kv_store_unlink(st, root, "g"), 0);
	kv_store_forget(st, g, 1);
	assert_int_equal(usage(st).ku_inodes, 2);
	check_value(st, g, 5000, 2);
	kv_inode_put(g);
	assert_int_equal(usage(st).ku_inodes, 1);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_usage),
	    cmocka_unit_test(test_references),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
