/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_store_ns.c — the namespace (core/ns.c): create and
 * lookup, the rules for names, unlink and rmdir, a directory's links,
 * readdir, rename (move, replace, noreplace, exchange, the errors), and
 * the metadata-only nodes (symlinks, FIFOs, sockets). The store and the
 * helpers are tests/unit/store_fixture.h.
 */
#include <stdio.h>

#include "store_fixture.h"

/* Looks name up, checks it is `want`, and drops the lookup again. */
static void check_name_is(struct kv_store *st, struct kv_inode *dir, const char *name,
			  struct kv_inode *want)
{
	struct kv_inode *ino = lookup_ok(st, dir, name);

	assert_ptr_equal(ino, want);
	kv_store_forget(st, ino, 1);
}

/* ---- namespace ---- */

static void test_create_lookup(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *f, *g, *x = NULL;
	struct kv_cred other = {.kc_uid = 1234, .kc_gid = 5678};
	struct kv_store_usage u;
	struct kv_attr a;

	(void)state;
	a = getattr(st, root);
	assert_true(kv_inode_is_dir(root));
	assert_true(S_ISDIR(a.ka_mode));
	assert_int_equal(a.ka_nlink, 2);
	assert_int_equal(a.ka_ino, kv_inode_ino(root));

	/* Type bits in mode are ignored: the call decides. */
	assert_int_equal(kv_store_mkdir(st, root, "d", S_IFREG | 0750, &other, &d, &a), 0);
	assert_int_equal(a.ka_mode, S_IFDIR | 0750);
	assert_int_equal(a.ka_nlink, 2);
	assert_int_equal(a.ka_uid, 1234);
	assert_int_equal(a.ka_gid, 5678);
	assert_int_equal(a.ka_ino, kv_inode_ino(d));
	assert_int_not_equal(a.ka_ino, kv_inode_ino(root));
	assert_true(kv_inode_is_dir(d));
	assert_int_equal(getattr(st, root).ka_nlink, 3);

	/* mknod makes regular files, FIFOs and sockets; no directories, no devices. */
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFDIR | 0640, &other, &f, &a), -EINVAL);
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFCHR | 0640, &other, &f, &a), -EPERM);
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFBLK | 0640, &other, &f, &a), -EPERM);
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFREG | 0640, &other, &f, &a), 0);
	assert_int_equal(a.ka_mode, S_IFREG | 0640);
	assert_int_equal(a.ka_nlink, 1);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(a.ka_uid, 1234);
	assert_false(kv_inode_is_dir(f));
	assert_int_equal(getattr(st, d).ka_nlink, 2);

	assert_int_equal(kv_store_create_open(st, d, "g", 0600, &cred, &g, &a), 0);
	assert_int_equal(a.ka_mode, S_IFREG | 0600);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(usage(st).ku_open, 1);
	kv_store_release(st, g, O_WRONLY);
	assert_int_equal(usage(st).ku_open, 0);
	assert_int_not_equal(kv_inode_ino(f), kv_inode_ino(g));
	assert_int_not_equal(kv_inode_ino(f), kv_inode_ino(d));

	/* Lookups find the same inodes and report their attributes. */
	assert_int_equal(kv_store_lookup(st, root, "d", &x, &a), 0);
	assert_ptr_equal(x, d);
	assert_int_equal(a.ka_ino, kv_inode_ino(d));
	assert_int_equal(a.ka_mode, S_IFDIR | 0750);
	assert_int_equal(a.ka_nlink, 2);
	kv_store_forget(st, x, 1);
	check_name_is(st, d, "f", f);
	check_name_is(st, d, "g", g);

	assert_int_equal(lookup_err(st, d, "nope"), -ENOENT);
	assert_int_equal(lookup_err(st, root, "f"), -ENOENT);
	assert_int_equal(lookup_err(st, f, "x"), -ENOTDIR);

	/* A file is no directory to create in. */
	x = NULL;
	assert_int_equal(kv_store_mkdir(st, f, "x", 0755, &cred, &x, &a), -ENOTDIR);
	assert_int_equal(kv_store_mknod(st, f, "x", 0644, &cred, &x, &a), -ENOTDIR);
	assert_int_equal(kv_store_create_open(st, f, "x", 0644, &cred, &x, &a), -ENOTDIR);
	assert_null(x);

	/* Every kind of node collides with every kind of name. */
	assert_int_equal(kv_store_mkdir(st, root, "d", 0755, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mknod(st, root, "d", 0644, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_create_open(st, root, "d", 0644, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mkdir(st, d, "f", 0755, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mknod(st, d, "f", 0644, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_create_open(st, d, "g", 0644, &cred, &x, &a), -EEXIST);
	assert_null(x);

	/* Failed calls leave no trace. */
	u = usage(st);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_dirs, 2);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_inodes, 4);
	assert_int_equal(getattr(st, root).ka_nlink, 3);
	assert_int_equal(getattr(st, d).ka_nlink, 2);

	kv_store_forget(st, d, 1);
	kv_store_forget(st, f, 1);
	kv_store_forget(st, g, 1);
	kv_store_destroy(st);
}

static void test_name_rules(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *long_dir, *sub, *k1, *k2, *f, *x = NULL;
	char n255[KV_NAME_MAX + 1], n256[KV_NAME_MAX + 2];
	struct kv_store_usage u;
	struct kv_attr a;

	(void)state;
	memset(n255, 'a', KV_NAME_MAX);
	n255[KV_NAME_MAX] = '\0';
	memset(n256, 'b', KV_NAME_MAX + 1);
	n256[KV_NAME_MAX + 1] = '\0';
	assert_int_equal(strlen(n255), 255);
	assert_int_equal(strlen(n256), 256);

	long_dir = mkdir_ok(st, root, n255);
	check_name_is(st, root, n255, long_dir);
	f = mknod_ok(st, long_dir, n255);
	check_name_is(st, long_dir, n255, f);

	assert_int_equal(kv_store_mkdir(st, root, n256, 0755, &cred, &x, &a), -ENAMETOOLONG);
	assert_int_equal(kv_store_mknod(st, root, n256, 0644, &cred, &x, &a), -ENAMETOOLONG);
	assert_int_equal(kv_store_create_open(st, root, n256, 0644, &cred, &x, &a), -ENAMETOOLONG);
	assert_null(x);
	assert_int_equal(lookup_err(st, root, n256), -ENAMETOOLONG);
	assert_int_equal(kv_store_unlink(st, root, n256), -ENAMETOOLONG);
	assert_int_equal(kv_store_rmdir(st, root, n256), -ENAMETOOLONG);
	assert_int_equal(kv_store_rename(st, long_dir, n255, long_dir, n256, 0), -ENAMETOOLONG);
	assert_int_equal(kv_store_rename(st, root, n256, root, "x", 0), -ENAMETOOLONG);
	check_name_is(st, long_dir, n255, f);

	/* The control directory's name is reserved at the root only. */
	assert_int_equal(kv_store_mkdir(st, root, KV_RESERVED_NAME, 0755, &cred, &x, &a), -EPERM);
	assert_int_equal(kv_store_mknod(st, root, KV_RESERVED_NAME, 0644, &cred, &x, &a), -EPERM);
	assert_int_equal(kv_store_create_open(st, root, KV_RESERVED_NAME, 0644, &cred, &x, &a),
			 -EPERM);
	assert_null(x);
	assert_int_equal(lookup_err(st, root, KV_RESERVED_NAME), -ENOENT);
	assert_int_equal(kv_store_unlink(st, root, KV_RESERVED_NAME), -EPERM);
	assert_int_equal(kv_store_rmdir(st, root, KV_RESERVED_NAME), -EPERM);
	assert_int_equal(kv_store_rename(st, long_dir, n255, root, KV_RESERVED_NAME, 0), -EPERM);
	check_name_is(st, long_dir, n255, f);

	sub = mkdir_ok(st, root, "sub");
	k1 = mkdir_ok(st, sub, KV_RESERVED_NAME);
	check_name_is(st, sub, KV_RESERVED_NAME, k1);
	k2 = mknod_ok(st, long_dir, KV_RESERVED_NAME);
	check_name_is(st, long_dir, KV_RESERVED_NAME, k2);
	assert_int_equal(kv_store_rename(st, long_dir, KV_RESERVED_NAME, long_dir, "plain", 0), 0);
	assert_int_equal(kv_store_rename(st, long_dir, "plain", root, KV_RESERVED_NAME, 0), -EPERM);
	check_name_is(st, long_dir, "plain", k2);

	u = usage(st);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_dirs, 4);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_inodes, 6);

	kv_store_forget(st, long_dir, 1);
	kv_store_forget(st, sub, 1);
	kv_store_forget(st, k1, 1);
	kv_store_forget(st, k2, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

static void test_unlink_rmdir(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *f, *sub, *x = NULL;
	struct kv_store_usage u;
	struct kv_attr a;

	(void)state;
	d = mkdir_ok(st, root, "d");
	f = make_file(st, d, "f", 5000, 1);
	sub = mkdir_ok(st, d, "sub");

	assert_int_equal(kv_store_unlink(st, d, "sub"), -EISDIR);
	assert_int_equal(kv_store_rmdir(st, d, "f"), -ENOTDIR);
	assert_int_equal(kv_store_rmdir(st, root, "d"), -ENOTEMPTY);
	assert_int_equal(kv_store_unlink(st, root, "nope"), -ENOENT);
	assert_int_equal(kv_store_rmdir(st, root, "nope"), -ENOENT);
	check_name_is(st, d, "f", f);
	check_name_is(st, d, "sub", sub);
	check_name_is(st, root, "d", d);

	assert_int_equal(kv_store_unlink(st, d, "f"), 0);
	assert_int_equal(lookup_err(st, d, "f"), -ENOENT);
	assert_int_equal(kv_store_unlink(st, d, "f"), -ENOENT);
	a = getattr(st, f);
	assert_int_equal(a.ka_nlink, 0);
	check_value(st, f, 5000, 1);
	assert_int_equal(kv_store_rmdir(st, root, "d"), -ENOTEMPTY);

	assert_int_equal(kv_store_rmdir(st, d, "sub"), 0);
	assert_int_equal(getattr(st, sub).ka_nlink, 0);
	assert_int_equal(getattr(st, d).ka_nlink, 2);
	assert_int_equal(getattr(st, root).ka_nlink, 3);
	assert_int_equal(kv_store_rmdir(st, root, "d"), 0);
	assert_int_equal(getattr(st, root).ka_nlink, 2);
	assert_int_equal(lookup_err(st, root, "d"), -ENOENT);

	/* Nothing new can be made in a removed directory. */
	assert_int_equal(kv_store_mkdir(st, d, "late", 0755, &cred, &x, &a), -ENOENT);
	assert_int_equal(kv_store_mknod(st, d, "late", 0644, &cred, &x, &a), -ENOENT);
	assert_int_equal(kv_store_create_open(st, d, "late", 0644, &cred, &x, &a), -ENOENT);
	assert_null(x);

	u = usage(st);
	assert_int_equal(u.ku_keys, 0);
	assert_int_equal(u.ku_dirs, 1);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_inodes, 4); /* still referenced */
	kv_store_forget(st, f, 1);
	kv_store_forget(st, sub, 1);
	kv_store_forget(st, d, 1);
	u = usage(st);
	assert_int_equal(u.ku_inodes, 1);
	assert_int_equal(u.ku_bytes, 0);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

static void test_dir_nlink(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *a, *b, *ax, *ay, *bz, *f;

	(void)state;
	assert_int_equal(getattr(st, root).ka_nlink, 2);
	a = mkdir_ok(st, root, "a");
	b = mkdir_ok(st, root, "b");
	assert_int_equal(getattr(st, root).ka_nlink, 4);
	ax = mkdir_ok(st, a, "x");
	ay = mkdir_ok(st, a, "y");
	f = mknod_ok(st, a, "f");
	assert_int_equal(getattr(st, a).ka_nlink, 4);
	assert_int_equal(getattr(st, b).ka_nlink, 2);
	assert_int_equal(getattr(st, f).ka_nlink, 1);

	/* A subdirectory moving moves a link. Files never count. */
	assert_int_equal(kv_store_rename(st, a, "x", b, "x", 0), 0);
	assert_int_equal(getattr(st, a).ka_nlink, 3);
	assert_int_equal(getattr(st, b).ka_nlink, 3);
	assert_int_equal(kv_store_rename(st, a, "f", b, "f", 0), 0);
	assert_int_equal(getattr(st, a).ka_nlink, 3);
	assert_int_equal(getattr(st, b).ka_nlink, 3);

	/* A directory replacing an empty one in the same parent: one link fewer. */
	bz = mkdir_ok(st, b, "z");
	assert_int_equal(getattr(st, b).ka_nlink, 4);
	assert_int_equal(kv_store_rename(st, b, "x", b, "z", 0), 0);
	assert_int_equal(getattr(st, b).ka_nlink, 3);
	assert_int_equal(getattr(st, bz).ka_nlink, 0);
	check_name_is(st, b, "z", ax);

	assert_int_equal(kv_store_rmdir(st, a, "y"), 0);
	assert_int_equal(getattr(st, a).ka_nlink, 2);
	assert_int_equal(getattr(st, ax).ka_nlink, 2);
	assert_int_equal(getattr(st, root).ka_nlink, 4);

	kv_store_forget(st, a, 1);
	kv_store_forget(st, b, 1);
	kv_store_forget(st, ax, 1);
	kv_store_forget(st, ay, 1);
	kv_store_forget(st, bz, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

struct want_ent {
	char name[16];
	mode_t type;
	uint64_t ino;
	bool present;
	bool seen;
};

/* The snapshot lists exactly the present entries, each once, with its ino and type. */
static void check_snap(const struct kv_dir_snap *snap, struct want_ent *w, size_t n)
{
	uint32_t present = 0;

	for (size_t j = 0; j < n; j++) {
		w[j].seen = false;
		present += w[j].present;
	}
	assert_int_equal(snap->kds_count, present);
	for (uint32_t i = 0; i < snap->kds_count; i++) {
		const struct kv_dirent *e = &snap->kds_ent[i];
		size_t j;

		for (j = 0; j < n; j++)
			if (strcmp(w[j].name, e->kde_name) == 0)
				break;
		if (j == n)
			fail_msg("unexpected entry '%s'", e->kde_name);
		assert_true(w[j].present);
		assert_false(w[j].seen);
		w[j].seen = true;
		assert_int_equal(e->kde_ino, w[j].ino);
		assert_int_equal(e->kde_type, w[j].type);
	}
}

static void test_readdir(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *e, *f;
	struct want_ent w[66];
	struct kv_dir_snap snap, old;

	(void)state;
	d = mkdir_ok(st, root, "d");
	for (size_t i = 0; i < 66; i++) {
		struct kv_inode *ino;

		if (i < 60) {
			snprintf(w[i].name, sizeof(w[i].name), "f%02zu", i);
			ino = mknod_ok(st, d, w[i].name);
			w[i].type = S_IFREG;
		} else {
			snprintf(w[i].name, sizeof(w[i].name), "s%zu", i);
			ino = mkdir_ok(st, d, w[i].name);
			w[i].type = S_IFDIR;
		}
		w[i].ino = kv_inode_ino(ino);
		w[i].present = true;
		kv_store_forget(st, ino, 1);
	}
	assert_int_equal(kv_store_readdir(st, d, &snap), 0);
	check_snap(&snap, w, 66);
	kv_dir_snap_free(&snap);
	assert_int_equal(snap.kds_count, 0);
	assert_null(snap.kds_ent);

	/* Remove a third; the snapshot taken before is unaffected. */
	assert_int_equal(kv_store_readdir(st, d, &old), 0);
	for (size_t i = 0; i < 66; i += 3) {
		if (w[i].type == S_IFDIR)
			assert_int_equal(kv_store_rmdir(st, d, w[i].name), 0);
		else
			assert_int_equal(kv_store_unlink(st, d, w[i].name), 0);
		w[i].present = false;
	}
	assert_int_equal(kv_store_rename(st, d, "f01", d, "renamed", 0), 0);
	strcpy(w[1].name, "renamed");
	assert_int_equal(kv_store_readdir(st, d, &snap), 0);
	check_snap(&snap, w, 66);
	kv_dir_snap_free(&snap);
	assert_int_equal(old.kds_count, 66);
	for (uint32_t i = 0; i < old.kds_count; i++)
		assert_true(old.kds_ent[i].kde_name[0] == 'f' || old.kds_ent[i].kde_name[0] == 's');
	kv_dir_snap_free(&old);

	/* Empty directories, the root, and a file. */
	e = mkdir_ok(st, root, "empty");
	assert_int_equal(kv_store_readdir(st, e, &snap), 0);
	assert_int_equal(snap.kds_count, 0);
	kv_dir_snap_free(&snap);
	assert_int_equal(kv_store_readdir(st, root, &snap), 0);
	assert_int_equal(snap.kds_count, 2);
	kv_dir_snap_free(&snap);
	f = lookup_ok(st, d, "f02");
	assert_int_equal(kv_store_readdir(st, f, &snap), -ENOTDIR);
	assert_int_equal(snap.kds_count, 0);
	kv_dir_snap_free(&snap);

	kv_store_forget(st, f, 1);
	kv_store_forget(st, e, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

/* ---- rename ---- */

static void test_rename_move(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *a, *b, *f;
	struct kv_dir_snap snap;

	(void)state;
	a = mkdir_ok(st, root, "a");
	b = mkdir_ok(st, root, "b");
	f = make_file(st, a, "f", 5000, 1);

	assert_int_equal(kv_store_rename(st, a, "f", a, "g", 0), 0);
	assert_int_equal(lookup_err(st, a, "f"), -ENOENT);
	check_name_is(st, a, "g", f);
	check_value(st, f, 5000, 1);

	assert_int_equal(kv_store_rename(st, a, "g", b, "h", 0), 0);
	assert_int_equal(lookup_err(st, a, "g"), -ENOENT);
	check_name_is(st, b, "h", f);
	assert_int_equal(kv_store_readdir(st, a, &snap), 0);
	assert_int_equal(snap.kds_count, 0);
	kv_dir_snap_free(&snap);
	assert_int_equal(kv_store_readdir(st, b, &snap), 0);
	assert_int_equal(snap.kds_count, 1);
	assert_string_equal(snap.kds_ent[0].kde_name, "h");
	kv_dir_snap_free(&snap);

	/* Onto itself: nothing happens. */
	assert_int_equal(kv_store_rename(st, b, "h", b, "h", 0), 0);
	check_name_is(st, b, "h", f);

	assert_int_equal(kv_store_rename(st, b, "nope", b, "x", 0), -ENOENT);
	assert_int_equal(kv_store_rename(st, b, "nope", b, "x", RENAME_NOREPLACE), -ENOENT);
	assert_int_equal(kv_store_rename(st, b, "h", b, "x", 1u << 2 /* RENAME_WHITEOUT */),
			 -EINVAL);
	check_name_is(st, b, "h", f);
	assert_int_equal(lookup_err(st, b, "x"), -ENOENT);

	assert_int_equal(usage(st).ku_keys, 1);
	assert_int_equal(usage(st).ku_dirs, 3);
	check_value(st, f, 5000, 1);
	kv_store_forget(st, a, 1);
	kv_store_forget(st, b, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

static void test_rename_replace_frees_victim(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *src, *victim, *v2;
	uint64_t before;

	(void)state;
	d = mkdir_ok(st, root, "d");
	src = make_file(st, d, "src", 100000, 1);
	victim = make_file(st, d, "victim", 3 * MIB, 2);
	assert_int_equal(getattr(st, victim).ka_alloc, 3 * MIB);
	before = used(st);
	assert_int_equal(before, PAGE_UP(100000) + 3 * MIB);

	assert_int_equal(kv_store_rename(st, d, "src", d, "victim", 0), 0);
	assert_int_equal(lookup_err(st, d, "src"), -ENOENT);
	check_name_is(st, d, "victim", src);
	check_value(st, src, 100000, 1);
	assert_int_equal(usage(st).ku_keys, 1);

	/* Our lookup still holds the victim: readable, no name, memory kept. */
	assert_int_equal(getattr(st, victim).ka_nlink, 0);
	check_value(st, victim, 3 * MIB, 2);
	assert_int_equal(used(st), before);
	assert_int_equal(usage(st).ku_inodes, 4);
	kv_store_forget(st, victim, 1);
	assert_int_equal(used(st), before - 3 * MIB);
	assert_int_equal(usage(st).ku_inodes, 3);
	assert_int_equal(usage(st).ku_bytes, 100000);

	/* A victim held only by an open handle goes at its release. */
	v2 = make_file(st, d, "v2", MIB, 3);
	open_ok(st, v2, O_RDONLY);
	kv_store_forget(st, v2, 1);
	before = used(st);
	assert_int_equal(kv_store_rename(st, d, "victim", d, "v2", 0), 0);
	check_name_is(st, d, "v2", src);
	assert_int_equal(used(st), before);
	check_value(st, v2, MIB, 3);
	kv_store_release(st, v2, O_RDONLY);
	assert_int_equal(used(st), before - MIB);
	assert_int_equal(usage(st).ku_inodes, 3);

	kv_store_forget(st, src, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

static void test_rename_noreplace_exchange(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *fa, *fb, *d1, *d2, *x, *y, *z, *p, *q, *r;

	(void)state;
	d = mkdir_ok(st, root, "d");
	fa = make_file(st, d, "a", 1000, 1);
	fb = make_file(st, d, "b", 2000, 2);

	assert_int_equal(kv_store_rename(st, d, "a", d, "b", RENAME_NOREPLACE), -EEXIST);
	check_name_is(st, d, "a", fa);
	check_name_is(st, d, "b", fb);
	assert_int_equal(kv_store_rename(st, d, "a", d, "c", RENAME_NOREPLACE), 0);
	check_name_is(st, d, "c", fa);
	assert_int_equal(lookup_err(st, d, "a"), -ENOENT);

	/* Exchange two files: the names swap, the values go with the inodes. */
	assert_int_equal(kv_store_rename(st, d, "c", d, "b", RENAME_EXCHANGE), 0);
	check_name_is(st, d, "c", fb);
	check_name_is(st, d, "b", fa);
	check_value(st, fa, 1000, 1);
	check_value(st, fb, 2000, 2);
	assert_int_equal(usage(st).ku_keys, 2);
	assert_int_equal(kv_store_rename(st, d, "c", d, "zz", RENAME_EXCHANGE), -ENOENT);
	assert_int_equal(kv_store_rename(st, d, "zz", d, "c", RENAME_EXCHANGE), -ENOENT);
	check_name_is(st, d, "c", fb);

	/* Exchange a file and a directory across directories: links follow the directory. */
	d1 = mkdir_ok(st, root, "d1");
	d2 = mkdir_ok(st, root, "d2");
	x = make_file(st, d1, "x", 10, 3);
	y = mkdir_ok(st, d2, "y");
	z = make_file(st, y, "z", 20, 4);
	assert_int_equal(getattr(st, d1).ka_nlink, 2);
	assert_int_equal(getattr(st, d2).ka_nlink, 3);
	assert_int_equal(kv_store_rename(st, d1, "x", d2, "y", RENAME_EXCHANGE), 0);
	check_name_is(st, d1, "x", y);
	check_name_is(st, d2, "y", x);
	check_name_is(st, y, "z", z);
	assert_int_equal(getattr(st, d1).ka_nlink, 3);
	assert_int_equal(getattr(st, d2).ka_nlink, 2);
	assert_int_equal(getattr(st, root).ka_nlink, 5);

	/* Exchange that would put a directory inside itself. */
	p = mkdir_ok(st, root, "p");
	q = mkdir_ok(st, p, "q");
	r = make_file(st, q, "r", 0, 0);
	assert_int_equal(kv_store_rename(st, root, "p", q, "r", RENAME_EXCHANGE), -EINVAL);
	assert_int_equal(kv_store_rename(st, q, "r", root, "p", RENAME_EXCHANGE), -EINVAL);
	check_name_is(st, root, "p", p);
	check_name_is(st, p, "q", q);
	check_name_is(st, q, "r", r);

	kv_store_forget(st, d, 1);
	kv_store_forget(st, fa, 1);
	kv_store_forget(st, fb, 1);
	kv_store_forget(st, d1, 1);
	kv_store_forget(st, d2, 1);
	kv_store_forget(st, x, 1);
	kv_store_forget(st, y, 1);
	kv_store_forget(st, z, 1);
	kv_store_forget(st, p, 1);
	kv_store_forget(st, q, 1);
	kv_store_forget(st, r, 1);
	kv_store_destroy(st);
}

static void test_rename_errors(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *a, *ab, *abc, *ne, *nef, *em, *f;
	struct kv_store_usage u;

	(void)state;
	a = mkdir_ok(st, root, "a");
	ab = mkdir_ok(st, a, "b");
	abc = mkdir_ok(st, ab, "c");
	ne = mkdir_ok(st, root, "ne");
	nef = mknod_ok(st, ne, "file");
	em = mkdir_ok(st, root, "em");
	f = make_file(st, root, "f", 10, 1);

	/* A directory into its own subtree. */
	assert_int_equal(kv_store_rename(st, root, "a", abc, "x", 0), -EINVAL);
	assert_int_equal(kv_store_rename(st, root, "a", a, "x", 0), -EINVAL);
	assert_int_equal(kv_store_rename(st, root, "a", ab, "a", 0), -EINVAL);
	assert_int_equal(kv_store_rename(st, root, "a", abc, "x", RENAME_NOREPLACE), -EINVAL);

	/* Type and emptiness of the target. */
	assert_int_equal(kv_store_rename(st, root, "em", root, "ne", 0), -ENOTEMPTY);
	assert_int_equal(kv_store_rename(st, root, "f", root, "em", 0), -EISDIR);
	assert_int_equal(kv_store_rename(st, root, "em", root, "f", 0), -ENOTDIR);
	assert_int_equal(kv_store_rename(st, ne, "file", root, "a", 0), -EISDIR);
	assert_int_equal(kv_store_rename(st, root, "a", ne, "file", 0), -ENOTDIR);

	check_name_is(st, root, "a", a);
	check_name_is(st, a, "b", ab);
	check_name_is(st, ab, "c", abc);
	check_name_is(st, root, "ne", ne);
	check_name_is(st, ne, "file", nef);
	check_name_is(st, root, "em", em);
	check_name_is(st, root, "f", f);
	u = usage(st);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_dirs, 6);
	assert_int_equal(getattr(st, root).ka_nlink, 5);

	/* A directory over an empty one replaces it, subtree and all. */
	assert_int_equal(kv_store_rename(st, root, "a", root, "em", 0), 0);
	check_name_is(st, root, "em", a);
	check_name_is(st, a, "b", ab);
	check_name_is(st, ab, "c", abc);
	assert_int_equal(lookup_err(st, root, "a"), -ENOENT);
	assert_int_equal(getattr(st, em).ka_nlink, 0);
	assert_int_equal(getattr(st, root).ka_nlink, 4);
	assert_int_equal(usage(st).ku_dirs, 5);
	assert_int_equal(usage(st).ku_inodes, 8);
	kv_store_forget(st, em, 1);
	assert_int_equal(usage(st).ku_inodes, 7);

	kv_store_forget(st, a, 1);
	kv_store_forget(st, ab, 1);
	kv_store_forget(st, abc, 1);
	kv_store_forget(st, ne, 1);
	kv_store_forget(st, nef, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

/*
 * Symlinks, FIFOs and sockets: metadata-only nodes with their type, mode,
 * size (a symlink's target length) and no value: no pool memory, no key,
 * no open/read/write/truncate; readdir types, renames (over each other,
 * exchange), unlink, and their own counters.
 */
static void test_nodes(void **state)
{
	struct kv_store *st = store_new(16 * MIB);
	struct kv_inode *root = kv_store_root(st), *l, *p, *s, *d, *x;
	char target[KV_SYMLINK_MAX + 2];
	struct iovec iov[4];
	struct kv_read_guard g;
	struct kv_dir_snap snap;
	struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = 10};
	struct kv_attr a;
	const char *t;
	uint64_t bytes;

	(void)state;
	assert_int_equal(kv_store_symlink(st, root, "l", "some/where", &cred, &l, &a), 0);
	assert_int_equal(a.ka_mode, S_IFLNK | 0777);
	assert_int_equal(a.ka_size, 10);
	assert_int_equal(a.ka_alloc, 0);
	assert_int_equal(a.ka_nlink, 1);
	assert_int_equal(a.ka_tier, KV_TIER_NONE);
	assert_int_equal(kv_inode_type(l), S_IFLNK);
	assert_int_equal(kv_store_readlink(st, l, &t), 0);
	assert_string_equal(t, "some/where");
	assert_int_equal(kv_store_mknod(st, root, "p", S_IFIFO | 0640, &cred, &p, &a), 0);
	assert_int_equal(a.ka_mode, S_IFIFO | 0640);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(kv_store_mknod(st, root, "s", S_IFSOCK | 0600, &cred, &s, &a), 0);
	assert_int_equal(a.ka_mode, S_IFSOCK | 0600);
	assert_int_equal(kv_store_readlink(st, p, &t), -EINVAL);
	assert_int_equal(kv_store_readlink(st, root, &t), -EINVAL);
	assert_int_equal(used(st), 0);
	assert_int_equal(usage(st).ku_keys, 0);
	assert_int_equal(usage(st).ku_symlinks, 1);
	assert_int_equal(usage(st).ku_specials, 2);
	assert_int_equal(usage(st).ku_bytes, 0);

	/* No value to open, read, write, truncate or fallocate. */
	assert_int_equal(kv_store_open(st, l, O_RDONLY), -EINVAL);
	assert_int_equal(kv_store_open(st, p, O_WRONLY | O_TRUNC), -EINVAL);
	assert_int_equal(kv_store_read(st, s, 0, 10, iov, 4, &bytes, &g), -EINVAL);
	assert_int_equal(kv_store_write(st, p, 0, "x", 1), -EINVAL);
	assert_int_equal(kv_store_fallocate(st, l, 0, 0, 4096), -EINVAL);
	assert_int_equal(kv_store_setattr(st, p, &sa, &a), -EINVAL);
	/* Mode changes keep the type. */
	sa.ksa_valid = KV_SET_MODE;
	sa.ksa_mode = S_IFREG | 0604;
	assert_int_equal(kv_store_setattr(st, p, &sa, &a), 0);
	assert_int_equal(a.ka_mode, S_IFIFO | 0604);

	/* Errors: bad targets, taken names, the reserved name, devices. */
	assert_int_equal(kv_store_symlink(st, root, "e", "", &cred, &x, &a), -ENOENT);
	memset(target, 't', sizeof(target));
	target[KV_SYMLINK_MAX + 1] = '\0';
	assert_int_equal(kv_store_symlink(st, root, "e", target, &cred, &x, &a), -ENAMETOOLONG);
	target[KV_SYMLINK_MAX] = '\0';
	assert_int_equal(kv_store_symlink(st, root, "e", target, &cred, &x, &a), 0);
	assert_int_equal(a.ka_size, KV_SYMLINK_MAX);
	kv_store_forget(st, x, 1);
	assert_int_equal(kv_store_symlink(st, root, "l", "x", &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mknod(st, root, "l", S_IFIFO | 0600, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_symlink(st, root, KV_RESERVED_NAME, "x", &cred, &x, &a), -EPERM);
	assert_int_equal(kv_store_symlink(st, p, "x", "x", &cred, &x, &a), -ENOTDIR);
	assert_int_equal(kv_store_mknod(st, root, "c", S_IFCHR | 0600, &cred, &x, &a), -EPERM);
	assert_int_equal(lookup_err(st, root, "c"), -ENOENT);

	/* readdir types */
	assert_int_equal(kv_store_readdir(st, root, &snap), 0);
	assert_int_equal(snap.kds_count, 4);
	for (uint32_t i = 0; i < snap.kds_count; i++) {
		const char *n = snap.kds_ent[i].kde_name;
		mode_t want = !strcmp(n, "p") ? S_IFIFO : !strcmp(n, "s") ? S_IFSOCK : S_IFLNK;

		assert_int_equal(snap.kds_ent[i].kde_type, want);
	}
	kv_dir_snap_free(&snap);

	/* Renames: over a node, exchange with a directory, node over a directory. */
	assert_int_equal(kv_store_mkdir(st, root, "d", 0755, &cred, &d, &a), 0);
	assert_int_equal(kv_store_rename(st, root, "l", root, "p", RENAME_NOREPLACE), -EEXIST);
	assert_int_equal(kv_store_rename(st, root, "l", d, "l", 0), 0);
	check_name_is(st, d, "l", l);
	assert_int_equal(kv_store_rename(st, root, "p", root, "d", 0), -EISDIR);
	assert_int_equal(kv_store_rename(st, root, "d", root, "p", 0), -ENOTDIR);
	assert_int_equal(kv_store_rename(st, root, "d", root, "p", RENAME_EXCHANGE), 0);
	check_name_is(st, root, "d", p);
	check_name_is(st, root, "p", d);
	assert_int_equal(kv_store_rename(st, root, "s", root, "d", 0), 0);
	check_name_is(st, root, "d", s);
	assert_int_equal(getattr(st, p).ka_nlink, 0); /* replaced: no name left */
	assert_int_equal(usage(st).ku_specials, 1);
	assert_int_equal(kv_store_unlink(st, d, "l"), 0);
	assert_int_equal(kv_store_unlink(st, root, "e"), 0);
	assert_int_equal(kv_store_unlink(st, root, "d"), 0);
	assert_int_equal(kv_store_rmdir(st, root, "p"), 0);
	assert_int_equal(usage(st).ku_symlinks, 0);
	assert_int_equal(usage(st).ku_specials, 0);
	assert_int_equal(usage(st).ku_dirs, 1);
	/* Unnamed, the kernel's references keep them readable until forgotten. */
	assert_int_equal(kv_store_readlink(st, l, &t), 0);
	assert_string_equal(t, "some/where");
	kv_store_forget(st, l, 1);
	kv_store_forget(st, p, 1);
	kv_store_forget(st, s, 1);
	kv_store_forget(st, d, 1);
	assert_int_equal(usage(st).ku_inodes, 1);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_lookup),
	    cmocka_unit_test(test_name_rules),
	    cmocka_unit_test(test_unlink_rmdir),
	    cmocka_unit_test(test_dir_nlink),
	    cmocka_unit_test(test_readdir),
	    cmocka_unit_test(test_rename_move),
	    cmocka_unit_test(test_rename_replace_frees_victim),
	    cmocka_unit_test(test_rename_noreplace_exchange),
	    cmocka_unit_test(test_rename_errors),
	    cmocka_unit_test(test_nodes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
