/* SPDX-License-Identifier: MIT */
#include "core/obj.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_UP(x) (((x) + KV_PAGE_SIZE - 1) & ~(uint64_t)(KV_PAGE_SIZE - 1))

static _Atomic uint64_t cow_bytes;

uint64_t kv_obj_cow_bytes(void)
{
	return atomic_load_explicit(&cow_bytes, memory_order_relaxed);
}

/* --- one extent's memory --- */

static struct kv_xblk *xblk_new(void)
{
	struct kv_xblk *b = calloc(1, sizeof(*b));

	if (b)
		atomic_init(&b->xb_ref, 1);
	return b;
}

/* Frees every byte of the block at or past `keep` (a multiple of a page). One reference only. */
static void xblk_shrink(struct kv_pool *pool, struct kv_xblk *b, uint32_t keep)
{
	while (b->xb_nseg > 0) {
		struct kv_seg *s = &b->xb_seg[b->xb_nseg - 1];

		if (s->ks_off >= keep) {
			kv_pool_free(pool, s->ks_addr, s->ks_len);
			b->xb_cap -= s->ks_len;
			b->xb_nseg--;
			continue;
		}
		if (s->ks_off + s->ks_len > keep) {
			uint32_t cut = s->ks_off + s->ks_len - keep;

			kv_pool_free(pool, (char *)s->ks_addr + (s->ks_len - cut), cut);
			s->ks_len -= cut;
			b->xb_cap -= cut;
		}
		break;
	}
}

static void xblk_put(struct kv_pool *pool, struct kv_xblk *b)
{
	if (atomic_fetch_sub_explicit(&b->xb_ref, 1, memory_order_acq_rel) != 1)
		return;
	xblk_shrink(pool, b, 0);
	free(b->xb_seg);
	free(b);
}

static int xblk_push(struct kv_xblk *b, void *addr, uint32_t len)
{
	if (b->xb_nseg == b->xb_maxseg) {
		uint32_t n = b->xb_maxseg ? b->xb_maxseg * 2 : 2;
		struct kv_seg *seg = realloc(b->xb_seg, n * sizeof(*seg));

		if (!seg)
			return -ENOMEM;
		b->xb_seg = seg;
		b->xb_maxseg = n;
	}
	b->xb_seg[b->xb_nseg++] =
	    (struct kv_seg){.ks_addr = addr, .ks_off = b->xb_cap, .ks_len = len};
	b->xb_cap += len;
	return 0;
}

/* The smallest power of two >= x, for 2 <= x <= 2^63. */
static uint64_t pow2_up(uint64_t x)
{
	return 1ull << (64 - __builtin_clzll(x - 1));
}

/* The largest power of two <= x, for x >= 1. */
static uint64_t pow2_down(uint64_t x)
{
	return 1ull << (63 - __builtin_clzll(x));
}

/*
 * Grows a block's memory to at least `want` bytes (a page multiple, at most
 * KV_EXTENT). The next segment is as large as what is missing, but at
 * least half of `hint` (the object's capacity: geometric growth for files
 * written in small pieces), at most what is left of the extent; when the
 * pool has no block that large, smaller ones are taken. On failure the
 * block is as it was. One reference only.
 */
static int xblk_grow(struct kv_pool *pool, struct kv_xblk *b, uint32_t want, uint64_t hint)
{
	uint32_t old_cap = b->xb_cap;
	int err;

	while (b->xb_cap < want) {
		uint64_t missing = want - b->xb_cap;
		uint64_t len = missing > hint / 2 ? missing : hint / 2;
		uint64_t room = pow2_down(KV_EXTENT - b->xb_cap);
		void *addr;

		len = pow2_up(PAGE_UP(len));
		if (len > room)
			len = room;
		for (;;) {
			err = kv_pool_alloc(pool, len, &addr);
			if (err != -ENOSPC || len == KV_PAGE_SIZE)
				break;
			len /= 2;
		}
		if (err)
			goto out_undo;
		err = xblk_push(b, addr, (uint32_t)len);
		if (err) {
			kv_pool_free(pool, addr, len);
			goto out_undo;
		}
	}
	return 0;

out_undo:
	xblk_shrink(pool, b, old_cap);
	return err;
}

