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

#endif
