/* SPDX-License-Identifier: MIT */
/*
 * rados/rados.c — the RADOS object layer on librados (see rados/rados.h).
 * Compiled only with librados (KVFS_HAVE_RADOS).
 */
#include "rados/rados.h"

#include <rados/librados.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_rados {
	rados_t kr_cluster;  /* connected */
	rados_ioctx_t kr_io; /* on the pool, in the namespace */
};

/* The client settings that bound every wait; values in seconds. */
static const char *const timeout_opts[] = {"rados_osd_op_timeout", "rados_mon_op_timeout",
					   "client_mount_timeout"};

int kv_rados_open(const struct kv_rados_params *p, struct kv_rados **out, const char **step)
{
	struct kv_rados *r = calloc(1, sizeof(*r));
	char secs[24];
	int err;

	*step = "create";
	if (!r)
		return -ENOMEM;
	err = rados_create(&r->kr_cluster, p->rp_id);
	if (err < 0)
		goto out_free;
	*step = "conf";
	err = rados_conf_read_file(r->kr_cluster, p->rp_conf);
	if (err < 0)
		goto out_shutdown;
	*step = "timeouts";
	snprintf(secs, sizeof(secs), "%u", p->rp_timeout_s);
	for (size_t i = 0; i < sizeof(timeout_opts) / sizeof(timeout_opts[0]); i++) {
		err = rados_conf_set(r->kr_cluster, timeout_opts[i], secs);
		if (err < 0)
			goto out_shutdown;
	}
	*step = "connect";
	err = rados_connect(r->kr_cluster);
	if (err < 0)
		goto out_shutdown;
	*step = "pool";
	err = rados_ioctx_create(r->kr_cluster, p->rp_pool, &r->kr_io);
	if (err < 0)
		goto out_shutdown;
	rados_ioctx_set_namespace(r->kr_io, p->rp_namespace);
	*out = r;
	return 0;

out_shutdown:
	rados_shutdown(r->kr_cluster);
out_free:
	free(r);
	return err;
}

void kv_rados_close(struct kv_rados *r)
{
	if (!r)
		return;
	rados_ioctx_destroy(r->kr_io);
	rados_shutdown(r->kr_cluster);
	free(r);
}

int kv_rados_omap_get(struct kv_rados *r, const char *oid, const char *key, void **val, size_t *len)
{
	rados_read_op_t op = rados_create_read_op();
	rados_omap_iter_t it = NULL;
	const char *keys[1] = {key};
	size_t klens[1] = {strlen(key)};
	int prval = 0, err;

	if (!op)
		return -ENOMEM;
	rados_read_op_omap_get_vals_by_keys2(op, keys, 1, klens, &it, &prval);
	err = rados_read_op_operate(op, r->kr_io, oid, 0);
	if (!err)
		err = prval;
	if (!err) {
		char *k = NULL, *v = NULL;
		size_t kl = 0, vl = 0;

		err = rados_omap_get_next2(it, &k, &v, &kl, &vl);
		if (!err && !k)
			err = -ENOENT; /* no such key */
		else if (!err) {
			*val = malloc(vl ? vl : 1);
			if (!*val)
				err = -ENOMEM;
			else {
				memcpy(*val, v, vl);
				*len = vl;
			}
		}
	}
	if (it)
		rados_omap_get_end(it);
	rados_release_read_op(op);
	return err;
}

int kv_rados_omap_each(struct kv_rados *r, const char *oid, kv_rados_omap_fn fn, void *arg)
{
	char *after = NULL;
	unsigned char more = 1;
	int err = 0;

	while (!err && more) {
		rados_read_op_t op = rados_create_read_op();
		rados_omap_iter_t it = NULL;
		const unsigned page = 512;
		int prval = 0;

		if (!op) {
			err = -ENOMEM;
			break;
		}
		more = 0;
		rados_read_op_omap_get_vals2(op, after ? after : "", NULL, page, &it, &more,
					     &prval);
		err = rados_read_op_operate(op, r->kr_io, oid, 0);
		if (!err)
			err = prval;
		if (err == -ENOENT)
			err = 0, more = 0; /* no object: no entries */
		while (!err && it) {
			char *k = NULL, *v = NULL;
			size_t kl = 0, vl = 0;

			err = rados_omap_get_next2(it, &k, &v, &kl, &vl);
			if (err || !k)
				break;
			free(after);
			after = strndup(k, kl);
			if (!after)
				err = -ENOMEM;
			else
				err = fn(arg, k, kl, v, vl);
		}
		if (it)
			rados_omap_get_end(it);
		rados_release_read_op(op);
	}
	free(after);
	return err;
}

