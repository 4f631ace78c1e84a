/* SPDX-License-Identifier: MIT */
/*
 * core/xmap.c — a version's extent map: see core/xmap.h.
 */
#include "core/xmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/obj.h"

uint32_t kv_xmap_nx(const struct kv_xmap *m)
{
	if (m->xm_n && kv_xmap_cat(m, m->xm_n - 1)->xe_loc.kl_index == KV_MANIFEST_INDEX)
		return m->xm_n - 1;
	return m->xm_n;
}

bool kv_xmap_whole(const struct kv_xmap *m)
{
	/* A WHOLE record's length is the value's size; a lone extent of a spill's is not. */
	return m->xm_n == 1 && m->xm_one.xe_loc.kl_index != KV_MANIFEST_INDEX &&
	       m->xm_one.xe_loc.kl_len == m->xm_size;
}

/* Chunk checksums of a record of len bytes. */
static size_t nchunks(uint64_t len)
{
	return (len + (1u << KV_CHUNK_SHIFT) - 1) >> KV_CHUNK_SHIFT;
}

uint64_t *kv_csums_new(uint64_t len)
{
	return malloc(nchunks(len) * 8 + 8);
}

uint64_t *kv_csums_dup(const struct kv_loc *l, const uint64_t *csums)
{
	uint64_t *c = csums ? kv_csums_new(l->kl_len) : NULL;

	if (c)
		memcpy(c, csums, nchunks(l->kl_len) * 8);
	return c;
}

/* A data record's bytes, rounded up to a page (a manifest's: none). */
static uint64_t rec_alloc(const struct kv_loc *l)
{
	if (l->kl_index == KV_MANIFEST_INDEX)
		return 0;
	return (l->kl_len + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE;
}

/* Counts xm_alloc again after a change of the entries (xm_n > 1). */
static void recount(struct kv_xmap *m)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < m->xm_n; i++)
		n += rec_alloc(&m->xm_e[i].xe_loc);
	m->xm_alloc = n;
}

uint64_t kv_xmap_alloc(const struct kv_xmap *m)
{
	if (m->xm_n > 1)
		return m->xm_alloc;
	return m->xm_n ? rec_alloc(&m->xm_one.xe_loc) : 0;
}

int kv_xmap_add(struct kv_xmap *m, const struct kv_loc *locs, uint64_t *const *csums, uint32_t n)
{
	uint32_t old = m->xm_n, i = 0, j = 0, k = 0;
	struct kv_xent *e;

	if (!n)
		return 0;
	e = malloc((old + n) * sizeof(*e));
	if (!e)
		return -ENOMEM;
	while (i < old || j < n) {
		const struct kv_xent *x = i < old ? kv_xmap_cat(m, i) : NULL;

		if (x && j < n && x->xe_loc.kl_index == locs[j].kl_index) {
			free(e);
			return -EEXIST;
		}
		if (x && (j == n || x->xe_loc.kl_index < locs[j].kl_index)) {
			e[k++] = *x;
			i++;
		} else {
			e[k++] = (struct kv_xent){.xe_loc = locs[j], .xe_csums = csums[j]};
			j++;
		}
	}
	if (old > 1)
		free(m->xm_e);
	m->xm_n = k;
	if (k == 1) {
		m->xm_one = e[0];
		free(e);
	} else {
		m->xm_e = e;
		recount(m);
	}
	return 0;
}

void kv_xmap_cut(struct kv_xmap *m, uint32_t first, uint32_t end)
{
	uint32_t n = m->xm_n, k = 0;
	struct kv_xent keep = {0};

	if (first >= end)
		return;
	for (uint32_t i = first; i < end; i++)
		free(kv_xmap_at(m, i)->xe_csums);
	if (n > 1) {
		for (uint32_t i = 0; i < n; i++)
			if (i < first || i >= end)
				m->xm_e[k++] = m->xm_e[i];
		if (k == 1) {
			keep = m->xm_e[0];
			free(m->xm_e);
			m->xm_one = keep;
		} else if (k == 0) {
			free(m->xm_e);
		}
	}
	m->xm_n = n - (end - first);
	if (!m->xm_n)
		memset(&m->xm_one, 0, sizeof(m->xm_one));
	else if (m->xm_n > 1)
		recount(m);
}

