/* SPDX-License-Identifier: MIT */
#include "core/obj.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
	kv_pool_owed_release(pool, atomic_load(&b->xb_owed));
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

/*
 * A read-only 2 MiB of zeros: what a hole reads as (a write to it faults);
 * zeroed static memory should the mapping fail.
 */
static const char *zeros;
static pthread_once_t zeros_once = PTHREAD_ONCE_INIT;
static char zeros_static[KV_EXTENT] __attribute__((aligned(4096)));

static void zeros_init(void)
{
	void *p = mmap(NULL, KV_EXTENT, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	zeros = p == MAP_FAILED ? zeros_static : p;
}

const void *kv_obj_zeros(void)
{
	pthread_once(&zeros_once, zeros_init);
	return zeros;
}

static uint64_t ext_base(uint64_t k)
{
	return k << KV_EXTENT_SHIFT;
}

/* Bytes of extent k below `size`. */
static uint64_t ext_len(uint64_t size, uint64_t k)
{
	uint64_t base = ext_base(k);

	return size <= base ? 0 : size - base < KV_EXTENT ? size - base : KV_EXTENT;
}

static struct kv_xblk *ext_at(const struct kv_obj *obj, uint64_t k)
{
	return k < obj->ko_nx ? obj->ko_x[k] : NULL;
}

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

/* Drops trailing holes from the slot array. */
static void obj_trim(struct kv_obj *obj)
{
	while (obj->ko_nx && !obj->ko_x[obj->ko_nx - 1])
		obj->ko_nx--;
}

/* Lets extent k's block go (it becomes a hole). */
static void ext_drop(struct kv_obj *obj, uint64_t k)
{
	struct kv_xblk *b = obj->ko_x[k];

	if (!b)
		return;
	obj->ko_cap -= b->xb_cap;
	obj->ko_x[k] = NULL;
	xblk_put(obj->ko_pool, b);
}

/*
 * Frees the memory at or past `keep` (a multiple of a page): extents wholly
 * past it are let go; the one it cuts is trimmed unless it is shared.
 */
static void obj_shrink_cap(struct kv_obj *obj, uint64_t keep)
{
	while (obj->ko_nx > 0) {
		uint64_t k = obj->ko_nx - 1, base = ext_base(k);
		struct kv_xblk *b = obj->ko_x[k];

		if (base >= keep) {
			ext_drop(obj, k);
			obj->ko_nx--;
			continue;
		}
		if (b && base + b->xb_cap > keep && atomic_load(&b->xb_ref) == 1) {
			obj->ko_cap -= b->xb_cap;
			xblk_shrink(obj->ko_pool, b, (uint32_t)(keep - base));
			obj->ko_cap += b->xb_cap;
		}
		break;
	}
	obj_trim(obj);
}

void kv_obj_put(struct kv_obj *obj)
{
	if (atomic_fetch_sub_explicit(&obj->ko_ref, 1, memory_order_acq_rel) != 1)
		return;
	kv_pool_owed_release(obj->ko_pool, atomic_load(&obj->ko_owed));
	obj_shrink_cap(obj, 0);
	free(obj->ko_x);
	free(obj);
}

/* Makes room for n slots (new ones are holes). */
static int obj_slots(struct kv_obj *obj, uint64_t n)
{
	if (n > (KV_MAX_VALUE >> KV_EXTENT_SHIFT))
		return -EFBIG;
	if (n > obj->ko_maxx) {
		uint64_t m = obj->ko_maxx ? obj->ko_maxx : 4;
		struct kv_xblk **x;

		while (m < n)
			m *= 2;
		x = realloc(obj->ko_x, m * sizeof(*x));
		if (!x)
			return -ENOMEM;
		obj->ko_x = x;
		obj->ko_maxx = (uint32_t)m;
	}
	while (obj->ko_nx < n)
		obj->ko_x[obj->ko_nx++] = NULL;
	return 0;
}

/*
 * Makes extent k present (a new block for a hole: *created), its block the
 * object's own (copying it when shared) and its memory at least `want`
 * bytes (a page multiple <= KV_EXTENT). Fresh memory is not zeroed. On
 * failure the extent is as it was (a block made for it is let go).
 */
static int ext_prepare(struct kv_obj *obj, uint64_t k, uint32_t want, bool *created)
{
	struct kv_xblk *b, *copy;
	uint32_t old;
	int err;

	*created = false;
	err = obj_slots(obj, k + 1);
	if (err)
		return err;
	b = obj->ko_x[k];
	if (!b) {
		b = xblk_new();
		if (!b) {
			obj_trim(obj);
			return -ENOMEM;
		}
		obj->ko_x[k] = b;
		*created = true;
	} else if (atomic_load(&b->xb_ref) > 1) {
		err = xblk_copy(obj->ko_pool, b, b->xb_cap, &copy);
		if (err)
			return err;
		obj->ko_x[k] = copy;
		xblk_put(obj->ko_pool, b);
		b = copy;
	}
	/* The object's own now, about to change: no record holds its bytes any more. */
	atomic_store_explicit(&b->xb_rec, 0, memory_order_relaxed);
	old = b->xb_cap;
	/* Geometric growth across extents only for a file written in order. */
	err = xblk_grow(obj->ko_pool, b, want,
			k && k + 1 == obj->ko_nx && obj->ko_x[k - 1] ? obj->ko_cap : b->xb_cap);
	obj->ko_cap += b->xb_cap - old;
	if (err && *created) {
		ext_drop(obj, k);
		obj_trim(obj);
		*created = false;
	}
	return err;
}

/* Copies (buf) or zeroes (buf NULL) bytes [from, to) of extent k; its memory covers them. */
static void ext_fill(struct kv_obj *obj, uint64_t k, uint64_t from, uint64_t to, const void *buf)
{
	if (from < to)
		xblk_copy_in(obj->ko_x[k], (uint32_t)from, buf, to - from);
}

/*
 * The one change every write, truncate and fallocate makes: the size
 * becomes `newsize` (>= the size) and [off, off + len) (inside it) takes
 * buf's bytes; every other new byte reads as zero. Extents the write
 * touches get memory; a present extent holding the old end gets memory up
 * to the new size (zeroed); extents in between stay holes. All or nothing:
 * on failure the object is unchanged in size and bytes and its spare
 * memory past the size is given back.
 */
static int obj_extend(struct kv_obj *obj, uint64_t off, const void *buf, uint64_t len,
		      uint64_t newsize)
{
	uint64_t size = obj->ko_size, k0 = off >> KV_EXTENT_SHIFT;
	uint64_t k1 = len ? (off + len - 1) >> KV_EXTENT_SHIFT : k0;
	uint64_t kz = size >> KV_EXTENT_SHIFT; /* the extent of the old end */
	bool small[4], *created = small, zfix;
	uint64_t n = len ? k1 - k0 + 1 : 0;
	int err = 0;

	/* The old end's extent gains bytes the write does not cover: they must be zeros. */
	zfix = (size & (KV_EXTENT - 1)) && ext_at(obj, kz) && (!len || kz < k0) &&
	       ext_len(newsize, kz) > ext_len(size, kz);
	if (n > 4) {
		created = calloc(n, sizeof(*created));
		if (!created)
			return -ENOMEM;
	}
	if (zfix) {
		bool c;

		err = ext_prepare(obj, kz, (uint32_t)PAGE_UP(ext_len(newsize, kz)), &c);
	}
	for (uint64_t i = 0; !err && i < n; i++)
		err = ext_prepare(obj, k0 + i, (uint32_t)PAGE_UP(ext_len(newsize, k0 + i)),
				  &created[i]);
	if (err) {
		for (uint64_t i = 0; i < n; i++)
			if (created[i] && k0 + i < obj->ko_nx)
				ext_drop(obj, k0 + i);
		if (len) /* a write gives its spare memory back; a truncate keeps it */
			obj_shrink_cap(obj, PAGE_UP(size));
		obj_trim(obj);
		goto out;
	}
	if (zfix)
		ext_fill(obj, kz, ext_len(size, kz), ext_len(newsize, kz), NULL);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t k = k0 + i, base = ext_base(k);
		uint64_t lo = off > base ? off - base : 0;
		uint64_t hi = off + len - base < KV_EXTENT ? off + len - base : KV_EXTENT;
		uint64_t valid = created[i] ? 0 : ext_len(size, k), end = ext_len(newsize, k);

		/* Zeros where the extent had no bytes and the write puts none. */
		ext_fill(obj, k, valid, lo < end ? lo : end, NULL);
		ext_fill(obj, k, hi > valid ? hi : valid, end, NULL);
		ext_fill(obj, k, lo, hi, (const char *)buf + (base + lo - off));
	}
	obj->ko_size = newsize;
out:
	if (created != small)
		free(created);
	return err;
}

