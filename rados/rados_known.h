/* SPDX-License-Identifier: MIT */
/*
 * rados/rados_known.h — which local values are copies of cluster versions:
 * DATA_DIR/rados.known.
 *
 * A local key whose value was fetched from the cluster, or published to
 * it, is a cache entry of a cluster version (node, seq): when the cluster
 * deletes or replaces that version, the local copy goes too. A key made
 * here and not yet sent is not: it stays until it is sent. The shared tier
 * (rados/shared_known.c) keeps that knowledge here, by the local value's sequence
 * number (which the store keeps across restarts and never reuses), so
 * that it holds after a restart too.
 *
 * Format (little-endian, as ssd/format.h): struct kv_file_head
 * (ssd/fileio.h: KV_RKNOWN_MAGIC, KV_RKNOWN_VERSION), the pool and the
 * namespace (as in rados/rados_log.h: another pool's file is begun
 * anew), then 32-byte records, each setting (rk_node, rk_rseq) for local
 * version rk_seq, or forgetting it (rk_node == KV_RKNOWN_FORGET and
 * rk_rseq == KV_RKNOWN_FORGET), with the XXH3-64 of its first 24 bytes.
 * The last record of a version wins; a torn or corrupt record ends the
 * file. The file is rewritten with only what is known when it holds more
 * than twice that (plus KV_RKNOWN_SLACK records).
 *
 * Thread-safe: one mutex, a leaf, held for a table access and at most one
 * write(2) (or a rewrite).
 */
#ifndef KVFS_RADOS_RADOS_KNOWN_H
#define KVFS_RADOS_RADOS_KNOWN_H

#include <stdbool.h>
#include <stdint.h>

#define KV_RKNOWN_NAME	  "rados.known"
#define KV_RKNOWN_MAGIC	  0x4e574e4b53564b00ull /* "\0KVSKNWN" */
#define KV_RKNOWN_VERSION 1
#define KV_RKNOWN_FORGET  UINT64_MAX
#define KV_RKNOWN_SLACK	  32768

struct kv_rknown_rec {
	uint64_t rk_seq; /* the local version */
	uint64_t rk_node, rk_rseq;
	uint64_t rk_sum; /* XXH3-64 of the 24 bytes above */
} __attribute__((packed));

struct kv_rknown;

/*
 * Opens (or creates) the file of pool and ns in directory dirfd and loads
 * it. Returns 0 and sets *out, or -errno (-EINVAL: a name too long).
 */
int kv_rknown_open(int dirfd, const char *pool, const char *ns, struct kv_rknown **out);

/* True, with the cluster version, when local version seq is a copy of one. */
bool kv_rknown_get(struct kv_rknown *k, uint64_t seq, uint64_t *node, uint64_t *rseq);

/*
 * Records that local version seq is a copy of cluster version (node, rseq)
 * (node 0: of a version the cluster has replaced since). Nothing is
 * written when that is known already. Returns 0 or -errno (-ENOMEM, or a
 * write's: then it is known until the process ends).
 */
int kv_rknown_set(struct kv_rknown *k, uint64_t seq, uint64_t node, uint64_t rseq);

/* Forgets local version seq (when it was known). Returns 0 or -errno. */
int kv_rknown_forget(struct kv_rknown *k, uint64_t seq);

/* How many versions are known, and the highest of them (0: none). */
uint64_t kv_rknown_count(struct kv_rknown *k, uint64_t *max_seq);

/*
 * Forgets every version up to upto for which live(arg, seq) is false (the
 * local store has no key with that value any more), and rewrites the file.
 * live is called with the mutex held: it must not call k. Returns how
 * many were forgotten, or -errno.
 */
int64_t kv_rknown_prune(struct kv_rknown *k, uint64_t upto, bool (*live)(void *arg, uint64_t seq),
			void *arg);

/* Closes k (the file stays). NULL is fine. */
void kv_rknown_close(struct kv_rknown *k);

#endif