/* Index of the segment holding byte `in` of the block (in < xb_cap). */
static uint32_t xblk_find(const struct kv_xblk *b, uint32_t in)
{
	uint32_t lo = 0, hi = b->xb_nseg - 1;

	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2;

		if (b->xb_seg[mid].ks_off <= in)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Copies (buf) or zeroes (buf NULL) len bytes at `in` of a block; its memory covers them. */
static void xblk_copy_in(struct kv_xblk *b, uint32_t in, const void *buf, uint64_t len)
{
	uint32_t i = len ? xblk_find(b, in) : 0;

	while (len) {
		const struct kv_seg *s = &b->xb_seg[i++];
		uint64_t at = in - s->ks_off;
		uint64_t n = s->ks_len - at < len ? s->ks_len - at : len;

		if (buf) {
			memcpy((char *)s->ks_addr + at, buf, n);
			buf = (const char *)buf + n;
		} else {
			memset((char *)s->ks_addr + at, 0, n);
		}
		in += (uint32_t)n;
		len -= n;
	}
}

/* A private copy of the first `len` bytes (a page multiple) of a shared block's memory. */
static int xblk_copy(struct kv_pool *pool, const struct kv_xblk *src, uint32_t len,
		     struct kv_xblk **out)
{
	struct kv_xblk *b = xblk_new();
	int err;

	if (!b)
		return -ENOMEM;
	err = xblk_grow(pool, b, len, len);
	if (err) {
		xblk_put(pool, b);
		return err;
	}
	xblk_shrink(pool, b, len);
	for (uint32_t i = 0; i < src->xb_nseg && src->xb_seg[i].ks_off < len; i++) {
		const struct kv_seg *s = &src->xb_seg[i];

		xblk_copy_in(b, s->ks_off, s->ks_addr,
			     s->ks_len < len - s->ks_off ? s->ks_len : len - s->ks_off);
	}
	atomic_fetch_add_explicit(&cow_bytes, len, memory_order_relaxed);
	*out = b;
	return 0;
}

/* --- objects --- */

int kv_obj_new(struct kv_pool *pool, struct kv_obj **out)
{
	struct kv_obj *obj = calloc(1, sizeof(*obj));

	if (!obj)
		return -ENOMEM;
	atomic_init(&obj->ko_ref, 1);
	obj->ko_pool = pool;
	*out = obj;
	return 0;
}

void kv_obj_get(struct kv_obj *obj)
{
	atomic_fetch_add_explicit(&obj->ko_ref, 1, memory_order_relaxed);
}

static void obj_set_cap(struct kv_obj *obj)
{
	obj->ko_cap =
	    obj->ko_nx ? (uint64_t)(obj->ko_nx - 1) * KV_EXTENT + obj->ko_x[obj->ko_nx - 1]->xb_cap
		       : 0;
}

/*
 * Frees the memory at or past `keep` (a multiple of a page): extents wholly
 * past it are let go; the one it cuts is trimmed unless it is shared.
 */
static void obj_shrink_cap(struct kv_obj *obj, uint64_t keep)
{
	while (obj->ko_nx > 0) {
		uint64_t base = (uint64_t)(obj->ko_nx - 1) * KV_EXTENT;
		struct kv_xblk *b = obj->ko_x[obj->ko_nx - 1];

		if (base >= keep) {
			xblk_put(obj->ko_pool, b);
			obj->ko_nx--;
			continue;
		}
		if (base + b->xb_cap > keep && atomic_load(&b->xb_ref) == 1)
			xblk_shrink(obj->ko_pool, b, (uint32_t)(keep - base));
		break;
	}
	obj_set_cap(obj);
}

void kv_obj_put(struct kv_obj *obj)
{
	if (atomic_fetch_sub_explicit(&obj->ko_ref, 1, memory_order_acq_rel) != 1)
		return;
	obj_shrink_cap(obj, 0);
	free(obj->ko_x);
	free(obj);
}

static int obj_push(struct kv_obj *obj, struct kv_xblk *b)
{
	if (obj->ko_nx == obj->ko_maxx) {
		uint32_t n = obj->ko_maxx ? obj->ko_maxx * 2 : 4;
		struct kv_xblk **x = realloc(obj->ko_x, n * sizeof(*x));

		if (!x)
			return -ENOMEM;
		obj->ko_x = x;
		obj->ko_maxx = n;
	}
	obj->ko_x[obj->ko_nx++] = b;
	return 0;
}

/* Makes extent k's block the object's own, copying it when shared. */
static int obj_own(struct kv_obj *obj, uint32_t k)
{
	struct kv_xblk *b = obj->ko_x[k], *copy;
	int err;

	if (atomic_load(&b->xb_ref) == 1)
		return 0;
	err = xblk_copy(obj->ko_pool, b, b->xb_cap, &copy);
	if (err)
		return err;
	obj->ko_x[k] = copy;
	xblk_put(obj->ko_pool, b);
	return 0;
}

/* Makes every extent with memory in [from, to) the object's own. */
static int obj_own_range(struct kv_obj *obj, uint64_t from, uint64_t to)
{
	int err;

	if (to > obj->ko_cap)
		to = obj->ko_cap;
	if (from >= to)
		return 0;
	for (uint64_t k = from >> KV_EXTENT_SHIFT; k <= (to - 1) >> KV_EXTENT_SHIFT; k++) {
		err = obj_own(obj, (uint32_t)k);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Grows the memory to at least `want` bytes, filling the last extent
 * before starting the next. On failure the capacity is where it was.
 */
static int obj_grow(struct kv_obj *obj, uint64_t want)
{
	uint64_t old_cap = obj->ko_cap;
	int err = 0;

	want = PAGE_UP(want);
	while (!err && obj->ko_cap < want) {
		struct kv_xblk *b;
		uint64_t base, need;

		if (!obj->ko_nx || obj->ko_x[obj->ko_nx - 1]->xb_cap == KV_EXTENT) {
			b = xblk_new();
			err = b ? obj_push(obj, b) : -ENOMEM;
			if (err) {
				free(b);
				break;
			}
		}
		err = obj_own(obj, obj->ko_nx - 1);
		if (err)
			break;
		b = obj->ko_x[obj->ko_nx - 1];
		base = (uint64_t)(obj->ko_nx - 1) * KV_EXTENT;
		need = want - base < KV_EXTENT ? want - base : KV_EXTENT;
		err = xblk_grow(obj->ko_pool, b, (uint32_t)need, obj->ko_cap);
		if (!b->xb_cap) {
			xblk_put(obj->ko_pool, b);
			obj->ko_nx--;
		}
		obj_set_cap(obj);
	}
	if (err)
		obj_shrink_cap(obj, old_cap);
	return err;
}

/* Copies (buf) or zeroes (buf NULL) len bytes at off; the memory covers them and is owned. */
static void obj_copy_in(struct kv_obj *obj, uint64_t off, const void *buf, uint64_t len)
{
	while (len) {
		uint64_t k = off >> KV_EXTENT_SHIFT, in = off & (KV_EXTENT - 1);
		uint64_t n = KV_EXTENT - in < len ? KV_EXTENT - in : len;

		xblk_copy_in(obj->ko_x[k], (uint32_t)in, buf, n);
		if (buf)
			buf = (const char *)buf + n;
		off += n;
		len -= n;
	}
}

/*
 * Makes [from, end) writable: owned where it has memory, memory up to end.
 * On failure the object is unchanged in size and bytes and its spare
 * memory past the size is given back.
 */
static int obj_prepare(struct kv_obj *obj, uint64_t from, uint64_t end)
{
	int err = obj_own_range(obj, from, end);

	if (!err && end > obj->ko_cap)
		err = obj_grow(obj, end);
	if (err)
		obj_shrink_cap(obj, PAGE_UP(obj->ko_size));
	return err;
}

int kv_obj_write(struct kv_obj *obj, uint64_t off, const void *buf, size_t len)
{
	uint64_t end = off + len;
	int err;

	if (end < off)
		return -EFBIG;
	if (!len)
		return 0;
	err = obj_prepare(obj, off < obj->ko_size ? off : obj->ko_size, end);
	if (err)
		return err;
	if (off > obj->ko_size)
		obj_copy_in(obj, obj->ko_size, NULL, off - obj->ko_size);
	obj_copy_in(obj, off, buf, len);
	if (end > obj->ko_size)
		obj->ko_size = end;
	return 0;
}

int kv_obj_truncate(struct kv_obj *obj, uint64_t size)
{
	int err;

	if (size <= obj->ko_size) {
		obj->ko_size = size;
		obj_shrink_cap(obj, PAGE_UP(size));
		return 0;
	}
	err = obj_own_range(obj, obj->ko_size, size);
	if (!err && size > obj->ko_cap)
		err = obj_grow(obj, size);
	if (err)
		return err;
	obj_copy_in(obj, obj->ko_size, NULL, size - obj->ko_size);
	obj->ko_size = size;
	return 0;
}

int kv_obj_reserve(struct kv_obj *obj, uint64_t len, bool keep_size)
{
	int err = 0;

	if (!keep_size && len > obj->ko_size)
		err = obj_own_range(obj, obj->ko_size, len);
	if (!err && len > obj->ko_cap)
		err = obj_grow(obj, len);
	if (err)
		return err;
	if (!keep_size && len > obj->ko_size) {
		obj_copy_in(obj, obj->ko_size, NULL, len - obj->ko_size);
		obj->ko_size = len;
	}
	return 0;
}

int kv_obj_alloc(struct kv_obj *obj, uint64_t len)
{
	int err;

	if (obj->ko_size || obj->ko_cap)
		return -EINVAL;
	err = obj_grow(obj, len);
	if (!err)
		obj->ko_size = len;
	return err;
}

void kv_obj_seal(struct kv_obj *obj, uint64_t seq)
{
	obj_shrink_cap(obj, PAGE_UP(obj->ko_size));
	obj->ko_seq = seq;
	obj->ko_sealed = true;
}

int kv_obj_clone(struct kv_obj *src, uint64_t len, struct kv_obj **out)
{
	struct kv_obj *obj;
	uint64_t n, cut;
	int err;

	if (len > src->ko_size)
		len = src->ko_size;
	err = kv_obj_new(src->ko_pool, &obj);
	if (err)
		return err;
	n = (len + KV_EXTENT - 1) >> KV_EXTENT_SHIFT;
	obj->ko_x = malloc((n ? n : 1) * sizeof(*obj->ko_x));
	if (!obj->ko_x) {
		free(obj);
		return -ENOMEM;
	}
	obj->ko_maxx = n ? (uint32_t)n : 1;
	/* An extent the clone cuts short is copied up to the cut, so the rest can go. */
	cut = len < src->ko_size ? len & (KV_EXTENT - 1) : 0;
	for (uint32_t k = 0; k < n; k++) {
		if (k + 1 == n && cut) {
			err = xblk_copy(src->ko_pool, src->ko_x[k], (uint32_t)PAGE_UP(cut),
					&obj->ko_x[k]);
			if (err)
				goto out_put;
		} else {
			atomic_fetch_add_explicit(&src->ko_x[k]->xb_ref, 1, memory_order_relaxed);
			obj->ko_x[k] = src->ko_x[k];
		}
		obj->ko_nx = k + 1;
	}
	obj_set_cap(obj);
	obj->ko_size = len;
	*out = obj;
	return 0;

out_put:
	obj_set_cap(obj);
	kv_obj_put(obj);
	return err;
}

int kv_obj_iov(const struct kv_obj *obj, uint64_t off, uint64_t len, struct iovec *iov, int maxiov,
	       uint64_t *bytes)
{
	int n = 0;

	*bytes = 0;
	if (off >= obj->ko_size || len == 0)
		return 0;
	if (len > obj->ko_size - off)
		len = obj->ko_size - off;
	while (len && n < maxiov) {
		const struct kv_xblk *b = obj->ko_x[off >> KV_EXTENT_SHIFT];
		uint32_t in = (uint32_t)(off & (KV_EXTENT - 1));
		const struct kv_seg *s = &b->xb_seg[xblk_find(b, in)];
		uint64_t at = in - s->ks_off;
		uint64_t m = s->ks_len - at < len ? s->ks_len - at : len;

		iov[n].iov_base = (char *)s->ks_addr + at;
		iov[n].iov_len = m;
		n++;
		off += m;
		len -= m;
		*bytes += m;
	}
	return n;
}

uint32_t kv_obj_niov(const struct kv_obj *obj)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < obj->ko_nx; k++)
		n += obj->ko_x[k]->xb_nseg;
	return n;
}

uint64_t kv_obj_read(const struct kv_obj *obj, uint64_t off, void *buf, uint64_t len)
{
	struct iovec iov[16];
	uint64_t done = 0, got;
	int n;

	do {
		n = kv_obj_iov(obj, off + done, len - done, iov, 16, &got);
		for (int i = 0; i < n; i++) {
			memcpy((char *)buf + done, iov[i].iov_base, iov[i].iov_len);
			done += iov[i].iov_len;
		}
	} while (n == 16 && done < len);
	return done;
}
