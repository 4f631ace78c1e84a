/* SPDX-License-Identifier: MIT */
/*
 * client/lib/batch.c — batch lookup, put, get and remove of any size.
 *
 * A batch ioctl carries one struct kvfs_ioc_batch: a fixed 16 KiB struct
 * whose bt_data holds the key array first, then the keys' iov lists, then
 * their names (see kvfs_ioctl.h). A call's keys are cut, in order, into
 * consecutive chunks that each fit: a chunk takes keys while
 *
 *	40 * keys + 24 * (iovs of those keys) + (bytes of their names)
 *
 * stays within KVFS_BATCH_DATA_SIZE and the count within the daemon's
 * key limit. A key that could never fit (a name over the daemon's path
 * limit, more iovs than KVFS_LAYOUT_MAX_SEGS) gets its error without being
 * sent, and the chunk goes on with the next key, so one bad key costs
 * nothing but itself. The chunks go out one after another with the call's
 * trace id; per-key results are copied back through the chunk's index map.
 *
 * The 16 KiB struct and the index map are allocated per call, so calls on
 * one handle share nothing and need no lock.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/client.h"

static_assert(KVFS_PUT_FLAG_NOREPLACE == KVFS_PUT_NOREPLACE, "put flags follow the ABI");
static_assert(KVFS_PUT_FLAG_MKDIR == KVFS_PUT_MKDIR, "put flags follow the ABI");
static_assert(KVFS_REMOVE_FLAG_RECURSIVE == KVFS_REMOVE_RECURSIVE, "remove flags follow the ABI");

/* A call's keys: names alone (lookup, remove) or full keys (put, get). */
struct src {
	const char *const *names;
	const struct kvfs_key *keys;
	bool stop_at_miss; /* kvfs_lookup_prefix: no ioctl after a chunk with a miss */
	const void *event; /* kvfs_put_event: KVFS_BATCH_EVENT_SIZE bytes, or NULL */
};

/* Bytes of bt_data the keys may use: all but the event handle's. */
static size_t src_room(const struct src *s)
{
	return s->event ? KVFS_BATCH_EVENT_OFF : KVFS_BATCH_DATA_SIZE;
}

static const char *src_name(const struct src *s, size_t i)
{
	return s->names ? s->names[i] : s->keys[i].kk_name;
}

/* The iovs key i sends: none for a name or a layout key. */
static size_t src_niov(const struct src *s, size_t i)
{
	if (s->names || s->keys[i].kk_layout)
		return 0;
	return s->keys[i].kk_niov;
}

/*
 * Decides whether key i can ever be sent: returns the bytes it needs in
 * bt_data and its name's length in *name_len, or a negative errno.
 */
static long key_need(const struct kvfs *kv, const struct src *s, size_t i, size_t *name_len)
{
	const char *name = src_name(s, i);
	size_t niov = src_niov(s, i), len, need;

	if (!name || (niov && !s->keys[i].kk_iov))
		return -EINVAL;
	len = strnlen(name, (size_t)kv->kv_path_max + 1);
	if (len > kv->kv_path_max || len > UINT16_MAX)
		return -ENAMETOOLONG;
	if (niov > KVFS_LAYOUT_MAX_SEGS)
		return -E2BIG;
	need = sizeof(struct kvfs_ioc_key) + niov * sizeof(struct kvfs_ioc_iov) + len;
	if (need > src_room(s))
		return -E2BIG;
	*name_len = len;
	return (long)need;
}

static void set_status(struct kvfs_status *st, int64_t result)
{
	*st = (struct kvfs_status){.ks_result = result};
}

/*
 * Chooses the keys of the next chunk, starting at key `first`: their
 * indices go to map[0..k), their name lengths to lens[]. Keys that can
 * never be sent get their status here. Returns k (0 when every key looked
 * at was refused) and stores the first key not looked at in *next.
 */
static size_t choose(const struct kvfs *kv, const struct src *s, size_t first, size_t n,
		     struct kvfs_status *st, size_t *map, uint16_t *lens, size_t *next)
{
	size_t used = 0, k = 0, i;

