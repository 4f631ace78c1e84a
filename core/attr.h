/* SPDX-License-Identifier: MIT */
/*
 * core/attr.h — attributes' call for the namespace (core/attr.c; not for
 * use outside core/). getattr and setattr are in core/store.h.
 */
#ifndef KVFS_CORE_ATTR_H
#define KVFS_CORE_ATTR_H

#include "core/store_int.h"

/* Fills a with ino's attributes (takes ino's ki_lock, shared). */
void kv_attr_fill(struct kv_inode *ino, struct kv_attr *a);

#endif
