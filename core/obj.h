/* SPDX-License-Identifier: MIT */
/*
 * core/obj.h — values: one version of one key's bytes in the DRAM pool.
 *
 * An object is a list of extents from the pool, in logical order. Its
 * lifecycle has two states:
 *
 *   open    being written: its bytes, size and extents change. Whoever
 *           owns it (the inode in core/store.c) serialises every access
 *           with its own lock; the object has none.
 *   sealed  immutable: bytes, size and extents never change again, so any
 *           thread holding a reference may read it without a lock. A
 *           sealed object carries the sequence number of its put.
 *
 * Writing to a sealed value means making a new open object (kv_obj_clone)
 * and swapping it in: copy-on-write. Readers that still hold the old one
 * keep reading it; its memory goes back to the pool at the last
 * kv_obj_put().
 *
 * Memory: an open object grows by extents of geometrically increasing size
 * (up to KV_POOL_MAX_BLOCK), so sequential writes cost few allocations;
 * sealing trims the capacity to the size rounded up to a page, so a stored
 * value wastes less than one page. Bytes between the old end and a new end
 * (write past the end, truncate up) read as zeros.
 */
#ifndef KVFS_CORE_OBJ_H
#define KVFS_CORE_OBJ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/pool.h"

struct kv_extent {
	uint64_t ke_off; /* logical offset of the extent's first byte */
	void *ke_addr;	 /* pool memory, page aligned */
	uint32_t ke_len; /* bytes, a multiple of KV_PAGE_SIZE */
};

struct kv_obj {
	_Atomic uint32_t ko_ref;  /* references; the object is freed at 0 */
	bool ko_sealed;		  /* set once by kv_obj_seal, then immutable */
	uint64_t ko_seq;	  /* 0 while open; the put's sequence number once sealed */
	uint64_t ko_size;	  /* logical length in bytes */
	uint64_t ko_cap;	  /* sum of extent lengths */
	uint32_t ko_next;	  /* extents in use */
	uint32_t ko_maxext;	  /* slots in ko_ext */
	struct kv_extent *ko_ext; /* ko_next extents, contiguous in logical offset */
	struct kv_pool *ko_pool;  /* immutable */
};

/* Creates an empty open object with one reference. Returns 0 or -ENOMEM. */
int kv_obj_new(struct kv_pool *pool, struct kv_obj **out);

/* Takes a reference. */
void kv_obj_get(struct kv_obj *obj);

/* Drops a reference; the last one returns the memory to the pool. */
void kv_obj_put(struct kv_obj *obj);

/*
 * Creates a new open object holding the first min(len, src->ko_size) bytes
 * of src (the copy-on-write step). src may be open or sealed; the caller
 * keeps it stable. Returns 0, -ENOSPC when the pool is full, or -ENOMEM.
 */
int kv_obj_clone(struct kv_obj *src, uint64_t len, struct kv_obj **out);

/*
 * Writes len bytes at off into an open object, growing it (and zeroing any
 * gap between the old end and off). Returns 0, or -ENOSPC when the pool
 * cannot hold the new end: then the object is unchanged in size and its
 * spare capacity is given back to the pool.
 */
int kv_obj_write(struct kv_obj *obj, uint64_t off, const void *buf, size_t len);

/*
 * Sets the size of an open object: shrinking frees the memory past the new
 * end (rounded up to a page); growing zero-fills. Returns 0 or -ENOSPC
 * (object unchanged).
 */
int kv_obj_truncate(struct kv_obj *obj, uint64_t size);

/*
 * Makes sure [0, len) is backed by memory (fallocate). With keep_size the
 * size is unchanged; otherwise it grows to len if smaller. Returns 0 or
 * -ENOSPC (object unchanged).
 */
int kv_obj_reserve(struct kv_obj *obj, uint64_t len, bool keep_size);

/*
 * Gives an empty open object len bytes of capacity and size len without
 * zeroing them: the caller overwrites every byte (through kv_obj_iov)
 * before anyone else sees the object. Returns 0, -EINVAL when the object
 * is not empty, or -ENOSPC (object unchanged).
 */
int kv_obj_alloc(struct kv_obj *obj, uint64_t len);

/* Trims the capacity to the size, records seq and makes the object immutable. */
void kv_obj_seal(struct kv_obj *obj, uint64_t seq);

/*
 * Describes [off, off + len) ∩ [0, size) as at most maxiov iovecs pointing
 * into the object's memory; stops early when maxiov runs out. Returns the
 * number of iovecs filled and sets *bytes to the bytes they cover.
 */
int kv_obj_iov(const struct kv_obj *obj, uint64_t off, uint64_t len, struct iovec *iov, int maxiov,
	       uint64_t *bytes);

/* Copies up to len bytes from off into buf. Returns the bytes copied. */
uint64_t kv_obj_read(const struct kv_obj *obj, uint64_t off, void *buf, uint64_t len);

#endif
