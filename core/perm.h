/* SPDX-License-Identifier: MIT */
/*
 * core/perm.h — who may do what to a node, decided from its attributes as
 * the kernel's generic_permission() decides it. The daemon's FUSE
 * operations (fs/perm.c) and the batch ioctls (core/batch.c) both ask here.
 */
#ifndef KVFS_CORE_PERM_H
#define KVFS_CORE_PERM_H

#include "core/store.h"

/* Whether gid is c's group or one of its supplementary groups. */
bool kv_in_group(const struct kv_cred *c, gid_t gid);

/*
 * The caller's permission for mask (R_OK | W_OK | X_OK) on a node with
 * attributes a: root may do anything but execute a file without an
 * execute bit; otherwise the owner's, the group's or the others' bits,
 * whichever class the caller is in first. The supplementary groups
 * (c->kc_in_group) are asked only when the group's bits would decide
 * differently from the others'. Returns 0 or -EACCES.
 */
int kv_may(const struct kv_cred *c, const struct kv_attr *a, int mask);

/*
 * The sticky bit: whether c may take the name of node v out of directory d
 * once kv_may allowed it to write d. Returns 0, or -EPERM when d is sticky
 * and c is neither root nor the owner of d or of v.
 */
int kv_may_take(const struct kv_cred *c, const struct kv_attr *d, const struct kv_attr *v);

/* Whether d is sticky against c (kv_may_take then needs the node's owner). */
bool kv_sticky_for(const struct kv_cred *c, const struct kv_attr *d);

#endif