int kv_obj_write(struct kv_obj *obj, uint64_t off, const void *buf, size_t len)
{
	uint64_t end = off + len;

	if (end < off || end > KV_MAX_VALUE)
		return -EFBIG;
	if (!len)
		return 0;
	return obj_extend(obj, off, buf, len, end > obj->ko_size ? end : obj->ko_size);
}

int kv_obj_truncate(struct kv_obj *obj, uint64_t size)
{
	if (size > KV_MAX_VALUE)
		return -EFBIG;
	if (size <= obj->ko_size) {
		obj->ko_size = size;
		obj_shrink_cap(obj, PAGE_UP(size));
		return 0;
	}
	return obj_extend(obj, size, NULL, 0, size);
}

int kv_obj_reserve(struct kv_obj *obj, uint64_t len, bool keep_size)
{
	/* Unwritten: the bytes read as zeros and take no memory until written. */
	if (keep_size || len <= obj->ko_size)
		return len > KV_MAX_VALUE ? -EFBIG : 0;
	return kv_obj_truncate(obj, len);
}

int kv_obj_punch(struct kv_obj *obj, uint64_t off, uint64_t len)
{
	uint64_t end = off + len < off || off + len > obj->ko_size ? obj->ko_size : off + len;
	uint64_t k0, k1;
	int err;

	if (off >= end)
		return 0;
	k0 = off >> KV_EXTENT_SHIFT;
	k1 = (end - 1) >> KV_EXTENT_SHIFT;
	/* First what can fail: the partly punched extents become the object's own. */
	for (uint64_t k = k0; k <= k1; k += k1 > k0 ? k1 - k0 : 1) {
		uint64_t base = ext_base(k), elen = ext_len(obj->ko_size, k);
		bool whole = off <= base && end >= base + elen, c;

		if (!whole && ext_at(obj, k)) {
			err = ext_prepare(obj, k, obj->ko_x[k]->xb_cap, &c);
			if (err)
				return err;
		}
	}
	for (uint64_t k = k0; k <= k1 && k < obj->ko_nx; k++) {
		uint64_t base = ext_base(k), elen = ext_len(obj->ko_size, k);

		if (!obj->ko_x[k])
			continue;
		if (off <= base && end >= base + elen)
			ext_drop(obj, k);
		else
			ext_fill(obj, k, off > base ? off - base : 0,
				 end - base < elen ? end - base : elen, NULL);
	}
	obj_trim(obj);
	return 0;
}