int kv_rados_omap_cas(struct kv_rados *r, const char *oid, const char *key, const void *expect,
		      size_t elen, const void *val, size_t vlen, const char *path)
{
	rados_write_op_t op = rados_create_write_op();
	const char *keys[1] = {key};
	const char *vals[1] = {val};
	size_t klens[1] = {strlen(key)}, vlens[1] = {vlen};
	int prval = 0, err;

	if (!op)
		return -ENOMEM;
	if (val)
		rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, NULL);
	/* A missing key compares equal to the empty value. */
	rados_write_op_omap_cmp(op, key, LIBRADOS_CMPXATTR_OP_EQ, elen ? expect : "", elen, &prval);
	if (val) {
		rados_write_op_omap_set2(op, keys, vals, klens, vlens, 1);
		if (path)
			rados_write_op_setxattr(op, "kvfs.path", path, strlen(path));
	} else
		rados_write_op_omap_rm_keys2(op, keys, klens, 1);
	err = rados_write_op_operate2(op, r->kr_io, oid, NULL, LIBRADOS_OPERATION_FULL_TRY);
	rados_release_write_op(op);
	if (!err && prval)
		err = prval;
	return err;
}

/* Waits for n completions and releases them; a read shorter than want[i] is -EIO. Returns the first
 * error. */
static int wait_all(rados_completion_t *c, unsigned n, const size_t *want)
{
	int first = 0;

	for (unsigned i = 0; i < n; i++) {
		int ret;

		if (!c[i])
			continue;
		rados_aio_wait_for_complete(c[i]);
		ret = rados_aio_get_return_value(c[i]);
		rados_aio_release(c[i]);
		if (ret >= 0 && want && (size_t)ret != want[i])
			ret = -EIO;
		if (ret < 0 && !first)
			first = ret;
	}
	return first;
}

int kv_rados_put_many(struct kv_rados *r, unsigned n, const char *const *oids,
		      const void *const *bufs, const size_t *lens)
{
	rados_completion_t *c = calloc(n, sizeof(*c));
	rados_write_op_t *ops = calloc(n, sizeof(*ops));
	int err = 0, werr;

	if (!c || !ops) {
		free(c);
		free(ops);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n && !err; i++) {
		ops[i] = rados_create_write_op();
		if (!ops[i]) {
			err = -ENOMEM;
			break;
		}
		rados_write_op_write_full(ops[i], bufs[i], lens[i]);
		err = rados_aio_create_completion2(NULL, NULL, &c[i]);
		if (!err)
			err = rados_aio_write_op_operate(ops[i], r->kr_io, c[i], oids[i], NULL,
							 LIBRADOS_OPERATION_FULL_TRY);
		if (err && c[i]) {
			rados_aio_release(c[i]);
			c[i] = NULL;
		}
	}
	werr = wait_all(c, n, NULL);
	for (unsigned i = 0; i < n; i++)
		if (ops[i])
			rados_release_write_op(ops[i]);
	free(c);
	free(ops);
	return err ? err : werr;
}

int kv_rados_get_many(struct kv_rados *r, unsigned n, const char *const *oids, void *const *bufs,
		      const size_t *lens)
{
	rados_completion_t *c = calloc(n, sizeof(*c));
	int err = 0, werr;

	if (!c)
		return -ENOMEM;
	for (unsigned i = 0; i < n && !err; i++) {
		err = rados_aio_create_completion2(NULL, NULL, &c[i]);
		if (!err)
			err = rados_aio_read(r->kr_io, oids[i], c[i], bufs[i], lens[i], 0);
		if (err && c[i]) {
			rados_aio_release(c[i]);
			c[i] = NULL;
		}
	}
	werr = wait_all(c, n, lens);
	free(c);
	return err ? err : werr;
}

int kv_rados_remove(struct kv_rados *r, const char *oid)
{
	rados_write_op_t op = rados_create_write_op();
	int err;

	if (!op)
		return -ENOMEM;
	rados_write_op_remove(op);
	err = rados_write_op_operate2(op, r->kr_io, oid, NULL, LIBRADOS_OPERATION_FULL_TRY);
	rados_release_write_op(op);
	return err;
}

int kv_rados_mtime(struct kv_rados *r, const char *oid, time_t *mtime)
{
	uint64_t size;

	return rados_stat(r->kr_io, oid, &size, mtime);
}

int kv_rados_list(struct kv_rados *r, kv_rados_list_fn fn, void *arg)
{
	rados_list_ctx_t ctx;
	const char *entry;
	int err = rados_nobjects_list_open(r->kr_io, &ctx);

	if (err)
		return err;
	while ((err = rados_nobjects_list_next(ctx, &entry, NULL, NULL)) == 0) {
		err = fn(arg, entry);
		if (err)
			break;
	}
	rados_nobjects_list_close(ctx);
	return err == -ENOENT ? 0 : err;
}