	for (i = first; i < n && k < kv->kv_max_keys; i++) {
		size_t len = 0;
		long need = key_need(kv, s, i, &len);

		if (need < 0) {
			set_status(&st[i], need);
			continue;
		}
		if (used + (size_t)need > src_room(s))
			break;
		used += (size_t)need;
		map[k] = i;
		lens[k] = (uint16_t)len;
		k++;
	}
	*next = i;
	return k;
}

/* Writes the chosen keys into b: key array, then iov lists, then names. */
static void pack(struct kvfs_ioc_batch *b, const struct src *s, const size_t *map,
		 const uint16_t *lens, size_t k)
{
	struct kvfs_ioc_key *ik = (struct kvfs_ioc_key *)b->bt_data;
	size_t iov_off = k * sizeof(*ik), name_off, j;

	name_off = iov_off;
	for (j = 0; j < k; j++)
		name_off += src_niov(s, map[j]) * sizeof(struct kvfs_ioc_iov);
	memset(ik, 0, k * sizeof(*ik));
	for (j = 0; j < k; j++) {
		size_t i = map[j], niov = src_niov(s, i);

		ik[j].ik_name_off = (uint16_t)name_off;
		ik[j].ik_name_len = lens[j];
		memcpy(b->bt_data + name_off, src_name(s, i), lens[j]);
		name_off += lens[j];
		if (s->names)
			continue;
		ik[j].ik_layout = s->keys[i].kk_layout;
		ik[j].ik_block = s->keys[i].kk_block;
		if (!niov)
			continue;
		ik[j].ik_iov_off = (uint16_t)iov_off;
		ik[j].ik_niov = (uint16_t)niov;
		for (size_t v = 0; v < niov; v++) {
			const struct kvfs_iov *ki = &s->keys[i].kk_iov[v];
			struct kvfs_ioc_iov iv = {.iv_region = ki->ki_region,
						  .iv_offset = ki->ki_offset,
						  .iv_length = ki->ki_len};

			memcpy(b->bt_data + iov_off, &iv, sizeof(iv));
			iov_off += sizeof(iv);
		}
	}
}

/*
 * Runs one batch call: chunk, send, collect. A chunk the daemon refuses as
 * a whole ends the call: its keys and all later ones get that error. EINTR
 * (a signal while the daemon worked) sends the chunk again, except for a
 * remove, whose second try would report keys the first one removed as
 * missing. With stop_at_miss no chunk goes out once a key before it
 * missed; the keys not asked about get -ECANCELED.
 */
static int run(struct kvfs *kv, unsigned long cmd, uint32_t flags, const struct src *s, size_t n,
	       uint64_t trace, struct kvfs_status *st, struct kvfs_summary *sum)
{
	struct kvfs_summary total = {0};
	struct kvfs_status *own = NULL;
	struct kvfs_ioc_batch *b;
	size_t *map = NULL;
	uint16_t *lens = NULL;
	size_t first = 0, hits = 0, next, k, i;
	int err = 0;

	if (!kv || (n && !s->names && !s->keys))
		return -EINVAL;
	total.ksum_trace = trace ? trace : kvfs_trace_next(kv);
	if (!st && n) {
		st = own = malloc(n * sizeof(*st));
		if (!st)
			return -ENOMEM;
	}
	b = malloc(sizeof(*b));
	map = malloc(kv->kv_max_keys * sizeof(*map));
	lens = malloc(kv->kv_max_keys * sizeof(*lens));
	if (!b || !map || !lens) {
		err = -ENOMEM;
		goto out_free;
	}
	while (first < n) {
		while (s->stop_at_miss && hits < first && st[hits].ks_result >= 0)
			hits++;
		if (s->stop_at_miss && hits < first) {
			for (i = first; i < n; i++)
				set_status(&st[i], -ECANCELED);
			break;
		}
		k = choose(kv, s, first, n, st, map, lens, &next);
		if (k == 0) {
			first = next;
			continue;
		}
		memset(b, 0, KVFS_BATCH_HDR_SIZE);
		kvfs__hdr(&b->bt_hdr, sizeof(*b), total.ksum_trace);
		b->bt_nkeys = (uint32_t)k;
		b->bt_flags = flags;
		pack(b, s, map, lens, k);
		if (s->event)
			memcpy(b->bt_data + KVFS_BATCH_EVENT_OFF, s->event, KVFS_BATCH_EVENT_SIZE);
		do
			err = kv->kv_ioctl(kv->kv_fd, cmd, b);
		while (err == -EINTR && cmd != KVFS_IOC_REMOVE);
		total.ksum_ioctls++;
		if (err) {
			for (size_t j = 0; j < k; j++)
				set_status(&st[map[j]], err);
			for (i = next; i < n; i++)
				set_status(&st[i], err);
			break;
		}
		for (size_t j = 0; j < k; j++) {
			const struct kvfs_ioc_key *ik = (const struct kvfs_ioc_key *)b->bt_data + j;

			st[map[j]] = (struct kvfs_status){.ks_result = ik->ik_result,
							  .ks_size = ik->ik_size,
							  .ks_flags = ik->ik_flags};
		}
		total.ksum_bytes += b->bt_bytes;
		total.ksum_ns += b->bt_ns;
		first = next;
	}
	for (i = 0; i < n; i++) {
		if (st[i].ks_result < 0)
			continue;
		total.ksum_ok++;
		if (total.ksum_prefix == i)
			total.ksum_prefix++;
	}
out_free:
	if (sum)
		*sum = total;
	free(lens);
	free(map);
	free(b);
	free(own);
	return err;
}