int kv_obj_alloc(struct kv_obj *obj, uint64_t len)
{
	bool c;
	int err = 0;

	if (obj->ko_size || obj->ko_nx)
		return -EINVAL;
	if (len > KV_MAX_VALUE)
		return -EFBIG;
	for (uint64_t k = 0; !err && ext_base(k) < len; k++)
		err = ext_prepare(obj, k, (uint32_t)PAGE_UP(ext_len(len, k)), &c);
	if (err) {
		obj_shrink_cap(obj, 0);
		return err;
	}
	obj->ko_size = len;
	return 0;
}

int kv_obj_materialize(struct kv_obj *obj, uint64_t k)
{
	bool c;

	if (ext_at(obj, k) || ext_base(k) >= obj->ko_size)
		return -EINVAL;
	return ext_prepare(obj, k, (uint32_t)PAGE_UP(ext_len(obj->ko_size, k)), &c);
}

int kv_obj_fill_reserved(struct kv_obj *obj, uint64_t k)
{
	uint32_t len = KV_EXTENT;
	struct kv_xblk *b;
	int err;

	if (ext_at(obj, k) || ext_base(k) >= obj->ko_size)
		return -EINVAL;
	err = obj_slots(obj, k + 1);
	b = err ? NULL : xblk_new();
	if (!err && !b)
		err = -ENOMEM;
	/* The whole extent, its size or not: appends into it need no more. */
	while (!err && b->xb_cap < KV_EXTENT) {
		void *addr;

		err = kv_pool_alloc_reserved(obj->ko_pool, len, &addr);
		if (err == -ENOSPC && len > KV_PAGE_SIZE) {
			len /= 2; /* what is left stays a multiple of len */
			err = 0;
		} else if (!err && xblk_push(b, addr, len)) {
			kv_pool_free_reserved(obj->ko_pool, addr, len);
			err = -ENOMEM;
		}
	}
	if (err) { /* every piece back to the promise */
		for (uint32_t i = 0; b && i < b->xb_nseg; i++)
			kv_pool_free_reserved(obj->ko_pool, b->xb_seg[i].ks_addr,
					      b->xb_seg[i].ks_len);
		if (b) {
			free(b->xb_seg);
			free(b);
		}
		obj_trim(obj);
		return err;
	}
	obj->ko_x[k] = b;
	obj->ko_cap += b->xb_cap;
	xblk_copy_in(b, 0, NULL, KV_EXTENT);
	return 0;
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
	if (n > src->ko_nx)
		n = src->ko_nx;
	err = obj_slots(obj, n);
	if (err) {
		free(obj);
		return err;
	}
	/* An extent the clone cuts short is copied up to the cut, so the rest can go. */
	cut = len < src->ko_size ? len & (KV_EXTENT - 1) : 0;
	for (uint64_t k = 0; k < n; k++) {
		struct kv_xblk *b = src->ko_x[k];

		if (!b)
			continue;
		if (ext_base(k + 1) > len && cut) {
			err = xblk_copy(src->ko_pool, b, (uint32_t)PAGE_UP(cut), &obj->ko_x[k]);
			if (err)
				goto out_put;
		} else {
			atomic_fetch_add_explicit(&b->xb_ref, 1, memory_order_relaxed);
			obj->ko_x[k] = b;
		}
		obj->ko_cap += obj->ko_x[k]->xb_cap;
	}
	obj_trim(obj);
	obj->ko_size = len;
	*out = obj;
	return 0;

out_put:
	kv_obj_put(obj);
	return err;
}

