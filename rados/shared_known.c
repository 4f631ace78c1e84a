/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_known.c — the known table (shared_int.h's struct known,
 * under sh_known_lock, a leaf).
 *
 * The known table remembers, per local key (inode number), which local
 * version (sequence number) is the same bytes as which cluster version
 * (node, seq), and when that was last checked against the directory entry.
 * What it says of clean versions is also kept in DATA_DIR/rados.known
 * (rados/rados_known.h), by sequence number, so that after a restart a copy
 * is still known as a copy (replaced or removed with the cluster's
 * version) and a key made here (kept until it is sent) is not.
 */
#include "rados/shared_int.h"

static struct known **known_slot(struct kv_shared *sh, uint64_t ino)
{
	struct known **k = &sh->sh_known[XXH3_64bits(&ino, sizeof(ino)) & (KNOWN_BUCKETS - 1)];

	while (*k && (*k)->kn_ino != ino)
		k = &(*k)->kn_next;
	return k;
}

/* Copies the record of ino into *out; false when there is none. */
bool kv_sh_known_get(struct kv_shared *sh, uint64_t ino, struct known *out)
{
	struct known *k;

	pthread_mutex_lock(&sh->sh_known_lock);
	k = *known_slot(sh, ino);
	if (k)
		*out = *k;
	pthread_mutex_unlock(&sh->sh_known_lock);
	return k != NULL;
}

/* Records that local version seq of ino is (clean) cluster version (node, rseq), checked now. */
void kv_sh_known_set(struct kv_shared *sh, uint64_t ino, uint64_t seq, bool clean, uint64_t node,
		     uint64_t rseq)
{
	struct known **slot, *k;
	uint64_t old = 0; /* a clean version this record described before */

	pthread_mutex_lock(&sh->sh_known_lock);
	slot = known_slot(sh, ino);
	k = *slot;
	if (k && k->kn_clean)
		old = k->kn_seq;
	if (!k && sh->sh_known_n >= KNOWN_MAX) {
		/* full: this chain's records go (a key without one is only checked again) */
		struct known **head =
		    &sh->sh_known[XXH3_64bits(&ino, sizeof(ino)) & (KNOWN_BUCKETS - 1)];

		while (*head) {
			struct known *g = *head;

			*head = g->kn_next;
			free(g);
			sh->sh_known_n--;
		}
		slot = head;
	}
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (!k) { /* only a check too many later */
			pthread_mutex_unlock(&sh->sh_known_lock);
			return;
		}
		k->kn_ino = ino;
		*slot = k;
		sh->sh_known_n++;
	}
	k->kn_seq = seq;
	k->kn_clean = clean;
	k->kn_node = node;
	k->kn_rseq = rseq;
	k->kn_checked_ns = mono_ns();
	pthread_mutex_unlock(&sh->sh_known_lock);
	if (!sh->sh_rk)
		return;
	if (old && (old != seq || !clean))
		kv_rknown_forget(sh->sh_rk, old);
	if (clean && seq) /* a failed write: known until the process ends */
		kv_rknown_set(sh->sh_rk, seq, node, rseq);
}

void kv_sh_known_drop(struct kv_shared *sh, uint64_t ino)
{
	struct known **slot, *k;

	pthread_mutex_lock(&sh->sh_known_lock);
	slot = known_slot(sh, ino);
	k = *slot;
	if (k) {
		*slot = k->kn_next;
		sh->sh_known_n--;
	}
	pthread_mutex_unlock(&sh->sh_known_lock);
	if (k && k->kn_clean && sh->sh_rk)
		kv_rknown_forget(sh->sh_rk, k->kn_seq);
	free(k);
}

/*
 * What is known of local key ino at version seq: its record, or, when it
 * has none for that version (after a restart), rados.known's (clean, not
 * checked yet). False: nothing (a version made here and not yet sent).
 */
bool kv_sh_known_of(struct kv_shared *sh, uint64_t ino, uint64_t seq, struct known *out)
{
	uint64_t node, rseq;

	if (kv_sh_known_get(sh, ino, out) && out->kn_seq == seq)
		return true;
	if (!sh->sh_rk || !kv_rknown_get(sh->sh_rk, seq, &node, &rseq))
		return false;
	*out = (struct known){
	    .kn_ino = ino, .kn_seq = seq, .kn_node = node, .kn_rseq = rseq, .kn_clean = true};
	return true;
}
