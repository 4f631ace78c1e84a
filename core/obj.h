/* SPDX-License-Identifier: MIT */
/*
 * core/obj.h — values: one version of one key's bytes in the DRAM pool.
 *
 * Extents (issue 9; README "Extents" has the whole design). A value is cut
 * into fixed-size extents of KV_EXTENT (2 MiB) bytes: extent k holds bytes
 * [k * KV_EXTENT, (k + 1) * KV_EXTENT). Each extent's memory is a struct
 * kv_xblk: a list of pool blocks (segments) and a reference count, so
 * versions share the extents they have in common. An object is its size
 * and the array of its extents' blocks, extent k at ko_x[k]. A hole — a
 * NULL slot, or any extent at or past ko_nx — has no memory and reads as
 * zeros (kv_obj_iov points at a read-only zero page run); a present
 * extent has memory for all of its bytes below the size. Writing into a
 * hole gives it memory; truncating up and fallocate (unwritten extents)
 * give none; kv_obj_punch makes holes. ko_nx is 0 or its last slot is
 * present.

 * Lifecycle, two states:
 *
 *   open    being written: its bytes, size and extents change. Whoever
 *           owns it (the inode: core/write.c) serialises every access
 *           with its own lock; the object has none.
 *   sealed  immutable: bytes, size and extents never change again, so any
 *           thread holding a reference may read it without a lock. A
 *           sealed object carries the sequence number of its put.
 *
 * Copy-on-write per extent. Writing to a sealed value means making a new
 * open object (kv_obj_clone) that shares every extent block of the old one
 * (a reference each, no copy), and swapping it in. A block with more than
 * one reference is immutable; the open object copies a shared block the
 * first time it changes it (write, zero-fill, growth), so a small write
 * into a large sealed value copies one extent, once per version. Readers
 * that still hold the old version keep reading it; a block goes back to
 * the pool with its last reference (kv_obj_cow_bytes counts the copies).
 *
 * Memory: an extent grows by blocks of geometrically increasing size (up
 * to KV_POOL_MAX_BLOCK), so sequential writes cost few allocations;
 * sealing trims the last extent's memory to the size rounded up to a page
 * (unless another version shares that block), so a stored value wastes
 * less than one page. Bytes between the old end and a new end (write past
 * the end, truncate up) read as zeros.
 */
#ifndef KVFS_CORE_OBJ_H
#define KVFS_CORE_OBJ_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/pool.h"

/* The extent size: the largest pool block. */
#define KV_EXTENT_SHIFT 21
#define KV_EXTENT	(1ull << KV_EXTENT_SHIFT)
static_assert(KV_EXTENT == KV_POOL_MAX_BLOCK, "an extent is at most one pool block");

/* The largest value, 16 TiB (extent indexes below 2^23): past it, EFBIG. */
#define KV_MAX_VALUE (1ull << 44)

/* One pool block of an extent's memory. */
struct kv_seg {
	void *ks_addr;	 /* pool memory, page aligned */
	uint32_t ks_off; /* offset of its first byte within the extent */
	uint32_t ks_len; /* bytes, a multiple of KV_PAGE_SIZE */
};

/*
 * One extent's memory, shared by the versions that hold it. With one
 * reference it belongs to that object (mutable while the object is open);
 * with more it is immutable.
 */
struct kv_xblk {
	_Atomic uint32_t xb_ref;
	_Atomic uint64_t xb_rec;     /* birth sequence number of an EXTENT record holding exactly
					these bytes (kv_obj_extent_rec), or 0: none known */
	_Atomic uint64_t xb_owed;    /* SSD quota promised to a record of these bytes, not yet
					placed (kv_obj_owe); given back when the block is freed */
	uint32_t xb_cap;	     /* bytes of memory: the sum of the segments, <= KV_EXTENT */
	uint32_t xb_nseg, xb_maxseg; /* segments in use / slots */
	struct kv_seg *xb_seg;	     /* in offset order within the extent */
};

