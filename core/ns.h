/* SPDX-License-Identifier: MIT */
/*
 * core/ns.h — the namespace's calls for the layer above it (core/ns.c;
 * not for use outside core/): what core/store.c hands recovery and salvage
 * (struct kv_persist_ns) and compaction (struct kv_gc_ops), and the hash
 * the root's name is made with. The namespace's API is core/store.h.
 */
#ifndef KVFS_CORE_NS_H
#define KVFS_CORE_NS_H

#include "core/store_int.h"

/* The hash a name is kept under in its directory's table. */
uint64_t kv_ns_name_hash(const char *name, size_t len);

/* Recovery's and salvage's changes to the tree (struct kv_persist_ns): not journaled. */
struct kv_inode *kv_ns_child(const struct kv_inode *dir, const char *name);
int kv_ns_make(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
	       const char *link, struct kv_inode **out);
int kv_ns_child_make(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
		     mode_t mode, struct kv_inode **out);
void kv_ns_unname(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino);
int kv_ns_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		 struct kv_inode *ndir, const char *nname, unsigned flags);

/*
 * Cache mode's delete (kv_gc_ops.go_evict): takes ino's name exactly as unlink
 * would, if it still has one, no fd holds it open and it was not used
 * since `used`; then, its locks dropped, tells the eviction hook.
 */
int kv_ns_evict(struct kv_store *st, struct kv_inode *ino, uint64_t used, uint64_t *bytes);

#endif