int kvfs_lookup(struct kvfs *kv, const char *const *names, size_t n, uint64_t trace,
		struct kvfs_status *st, struct kvfs_summary *sum)
{
	struct src s = {.names = names};

	if (n && !names)
		return -EINVAL;
	return run(kv, KVFS_IOC_LOOKUP, 0, &s, n, trace, st, sum);
}

int64_t kvfs_lookup_prefix(struct kvfs *kv, const char *const *names, size_t n, uint64_t trace)
{
	struct src s = {.names = names, .stop_at_miss = true};
	struct kvfs_summary sum;
	int err;

	if (n && !names)
		return -EINVAL;
	err = run(kv, KVFS_IOC_LOOKUP, 0, &s, n, trace, NULL, &sum);
	return err ? err : (int64_t)sum.ksum_prefix;
}

int kvfs_put(struct kvfs *kv, const struct kvfs_key *keys, size_t n, unsigned flags, uint64_t trace,
	     struct kvfs_status *st, struct kvfs_summary *sum)
{
	struct src s = {.keys = keys};

	if ((n && !keys) || (flags & ~(KVFS_PUT_FLAG_NOREPLACE | KVFS_PUT_FLAG_MKDIR)))
		return -EINVAL;
	return run(kv, KVFS_IOC_PUT, flags, &s, n, trace, st, sum);
}

int kvfs_put_event(struct kvfs *kv, const struct kvfs_key *keys, size_t n, unsigned flags,
		   const void *event, uint64_t trace, struct kvfs_status *st,
		   struct kvfs_summary *sum)
{
	struct src s = {.keys = keys, .event = event};

	if ((n && !keys) || !event || (flags & ~(KVFS_PUT_FLAG_NOREPLACE | KVFS_PUT_FLAG_MKDIR)))
		return -EINVAL;
	return run(kv, KVFS_IOC_PUT, flags | KVFS_PUT_WAIT_EVENT, &s, n, trace, st, sum);
}

int kvfs_get(struct kvfs *kv, const struct kvfs_key *keys, size_t n, uint64_t trace,
	     struct kvfs_status *st, struct kvfs_summary *sum)
{
	struct src s = {.keys = keys};

	if (n && !keys)
		return -EINVAL;
	return run(kv, KVFS_IOC_GET, 0, &s, n, trace, st, sum);
}

int kvfs_remove(struct kvfs *kv, const char *const *names, size_t n, unsigned flags, uint64_t trace,
		struct kvfs_status *st, struct kvfs_summary *sum)
{
	struct src s = {.names = names};

	if ((n && !names) || (flags & ~KVFS_REMOVE_FLAG_RECURSIVE))
		return -EINVAL;
	return run(kv, KVFS_IOC_REMOVE, flags, &s, n, trace, st, sum);
}

int64_t kvfs_remove_prefix(struct kvfs *kv, const char *prefix, uint64_t trace)
{
	struct kvfs_status st;
	int err;

	if (!prefix)
		return -EINVAL;
	err = kvfs_remove(kv, &prefix, 1, KVFS_REMOVE_FLAG_RECURSIVE, trace, &st, NULL);
	return err ? err : st.ks_result;
}