struct kv_obj {
	_Atomic uint32_t ko_ref; /* references; the object is freed at 0 */
	bool ko_sealed;		 /* set once by kv_obj_seal, then immutable */
	bool ko_partial;	 /* sealed, and some extents with data are not in memory: their
				    bytes are only on the SSD (core/tier.c, "Residency"); set
				    and read under the owning inode's lock */
	uint64_t ko_seq;	 /* 0 while open; the put's sequence number once sealed */
	uint64_t ko_size;	 /* logical length in bytes */
	uint64_t ko_cap;	 /* bytes of memory: the sum of the present extents' xb_cap */
	uint32_t ko_nx;		 /* slots in use; extents at or past it are holes */
	uint32_t ko_maxx;	 /* slots in ko_x */
	struct kv_xblk **ko_x;	 /* extent k's memory at ko_x[k], NULL: a hole */
	struct kv_pool *ko_pool; /* immutable */
	_Atomic uint64_t ko_owed; /* SSD quota promised to its record that holds no extent's
				     bytes (an empty value's, or the manifest): kv_obj_owe_need */
};

/*
 * SSD quota owed to bytes not yet on the SSD (issue 25: nothing is
 * acknowledged that cannot be kept). A store with an SSD tier promises
 * each extent's record its room in the bucket set before a write or a put
 * changes the extent, and the promise travels with the extent's block: a
 * block with xb_owed holds that much quota, whichever version holds the
 * block when it is written. kv_obj_owe_need says what a change adds that
 * writes [off, end) and takes the size from old to size: per extent it
 * changes (those of [off, end), and the one whose tail the size change
 * rewrites, unless a hole) its bytes after the change rounded up to a
 * page, plus `over` for the record's head and bucket overhead, less what
 * its block has already if the object owns that block alone; and `over`
 * once, with own, for the object's record without extent bytes
 * (ko_owed). Every extent of [off, end) is taken to hold data after the
 * change (a change that makes holes names only the extents it keeps).
 * After the
 * change (obj->ko_size now the new size), kv_obj_owe_set gives them that
 * much. The offload takes a block's promise for its record
 * (kv_obj_owed_take) and gives back what it did not place
 * (kv_obj_owed_give). A block freed with quota still owed gives it back
 * through the pool's hook (kv_pool_set_owed_hook). The owner's lock
 * serialises the first two; the last two are atomic.
 */
uint64_t kv_obj_owe_need(const struct kv_obj *obj, uint64_t old, uint64_t size, uint64_t off,
			 uint64_t end, uint64_t over, bool own);
void kv_obj_owe_set(struct kv_obj *obj, uint64_t old, uint64_t off, uint64_t end, uint64_t over,
		    bool own);
uint64_t kv_obj_owed_take(struct kv_obj *obj, uint64_t k);
void kv_obj_owed_give(struct kv_obj *obj, uint64_t k, uint64_t bytes);
/* k == KV_OBJ_OWED_OWN names the object's own promise (ko_owed). */
#define KV_OBJ_OWED_OWN UINT64_MAX

/* Creates an empty open object with one reference. Returns 0 or -ENOMEM. */
int kv_obj_new(struct kv_pool *pool, struct kv_obj **out);

/* Takes a reference. */
void kv_obj_get(struct kv_obj *obj);

/* Drops a reference; the last one returns the memory to the pool. */
void kv_obj_put(struct kv_obj *obj);

/*
 * Creates a new open object holding the first min(len, src->ko_size) bytes
 * of src (the copy-on-write step): it shares src's extent blocks, copying
 * only an extent that len cuts short (up to the cut, so the memory past it
 * can go). src may be open or sealed; the caller keeps it stable (an open
 * src copies a block before changing it from then on, like the clone).
 * Returns 0, -ENOSPC when the pool is full, or -ENOMEM.
 */
int kv_obj_clone(struct kv_obj *src, uint64_t len, struct kv_obj **out);

/*
 * Writes len bytes at off into an open object, growing it (a gap between
 * the old end and off reads as zeros: whole extents of it stay holes),
 * first copying each shared extent it changes. Returns 0, -EFBIG past
 * KV_MAX_VALUE, -ENOMEM, or -ENOSPC when the pool cannot hold the extents
 * written or a copy: then the object is unchanged in size and bytes, and
 * its spare capacity is given back to the pool.
 */
int kv_obj_write(struct kv_obj *obj, uint64_t off, const void *buf, size_t len);

/*
 * Sets the size of an open object: shrinking frees the memory past the new
 * end (rounded up to a page); growing reads as zeros and takes memory only
 * to fill the extent of the old end. Returns 0, -EFBIG or -ENOSPC (object
 * unchanged).
 */
int kv_obj_truncate(struct kv_obj *obj, uint64_t size);

