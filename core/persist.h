/* SPDX-License-Identifier: MIT */
/*
 * core/persist.h — the store's metadata on disk (core/persist.c): what
 * goes in the journal, checkpoints of the whole namespace, recovery at
 * start, and the offline --fsck and --salvage passes.
 *
 * Layer: below the namespace (core/store.c and its parts: core/ns.c,
 * core/attr.c, core/quota.c journal its changes) and the tier (core/tier.c,
 * which journals each put it makes durable and writes checkpoints), above
 * the object model (core/inode.h) and ssd/ (journal.h, bucket.h). It never
 * calls the namespace: recovery and salvage rebuild the tree through the
 * struct kv_persist_ns the namespace passes down, and recovery opens the
 * tier through it too. Locks: see core/store_int.h (ks_ckpt_lock >
 * ks_ns_lock > ki_lock > the journal's own).
 */
#ifndef KVFS_CORE_PERSIST_H
#define KVFS_CORE_PERSIST_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct kv_store;
struct kv_inode;
struct kv_tier;
struct kv_bucket_set;
struct kv_store_usage;

/*
 * What recovery and salvage ask of the namespace (core/ns.c, handed down
 * by core/store.c), which owns the directory tables. Every call but pn_open_tier runs with
 * ks_ns_lock held exclusive and journals nothing.
 */
struct kv_persist_ns {
	/* dir's child `name`, or NULL. */
	struct kv_inode *(*pn_child)(const struct kv_inode *dir, const char *name);
	/*
	 * Makes a node `name` under dir. link is a symlink's target (S_IFLNK),
	 * NULL for other types. A regular file has no value in DRAM (ki_obj
	 * NULL): recovery finds it on the SSD; its times are 0 until its PUT
	 * sets them (a key whose PUT does not is dropped). Returns 0 or -errno.
	 */
	int (*pn_make)(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		       const char *link, struct kv_inode **out);
	/*
	 * dir's child `name` (len bytes, NUL-terminated), made like pn_make
	 * (type `mode`, no link) when there is none. Returns 0 or -errno.
	 */
	int (*pn_child_make)(struct kv_store *st, struct kv_inode *dir, const char *name,
			     size_t len, mode_t mode, struct kv_inode **out);
	/* Takes ino's name (in dir) away, dropping the name's reference. */
	void (*pn_unname)(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino);
	/* Renames odir/oname to ndir/nname (flags: RENAME_NOREPLACE, RENAME_EXCHANGE). */
	int (*pn_rename)(struct kv_store *st, struct kv_inode *odir, const char *oname,
			 struct kv_inode *ndir, const char *nname, unsigned flags);
	/*
	 * Opens the SSD tier on DATA_DIR (core/tier.h, kv_tier_create) and
	 * gives its bucket set; runs on a thread of its own while the
	 * checkpoint loads, with no lock held, and must not touch the tree.
	 * Recovery sets ks_tier and ks_buckets from it once both are done.
	 */
	int (*pn_open_tier)(struct kv_store *st, int datadir_fd, struct kv_tier **tier,
			    struct kv_bucket_set **bs);
};

/* What recovery did, for the statistics (kv_tier_recovered). */
struct kv_persist_recovered {
	uint64_t pr_ns;	  /* how long it took */
	uint64_t pr_keys; /* keys brought back */
	uint64_t pr_lost; /* keys dropped: their records are missing or unreadable */
};

/* Journals a namespace change (ks_ns_lock held). No-op without a journal. */
void kv_persist_mkdir(struct kv_store *st, struct kv_inode *dir);
/* Journals a new symlink, FIFO or socket (ks_ns_lock held). */
void kv_persist_node(struct kv_store *st, struct kv_inode *ino);
void kv_persist_del(struct kv_store *st, const char *path, int len);
void kv_persist_rename(struct kv_store *st, const char *from, int flen, const char *to, int tlen,
		       unsigned flags);
void kv_persist_setattr(struct kv_store *st, struct kv_inode *ino);
/* Journals where ino's value now lives (ks_ns_lock and ki_lock held). */
void kv_persist_put(struct kv_store *st, struct kv_inode *ino);

/*
 * Opens the tier (ns->pn_open_tier: ks_tier, ks_buckets) and loads
 * checkpoint + journal into the (empty) store, rebuilding the tree through
 * ns; fills *rec. On failure ks_tier is set if it was opened.
 */
int kv_persist_recover(struct kv_store *st, int datadir_fd, const struct kv_persist_ns *ns,
		       struct kv_persist_recovered *rec);
/*
 * Writes, in a thread of its own, the checkpoint recovery left due (it
 * replayed more than one journal file): call once the store serves.
 */
void kv_persist_start(struct kv_store *st);
/* Waits for kv_persist_start's checkpoint. Call before stopping the tier. */
void kv_persist_stop(struct kv_store *st);
/* Writes a checkpoint of the whole store and drops the journal before it. */
int kv_persist_checkpoint(struct kv_store *st);

/*
 * --fsck on a store just recovered (with its tier), whose usage u was
 * sampled after recovery: reads and checks every record and every key's
 * value and reports to out. Returns the number of damaged records, damaged
 * keys and keys recovery dropped (0: clean).
 */
uint64_t kv_persist_fsck(struct kv_store *st, const struct kv_store_usage *u, FILE *out);

/*
 * --salvage into st, an empty store without a tier: rebuilds the metadata
 * of DATA_DIR from its bucket records alone (through ns) and replaces its
 * checkpoint and journal. Returns 0 or -errno.
 */
int kv_persist_salvage(struct kv_store *st, const struct kv_persist_ns *ns, int datadir_fd,
		       FILE *out);

#endif
