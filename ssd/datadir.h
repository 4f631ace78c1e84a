/* SPDX-License-Identifier: MIT */
/*
 * ssd/datadir.h — the data directory.
 *
 * DATA_DIR holds everything kvfs keeps on disk. It is created when missing
 * and locked for the life of the daemon with flock(2) on DATA_DIR/LOCK, so
 * a second kvfs on the same directory is refused while the first runs; the
 * lock file records the holder's pid for the message. The lock goes away
 * with the process, even after kill -9.
 */
#ifndef KVFS_SSD_DATADIR_H
#define KVFS_SSD_DATADIR_H

#include <stdint.h>
#include <sys/types.h>

struct kv_datadir {
	int kd_dirfd;  /* O_DIRECTORY fd of DATA_DIR */
	int kd_lockfd; /* DATA_DIR/LOCK, flock'ed exclusively */
};

/*
 * Creates DATA_DIR (and missing parents, mode 0700) if missing, opens and locks it.
 * Returns 0, -EBUSY when another process holds the lock (its pid, when
 * known, in *holder), or another -errno from mkdir/open.
 */
int kv_datadir_open(struct kv_datadir *dd, const char *path, pid_t *holder);

/*
 * The default SSD quota: 90% of the free space of DATA_DIR's filesystem,
 * plus what kvfs's bucket files already hold there (so a restart keeps its
 * data). Returns 0 or -errno.
 */
int kv_datadir_default_quota(const struct kv_datadir *dd, uint64_t *quota);

/*
 * This data directory's node id for the shared tier (rados/rados_format.h):
 * a random nonzero 64-bit number made at the first call and kept in
 * DATA_DIR/node (16 hex digits), written and synced before it is used.
 * Returns 0 or -errno.
 */
int kv_datadir_node(const struct kv_datadir *dd, uint64_t *node);

/* Releases the lock and closes the directory. */
void kv_datadir_close(struct kv_datadir *dd);

#endif
