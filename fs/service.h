/* SPDX-License-Identifier: MIT */
/*
 * fs/service.h — telling a service manager how the daemon is doing
 * (systemd's notification protocol, sd_notify from libsystemd).
 *
 * Under a unit of Type=notify (systemd/kvfs@.service), systemd passes the
 * socket in NOTIFY_SOCKET. The daemon says:
 *   STATUS=Recovering DATA_DIR: N s   every second while recovery runs;
 *   READY=1 and a STATUS= of what it serves, once the mount is live and
 *           recovery is done (the unit's start completes then);
 *   STATUS=Serving MNT: K keys, pool U/S MiB, SSD U/S MiB  every
 *           KV_SERVICE_STATUS_S seconds while it serves;
 *   STOPPING=1 once it is asked to stop, before it writes back and
 *           unmounts (and STATUS= saying so).
 * Without NOTIFY_SOCKET, or in a kvfs built without libsystemd, every call
 * here does nothing.
 */
#ifndef KVFS_FS_SERVICE_H
#define KVFS_FS_SERVICE_H

#include <stdbool.h>

struct kv_store;

#define KV_SERVICE_STATUS_S 5

/* True when this kvfs was built with libsystemd's sd_notify. */
bool kv_service_built(void);

/* Recovery of data_dir starts: STATUS= lines every second until ready. */
void kv_service_recovering(const char *data_dir);

/*
 * The mount at mnt is live over st: READY=1, then STATUS= lines of what
 * it serves until kv_service_stopping.
 */
void kv_service_ready(struct kv_store *st, const char *mnt);

/*
 * The daemon stops: STOPPING=1, and no more STATUS= lines about the
 * store (it may go right after). Safe without a ready.
 */
void kv_service_stopping(void);

#endif
