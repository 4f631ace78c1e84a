/* SPDX-License-Identifier: MIT */
/* core/perm.c — permission decisions from attributes (see core/perm.h). */
#include "core/perm.h"

#include <errno.h>
#include <unistd.h>

bool kv_in_group(const struct kv_cred *c, gid_t gid)
{
	return c->kc_gid == gid || (c->kc_in_group && c->kc_in_group(c->kc_arg, gid));
}

int kv_may(const struct kv_cred *c, const struct kv_attr *a, int mask)
{
	unsigned bits;

	if (c->kc_uid == 0)
		return !(mask & X_OK) || S_ISDIR(a->ka_mode) || (a->ka_mode & 0111) ? 0 : -EACCES;
	if (c->kc_uid == a->ka_uid)
		bits = (a->ka_mode >> 6) & 7;
	else if ((((a->ka_mode >> 3) ^ a->ka_mode) & (unsigned)mask & 7) &&
		 kv_in_group(c, a->ka_gid))
		bits = (a->ka_mode >> 3) & 7;
	else
		bits = a->ka_mode & 7;
	return ((unsigned)mask & ~bits & 7) ? -EACCES : 0;
}

bool kv_sticky_for(const struct kv_cred *c, const struct kv_attr *d)
{
	return (d->ka_mode & S_ISVTX) && c->kc_uid != 0 && c->kc_uid != d->ka_uid;
}

int kv_may_take(const struct kv_cred *c, const struct kv_attr *d, const struct kv_attr *v)
{
	return kv_sticky_for(c, d) && c->kc_uid != v->ka_uid ? -EPERM : 0;
}
