/* SPDX-License-Identifier: MIT */
/*
 * ssd/fileio.h — whole-buffer reads and writes of small DATA_DIR files
 * (the shared tier's change log and known versions) and positioned ones
 * (buffered bucket and journal I/O), retried on EINTR and short transfers.
 */
#ifndef KVFS_SSD_FILEIO_H
#define KVFS_SSD_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes all len bytes of buf at fd's offset (its end with O_APPEND). Returns 0 or -errno. */
int kv_write_all(int fd, const void *buf, size_t len);

/*
 * Writes (write) or reads all len bytes of buf at offset off. Returns 0 or
 * -errno; -EIO when the file ends (a read) or takes nothing (a write).
 */
int kv_prw_all(int fd, bool write, void *buf, uint64_t len, uint64_t off);

/*
 * Reads the whole file of fd (as fstat sizes it) into *out, malloc'ed and
 * NUL-terminated, its length in *len. Returns 0 or -errno.
 */
int kv_read_whole(int fd, char **out, uint64_t *len);

/*
 * A DATA_DIR file kept for one owner (the shared tier's rados.log and
 * rados.known: for one pool and namespace) begins with this header, then
 * the pool and the namespace (no NULs). Little-endian.
 */
struct kv_file_head {
	uint64_t fh_magic;
	uint32_t fh_version;
	uint16_t fh_pool_len, fh_ns_len;
} __attribute__((packed));

/*
 * Builds that header, malloc'ed, in *head (*hlen bytes). Returns 0,
 * -EINVAL (a name over 1024 bytes) or -ENOMEM.
 */
int kv_file_head(uint64_t magic, uint32_t version, const char *pool, const char *ns, char **head,
		 size_t *hlen);

/*
 * Opens dirfd/name for appending (*fd; -1 when there is none) and reads it
 * whole into *buf (malloc'ed; NULL when none) and *len. Returns 0 or
 * -errno (nothing left open).
 */
int kv_file_load(int dirfd, const char *name, int *fd, char **buf, uint64_t *len);

/*
 * Makes dirfd/name anew (truncated), opened for appending, with head as
 * its first hlen bytes. The directory is not synced: a file kept under
 * this name needs that (fsync(dirfd)); a temporary one renamed over
 * another needs it after the rename instead. Returns the fd or -errno.
 */
int kv_file_create(int dirfd, const char *name, const char *head, size_t hlen);

#endif
