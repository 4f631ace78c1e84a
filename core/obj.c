/* SPDX-License-Identifier: MIT */
#include "core/obj.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_UP(x) (((x) + KV_PAGE_SIZE - 1) & ~(uint64_t)(KV_PAGE_SIZE - 1))

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

/* Frees every byte of capacity at or past `keep` (a multiple of a page). */
static void obj_shrink_cap(struct kv_obj *obj, uint64_t keep)
{
	while (obj->ko_next > 0) {
		struct kv_extent *e = &obj->ko_ext[obj->ko_next - 1];

		if (e->ke_off >= keep) {
			kv_pool_free(obj->ko_pool, e->ke_addr, e->ke_len);
			obj->ko_cap -= e->ke_len;
			obj->ko_next--;
			continue;
		}
		if (e->ke_off + e->ke_len > keep) {
			uint32_t cut = (uint32_t)(e->ke_off + e->ke_len - keep);

			kv_pool_free(obj->ko_pool, (char *)e->ke_addr + (e->ke_len - cut), cut);
			e->ke_len -= cut;
			obj->ko_cap -= cut;
		}
		break;
	}
}

void kv_obj_put(struct kv_obj *obj)
{
	if (atomic_fetch_sub_explicit(&obj->ko_ref, 1, memory_order_acq_rel) != 1)
		return;
	obj_shrink_cap(obj, 0);
	free(obj->ko_ext);
	free(obj);
}

static int obj_push_extent(struct kv_obj *obj, void *addr, uint32_t len)
{
	if (obj->ko_next == obj->ko_maxext) {
		uint32_t n = obj->ko_maxext ? obj->ko_maxext * 2 : 4;
		struct kv_extent *ext = realloc(obj->ko_ext, n * sizeof(*ext));

		if (!ext)
			return -ENOMEM;
		obj->ko_ext = ext;
		obj->ko_maxext = n;
	}
	obj->ko_ext[obj->ko_next++] = (struct kv_extent){
	    .ke_off = obj->ko_cap,
	    .ke_addr = addr,
	    .ke_len = len,
	};
	obj->ko_cap += len;
	return 0;
}

/* The smallest power of two >= x, for 2 <= x <= 2^63. */
static uint64_t pow2_up(uint64_t x)
{
	return 1ull << (64 - __builtin_clzll(x - 1));
}

/*
 * Grows the capacity to at least `want` bytes. The next extent is as large
 * as what is missing, but at least half the current capacity (geometric
 * growth for files written in small pieces) and at most a pool block; when
 * the pool has no block that large, smaller ones are taken. On -ENOSPC the
 * capacity is left where it was.
 */
static int obj_grow(struct kv_obj *obj, uint64_t want)
{
	uint64_t old_cap = obj->ko_cap;
	int err;

	want = PAGE_UP(want);
	while (obj->ko_cap < want) {
		uint64_t missing = want - obj->ko_cap;
		uint64_t len = missing > obj->ko_cap / 2 ? missing : obj->ko_cap / 2;
		void *addr;

		len = len >= KV_POOL_MAX_BLOCK ? KV_POOL_MAX_BLOCK : pow2_up(PAGE_UP(len));
		for (;;) {
			err = kv_pool_alloc(obj->ko_pool, len, &addr);
			if (err != -ENOSPC || len == KV_PAGE_SIZE)
				break;
			len /= 2;
		}
		if (err)
			goto out_undo;
		err = obj_push_extent(obj, addr, (uint32_t)len);
		if (err) {
			kv_pool_free(obj->ko_pool, addr, len);
			goto out_undo;
		}
	}
	return 0;

out_undo:
	obj_shrink_cap(obj, old_cap);
	return err;
}

/* Index of the extent holding logical offset off (off < ko_cap). */
static uint32_t obj_find(const struct kv_obj *obj, uint64_t off)
{
	uint32_t lo = 0, hi = obj->ko_next - 1;

	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2;

		if (obj->ko_ext[mid].ke_off <= off)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Copies len bytes into the object at off; the capacity must cover them. */
static void obj_copy_in(struct kv_obj *obj, uint64_t off, const void *buf, uint64_t len)
{
	uint32_t i = len ? obj_find(obj, off) : 0;

	while (len) {
		const struct kv_extent *e = &obj->ko_ext[i++];
		uint64_t in = off - e->ke_off;
		uint64_t n = e->ke_len - in < len ? e->ke_len - in : len;

		if (buf) {
			memcpy((char *)e->ke_addr + in, buf, n);
			buf = (const char *)buf + n;
		} else {
			memset((char *)e->ke_addr + in, 0, n);
		}
		off += n;
		len -= n;
	}
}

int kv_obj_write(struct kv_obj *obj, uint64_t off, const void *buf, size_t len)
{
	uint64_t end = off + len;
	int err;

	if (end < off)
		return -EFBIG;
	if (end > obj->ko_cap) {
		err = obj_grow(obj, end);
		if (err) {
			obj_shrink_cap(obj, PAGE_UP(obj->ko_size));
			return err;
		}
	}
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
	if (size > obj->ko_cap) {
		err = obj_grow(obj, size);
		if (err)
			return err;
	}
	obj_copy_in(obj, obj->ko_size, NULL, size - obj->ko_size);
	obj->ko_size = size;
	return 0;
}

int kv_obj_reserve(struct kv_obj *obj, uint64_t len, bool keep_size)
{
	int err;

	if (len > obj->ko_cap) {
		err = obj_grow(obj, len);
		if (err)
			return err;
	}
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
	uint64_t done = 0;
	int err;

	if (len > src->ko_size)
		len = src->ko_size;
	err = kv_obj_new(src->ko_pool, &obj);
	if (err)
		return err;
	err = obj_grow(obj, len);
	if (err)
		goto out_put;
	for (uint32_t i = 0; done < len; i++) {
		const struct kv_extent *e = &src->ko_ext[i];
		uint64_t n = len - done < e->ke_len ? len - done : e->ke_len;

		obj_copy_in(obj, done, e->ke_addr, n);
		done += n;
	}
	obj->ko_size = len;
	*out = obj;
	return 0;

out_put:
	kv_obj_put(obj);
	return err;
}

int kv_obj_iov(const struct kv_obj *obj, uint64_t off, uint64_t len, struct iovec *iov, int maxiov,
	       uint64_t *bytes)
{
	uint32_t i;
	int n = 0;

	*bytes = 0;
	if (off >= obj->ko_size || len == 0)
		return 0;
	if (len > obj->ko_size - off)
		len = obj->ko_size - off;
	for (i = obj_find(obj, off); len && n < maxiov; i++) {
		const struct kv_extent *e = &obj->ko_ext[i];
		uint64_t in = off - e->ke_off;
		uint64_t m = e->ke_len - in < len ? e->ke_len - in : len;

		iov[n].iov_base = (char *)e->ke_addr + in;
		iov[n].iov_len = m;
		n++;
		off += m;
		len -= m;
		*bytes += m;
	}
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
