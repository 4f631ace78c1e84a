/* SPDX-License-Identifier: MIT */
/*
 * ssd/rados.c — the RADOS object layer on librados (see ssd/rados.h).
 * Compiled only with librados (KVFS_HAVE_RADOS).
 */
#include "ssd/rados.h"

#include <rados/librados.h>
#include <stdio.h>
#include <stdlib.h>

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
