/* SPDX-License-Identifier: MIT */
/*
 * rados/rados_format.h — the shared tier's data model in RADOS (issue 10).
 *
 * Every kvfs mount started with the same --rados-pool and --rados-namespace
 * shares one namespace of keys, kept in that pool and namespace as two
 * kinds of objects. All names are ASCII; numbers are lower-case hex of
 * fixed width. Integers are little-endian, as in ssd/format.h.
 *
 *   d.<H>                    a directory: H = XXH3-128 of its path ("/" for
 *                            the root, "/a/b" below it; 32 hex digits).
 *                            Its omap maps each child's name to a struct
 *                            kv_rdent. Its xattr "kvfs.path" holds the path
 *                            (for people and --rados-gc; never read by the
 *                            data path).
 *
 *   x.<node>.<seq>.<i>       object i (8 hex digits) of the version born
 *                            (node, seq) (16 hex digits each): bytes
 *                            [i * re_extent, min((i + 1) * re_extent,
 *                            re_size)) of the value, written whole once,
 *                            never changed. A version's objects never
 *                            collide with another's: node is the writing
 *                            daemon's random 64-bit id (DATA_DIR/node, or
 *                            new at each start without a data directory),
 *                            seq its own sequence number of the value.
 *
 *   d.<H of "/">  omap:  "model" -> kv_rdent{DIR}
 *   d.<H of "/model"> omap:  "blk0" -> kv_rdent{FILE, size 2 MiB,
 *                                       version (n, s), 1 object, sums[1]}
 *   x.<n>.<s>.00000000       the 2 MiB of blk0
 *
 * A 2 MiB KV block is one data object and one omap entry: one data write
 * and one compare-and-set per put.
 *
 * Protocols (publish and delete: rados/shared_publish.c; read:
 *   rados/shared_fetch.c):
 *   publish  write every x.* object of the version (LIBRADOS_OPERATION_
 *            FULL_TRY: a full cluster answers -ENOSPC, not a hang), then ONE
 *            write op on the parent d.* object: create (idempotent) +
 *            omap_cmp(name == the entry bytes last read, empty for none) +
 *            omap_set(name, entry). Another node sees the key only once it
 *            is complete, and a put replaces the key everywhere at once, as
 *            a rename would. -ECANCELED: the entry changed meanwhile: read
 *            it again; the newer by (mtime, node) wins.
 *   delete   the same compare-and-set removing the entry first (the shared
 *            namespace forgets the key at once), then the version's
 *            objects, best effort: --rados-gc removes what is left.
 *   read     read the entry, then the objects (several in flight), each
 *            checked against re_sum[i]; an object missing under a fresh
 *            entry means the version was replaced meanwhile: read the
 *            entry again.
 */
#ifndef KVFS_RADOS_RADOS_FORMAT_H
#define KVFS_RADOS_RADOS_FORMAT_H

#include <assert.h>
#include <stdint.h>

#define KV_RDENT_MAGIC	0x4552564bu /* "KVRE" */
#define KV_RDENT_FORMAT 1
#define KV_RADOS_EXTENT (2u << 20) /* bytes per data object */

enum kv_rdent_type {
	KV_RDENT_FILE = 1,
	KV_RDENT_DIR = 2,
	KV_RDENT_SYMLINK = 3,
};

/*
 * A directory entry, the value of a name in its parent's omap. A FILE is
 * followed by re_nobj XXH3-64 checksums (u64), one per data object; a
 * SYMLINK by its target (re_size bytes, no NUL); a DIR by nothing.
 */
struct kv_rdent {
	uint32_t re_magic;  /* KV_RDENT_MAGIC */
	uint16_t re_format; /* KV_RDENT_FORMAT */
	uint16_t re_type;   /* enum kv_rdent_type */
	uint32_t re_mode;   /* permission bits (07777) */
	uint32_t re_uid, re_gid;
	uint32_t re_extent; /* FILE: bytes per data object (KV_RADOS_EXTENT) */
	uint64_t re_size;   /* FILE: value bytes; SYMLINK: target bytes */
	int64_t re_mtime_ns;
	uint64_t re_node, re_seq; /* FILE: the version (its objects' names) */
	uint32_t re_nobj;	  /* FILE: ceil(re_size / re_extent) */
	uint32_t re_pad;	  /* 0 */
};
static_assert(sizeof(struct kv_rdent) == 64, "kv_rdent layout");

/* The longest entry: a FILE of KV_MAX_VALUE (16 TiB) has 8 Mi objects. */
#define KV_RDENT_MAX_OBJ (1u << 23)

#endif