int kv_xmap_set(struct kv_xmap *m, uint64_t seq, uint64_t size, const struct kv_loc *locs,
		uint32_t n)
{
	memset(m, 0, sizeof(*m));
	if (n > 1) {
		m->xm_e = calloc(n, sizeof(*m->xm_e));
		if (!m->xm_e)
			return -ENOMEM;
	}
	m->xm_n = n;
	for (uint32_t i = 0; i < n; i++)
		kv_xmap_at(m, i)->xe_loc = locs[i];
	if (n > 1)
		recount(m);
	m->xm_seq = seq;
	m->xm_size = size;
	return 0;
}

void kv_xmap_clear(struct kv_xmap *m)
{
	for (uint32_t i = 0; i < m->xm_n; i++)
		free(kv_xmap_at(m, i)->xe_csums);
	if (m->xm_n > 1)
		free(m->xm_e);
	memset(m, 0, sizeof(*m));
}

int64_t kv_xmap_find(const struct kv_xmap *m, uint32_t index)
{
	uint32_t lo = 0, hi = m->xm_n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (kv_xmap_cat(m, mid)->xe_loc.kl_index < index)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->xm_n && kv_xmap_cat(m, lo)->xe_loc.kl_index == index ? (int64_t)lo : -1;
}

struct kv_xent *kv_xmap_holds(struct kv_xmap *m, const struct kv_loc *loc)
{
	int64_t at = m ? kv_xmap_find(m, loc->kl_index) : -1;

	if (at < 0 || !kv_loc_eq(&kv_xmap_at(m, (uint32_t)at)->xe_loc, loc))
		return NULL;
	return kv_xmap_at(m, (uint32_t)at);
}

uint64_t kv_xmap_bytes(const struct kv_xmap *m)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < m->xm_n; i++)
		n += kv_loc_size(&kv_xmap_cat(m, i)->xe_loc);
	return n;
}

void kv_xmap_dead(struct kv_bucket_set *bs, const struct kv_xmap *m)
{
	for (uint32_t i = 0; i < m->xm_n; i++)
		kv_bucket_dead(bs, &kv_xmap_cat(m, i)->xe_loc);
}

void kv_xmap_pin(struct kv_bucket_set *bs, const struct kv_xmap *m, bool pin)
{
	for (uint32_t i = 0; i < m->xm_n; i++)
		kv_bucket_pin(bs, kv_xmap_cat(m, i)->xe_loc.kl_bucket, pin);
}

bool kv_xmap_valid(struct kv_bucket_set *bs, const struct kv_xmap *m)
{
	for (uint32_t i = 0; i < m->xm_n; i++)
		if (!kv_bucket_valid(bs, &kv_xmap_cat(m, i)->xe_loc))
			return false;
	return true;
}

void kv_xmap_range(const struct kv_xmap *m, uint64_t off, uint64_t len, uint32_t *first,
		   uint32_t *end)
{
	uint32_t nx = kv_xmap_nx(m), lo = 0, hi = nx;
	uint64_t last;

	*first = *end = 0;
	if (!len || off >= m->xm_size)
		return;
	if (kv_xmap_whole(m)) { /* one WHOLE record: the value, however long (version 1) */
		*end = 1;
		return;
	}
	if (len > m->xm_size - off)
		len = m->xm_size - off;
	last = (off + len - 1) >> KV_EXTENT_SHIFT;
	/* The first entry whose extent ends after off. */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (kv_xmap_cat(m, mid)->xe_loc.kl_index < (off >> KV_EXTENT_SHIFT))
			lo = mid + 1;
		else
			hi = mid;
	}
	*first = *end = lo;
	while (*end < nx && kv_xmap_cat(m, *end)->xe_loc.kl_index <= last)
		(*end)++;
}

int kv_xmap_load_csums(struct kv_bucket_set *bs, struct kv_xmap *m, uint32_t first, uint32_t end)
{
	for (uint32_t i = first; i < end; i++) {
		struct kv_xent *x = kv_xmap_at(m, i);
		uint32_t nchunks;
		int err;

		if (x->xe_csums)
			continue;
		err = kv_bucket_load_csums(bs, &x->xe_loc, &x->xe_csums, &nchunks);
		if (err)
			return err == -ENOENT ? -EIO : err;
	}
	return 0;
}