/* What extent k owes once its bytes end at `size` (the value's size then). */
static uint64_t owe_of(uint64_t k, uint64_t size, uint64_t over)
{
	uint64_t base = k << KV_EXTENT_SHIFT;
	uint64_t len = size - base < KV_EXTENT ? size - base : KV_EXTENT;

	return (len + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE + over;
}

/*
 * The extent whose tail a size change from old to size rewrites (zeros
 * past the old end, or the cut): UINT64_MAX when none, or when it is a
 * hole (it stays one) or one of [off, end)'s.
 */
static uint64_t owe_edge(const struct kv_obj *obj, uint64_t old, uint64_t size, uint64_t off,
			 uint64_t end)
{
	uint64_t m = old < size ? old : size, k = m >> KV_EXTENT_SHIFT;

	if (old == size || !(m & (KV_EXTENT - 1)) || !ext_at(obj, k) ||
	    (off < end && k >= off >> KV_EXTENT_SHIFT && k << KV_EXTENT_SHIFT < end))
		return UINT64_MAX;
	return k;
}

/* What extent k's block adds to owe `want`: its own promise counts, a shared block's not. */
static uint64_t owe_add(const struct kv_xblk *b, uint64_t want)
{
	uint64_t have = 0;

	if (b && atomic_load_explicit(&b->xb_ref, memory_order_acquire) == 1)
		have = atomic_load(&b->xb_owed); /* its own block: changed in place */
	return want > have ? want - have : 0;
}

uint64_t kv_obj_owe_need(const struct kv_obj *obj, uint64_t old, uint64_t size, uint64_t off,
			 uint64_t end, uint64_t over, bool own)
{
	uint64_t need = own && !atomic_load(&obj->ko_owed) ? over : 0;
	uint64_t edge = owe_edge(obj, old, size, off, end);

	for (uint64_t k = off >> KV_EXTENT_SHIFT; off < end && k << KV_EXTENT_SHIFT < end; k++)
		need += owe_add(ext_at(obj, k), owe_of(k, size, over));
	if (edge != UINT64_MAX)
		need += owe_add(ext_at(obj, edge), owe_of(edge, size, over));
	return need;
}

/*
 * Gives extent k's block (present after the change) its promise, as
 * owe_add counted it: an own block's is raised to want, a block the change
 * left shared (nothing copied it) gets want more.
 */
static void owe_give(struct kv_obj *obj, uint64_t k, uint64_t want)
{
	struct kv_xblk *b = ext_at(obj, k);

	if (b && atomic_load_explicit(&b->xb_ref, memory_order_acquire) > 1)
		atomic_fetch_add(&b->xb_owed, want);
	else if (b && atomic_load(&b->xb_owed) < want)
		atomic_store(&b->xb_owed, want);
}

void kv_obj_owe_set(struct kv_obj *obj, uint64_t old, uint64_t off, uint64_t end, uint64_t over,
		    bool own)
{
	uint64_t edge = owe_edge(obj, old, obj->ko_size, off, end);

	if (own && !atomic_load(&obj->ko_owed))
		atomic_store(&obj->ko_owed, over);
	for (uint64_t k = off >> KV_EXTENT_SHIFT; off < end && k << KV_EXTENT_SHIFT < end; k++)
		owe_give(obj, k, owe_of(k, obj->ko_size, over));
	if (edge != UINT64_MAX)
		owe_give(obj, edge, owe_of(edge, obj->ko_size, over));
}

uint64_t kv_obj_owed_take(struct kv_obj *obj, uint64_t k)
{
	struct kv_xblk *b;

	if (k == KV_OBJ_OWED_OWN)
		return atomic_exchange(&obj->ko_owed, 0);
	b = ext_at(obj, k);
	return b ? atomic_exchange(&b->xb_owed, 0) : 0;
}

void kv_obj_owed_give(struct kv_obj *obj, uint64_t k, uint64_t bytes)
{
	struct kv_xblk *b = k == KV_OBJ_OWED_OWN ? NULL : ext_at(obj, k);

	if (k == KV_OBJ_OWED_OWN)
		atomic_fetch_add(&obj->ko_owed, bytes);
	else if (b)
		atomic_fetch_add(&b->xb_owed, bytes);
	else /* the extent is a hole now: nobody will place its record */
		kv_pool_owed_release(obj->ko_pool, bytes);
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
		const struct kv_xblk *b = ext_at(obj, off >> KV_EXTENT_SHIFT);
		uint32_t in = (uint32_t)(off & (KV_EXTENT - 1));
		uint64_t m;

		if (b) {
			const struct kv_seg *s = &b->xb_seg[xblk_find(b, in)];
			uint64_t at = in - s->ks_off;

			m = s->ks_len - at < len ? s->ks_len - at : len;
			iov[n].iov_base = (char *)s->ks_addr + at;
		} else { /* a hole */
			m = KV_EXTENT - in < len ? KV_EXTENT - in : len;
			iov[n].iov_base = (char *)kv_obj_zeros() + in;
		}
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
	uint64_t n = 0, nx = (obj->ko_size + KV_EXTENT - 1) >> KV_EXTENT_SHIFT;

	for (uint64_t k = 0; k < nx; k++)
		n += k < obj->ko_nx && obj->ko_x[k] ? obj->ko_x[k]->xb_nseg : 1;
	return (uint32_t)n;
}

struct kv_xblk *kv_obj_hold_extent(struct kv_obj *obj, uint64_t k)
{
	struct kv_xblk *b = ext_at(obj, k);

	if (b)
		atomic_fetch_add_explicit(&b->xb_ref, 1, memory_order_relaxed);
	return b;
}

void kv_obj_release_extent(struct kv_obj *obj, struct kv_xblk *b)
{
	xblk_put(obj->ko_pool, b);
}

bool kv_obj_extent_is(const struct kv_obj *obj, uint64_t k, const struct kv_xblk *b)
{
	return b && ext_at(obj, k) == b;
}

int kv_obj_adopt_extent(struct kv_obj *obj, const struct kv_obj *src, uint64_t k)
{
	struct kv_xblk *b = ext_at(src, k);
	int err;

	if (!b || ext_at(obj, k) || ext_base(k) >= obj->ko_size)
		return -EINVAL;
	err = obj_slots(obj, k + 1);
	if (err)
		return err;
	atomic_fetch_add_explicit(&b->xb_ref, 1, memory_order_relaxed);
	obj->ko_x[k] = b;
	obj->ko_cap += b->xb_cap;
	return 0;
}

void kv_obj_drop_extent(struct kv_obj *obj, uint64_t k)
{
	if (!ext_at(obj, k))
		return;
	ext_drop(obj, k);
	obj_trim(obj);
}

uint64_t kv_obj_extent_rec(const struct kv_obj *obj, uint64_t k)
{
	const struct kv_xblk *b = ext_at(obj, k);

	return b ? atomic_load_explicit(&b->xb_rec, memory_order_relaxed) : 0;
}

void kv_obj_tag_extent(const struct kv_obj *obj, uint64_t k, uint64_t seq)
{
	struct kv_xblk *b = ext_at(obj, k);

	if (b)
		atomic_store_explicit(&b->xb_rec, seq, memory_order_relaxed);
}

bool kv_obj_has_data(const struct kv_obj *obj, uint64_t k)
{
	return ext_at(obj, k) != NULL;
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