/*
 * fallocate mode 0: [0, len) becomes part of the value as unwritten bytes
 * (zeros, no memory until written). With keep_size nothing changes;
 * otherwise the size grows to len if smaller. Returns 0, -EFBIG or -ENOSPC
 * (object unchanged).
 */
int kv_obj_reserve(struct kv_obj *obj, uint64_t len, bool keep_size);

/*
 * fallocate(PUNCH_HOLE | KEEP_SIZE): bytes [off, off + len) ∩ [0, size)
 * read as zeros afterwards; the extents they cover whole become holes.
 * Returns 0 or -ENOSPC (a partly punched shared extent could not be
 * copied: object unchanged).
 */
int kv_obj_punch(struct kv_obj *obj, uint64_t off, uint64_t len);

/*
 * Gives hole k below the size memory for its bytes, not zeroed: the caller
 * overwrites every byte of it (through kv_obj_iov) before anyone else sees
 * the object. Returns 0, -EINVAL (not a hole below the size) or -ENOSPC.
 */
int kv_obj_materialize(struct kv_obj *obj, uint64_t k);

/*
 * Gives hole k below the size KV_EXTENT bytes of zeroed memory (past the
 * size too: appends into the extent need no more), taken from the pool's
 * reservations (kv_pool_alloc_reserved: the caller holds KV_EXTENT
 * promised, and they are used up). An unwritten extent of a store without
 * an SSD becomes written zeros this way, before a write into it
 * (core/resv.h). Returns 0, -EINVAL (not a hole below the size), -ENOSPC
 * (no blocks free) or -ENOMEM; then nothing is drawn.
 */
int kv_obj_fill_reserved(struct kv_obj *obj, uint64_t k);

/*
 * Takes a reference to extent k's block (NULL for a hole): the block is
 * then shared, so a change to the object copies it first and the held
 * bytes stay as they were. Give it back with kv_obj_release_extent.
 */
struct kv_xblk *kv_obj_hold_extent(struct kv_obj *obj, uint64_t k);
void kv_obj_release_extent(struct kv_obj *obj, struct kv_xblk *b);

/* True when extent k's block is still b (held: nobody changed the extent since). */
bool kv_obj_extent_is(const struct kv_obj *obj, uint64_t k, const struct kv_xblk *b);

/*
 * Makes hole k (below the size) of an open object share src's block of
 * extent k, as a clone would. Returns 0, -EINVAL (k not a hole, or src has
 * no block there) or -EFBIG/-ENOMEM.
 */
int kv_obj_adopt_extent(struct kv_obj *obj, const struct kv_obj *src, uint64_t k);

/*
 * Makes extent k a hole in memory, its bytes being kept elsewhere: a spill
 * of an open object, or the eviction of one extent of a sealed object that
 * nobody else holds (the caller then marks it ko_partial).
 */
void kv_obj_drop_extent(struct kv_obj *obj, uint64_t k);

/*
 * The SSD record an extent's bytes are known to be in. An extent block
 * written (or read back) as an EXTENT record is tagged with the record's
 * birth sequence number: its first kl_len bytes are the record's. Every
 * change to its bytes clears the tag (the block is then the object's own:
 * ext_prepare); cutting the extent shorter keeps it, the record is then
 * longer than the extent and not shared. A new version that still holds a
 * tagged block of the record's length shares the record instead of
 * writing the extent again (core/tier.c, "Shared records").
 * kv_obj_extent_rec returns extent k's tag, 0 for a hole or an untagged
 * block; kv_obj_tag_extent sets it (the bytes must be the record's).
 */
uint64_t kv_obj_extent_rec(const struct kv_obj *obj, uint64_t k);
void kv_obj_tag_extent(const struct kv_obj *obj, uint64_t k, uint64_t seq);

/* True when extent k has memory (is not a hole). */
bool kv_obj_has_data(const struct kv_obj *obj, uint64_t k);

/* KV_EXTENT zero bytes, page aligned, never to be written: what holes read as. */
const void *kv_obj_zeros(void);

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

/* How many iovecs kv_obj_iov needs to describe the whole object (a hole takes one per extent). */
uint32_t kv_obj_niov(const struct kv_obj *obj);

/* Bytes copied so far because a shared extent block was changed (all objects). */
uint64_t kv_obj_cow_bytes(void);

#endif