/*
 * Describes bytes [off, off + len) of the pieces iov[0..n) as pieces of
 * out (n of them at most). Returns how many.
 */
static int iov_slice(const struct iovec *iov, int n, uint64_t off, uint64_t len,
		     struct iovec *out)
{
	int k = 0;

	for (int i = 0; i < n && len; i++) {
		uint64_t l = iov[i].iov_len;

		if (off >= l) {
			off -= l;
			continue;
		}
		l -= off;
		if (l > len)
			l = len;
		out[k].iov_base = (char *)iov[i].iov_base + off;
		out[k++].iov_len = l;
		len -= l;
		off = 0;
	}
	return k;
}

int kv_xmap_read_iov(struct kv_bucket_set *bs, const struct kv_xmap *m, const struct iovec *iov,
		     int n)
{
	uint32_t nx = kv_xmap_nx(m);
	struct iovec *piece;
	uint64_t at = 0; /* value bytes [0, at) are in place */
	int err = 0;

	if (n == 0 || !m->xm_size) /* an empty value */
		return 0;
	if (kv_xmap_whole(m)) { /* the common case: one record, the whole value */
		err = kv_bucket_read_iov(bs, &m->xm_one.xe_loc, m->xm_one.xe_csums, iov, n);
		return err == -ENOENT ? -EIO : err;
	}
	piece = malloc((size_t)n * sizeof(*piece));
	if (!piece)
		return -ENOMEM;
	for (uint32_t i = 0; !err && i <= nx; i++) {
		const struct kv_xent *x = i < nx ? kv_xmap_cat(m, i) : NULL;
		uint64_t base = x ? (uint64_t)x->xe_loc.kl_index << KV_EXTENT_SHIFT : m->xm_size;
		uint64_t len;
		int k;

		/* Holes read as zeros. */
		k = iov_slice(iov, n, at, base - at, piece);
		for (int j = 0; j < k; j++)
			memset(piece[j].iov_base, 0, piece[j].iov_len);
		if (!x)
			break;
		len = (x->xe_loc.kl_len + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE;
		k = iov_slice(iov, n, base, len, piece);
		err = k ? kv_bucket_read_iov(bs, &x->xe_loc, x->xe_csums, piece, k) : 0;
		if (err == -ENOENT)
			err = -EIO;
		at = base + x->xe_loc.kl_len;
	}
	free(piece);
	return err;
}

int kv_xmap_read_obj(struct kv_bucket_set *bs, const struct kv_xmap *m, uint32_t first,
		     uint32_t end, struct kv_obj *obj)
{
	int err = 0;

	for (uint32_t i = first; !err && i < end; i++) {
		const struct kv_xent *x = kv_xmap_cat(m, i);
		uint64_t base = (uint64_t)x->xe_loc.kl_index << KV_EXTENT_SHIFT, bytes;
		uint64_t len = x->xe_loc.kl_len;
		struct iovec *iov;
		uint32_t max;
		int n;

		if (base + len > obj->ko_size)
			return -EINVAL;
		/* A WHOLE record of version 1 may span several extents. */
		for (uint64_t k = base >> KV_EXTENT_SHIFT; !err && (k << KV_EXTENT_SHIFT) < base + len;
		     k++)
			if (!kv_obj_has_data(obj, k))
				err = kv_obj_materialize(obj, k);
		if (err || !len)
			continue;
		max = 0;
		for (uint64_t k = base >> KV_EXTENT_SHIFT; (k << KV_EXTENT_SHIFT) < base + len; k++)
			max += obj->ko_x[k]->xb_nseg;
		iov = malloc(max * sizeof(*iov));
		if (!iov)
			return -ENOMEM;
		n = kv_obj_iov(obj, base, len, iov, (int)max, &bytes);
		iov[n - 1].iov_len =
		    (iov[n - 1].iov_len + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE;
		err = kv_bucket_read_iov(bs, &x->xe_loc, x->xe_csums, iov, n);
		if (err == -ENOENT)
			err = -EIO;
		free(iov);
	}
	return err;
}
