/* SPDX-License-Identifier: MIT */
/*
 * fs/ioctl.h — the checks fs/ioctl.c makes of every ioctl struct before it
 * acts on one, exposed so that unit tests can drive them directly. Each is
 * a pure function of the struct (and, for a key's memory, of the region
 * table, between kv_region_begin and kv_region_end). Every one returns 0 or
 * the -errno include/kvfs/kvfs_ioctl.h documents for the case.
 */
#ifndef KVFS_FS_IOCTL_H
#define KVFS_FS_IOCTL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/stats.h"
#include "gpu/region.h"
#include "kvfs/kvfs_ioctl.h"

/* A kvfs command this daemon serves (any other is -ENOTTY). */
bool kv_ioc_known(unsigned int cmd);

/* The batch kind of KVFS_IOC_LOOKUP/PUT/GET/REMOVE. */
enum kv_ioc_kind kv_ioc_kind_of(unsigned int cmd);

/* Every struct's header: ih_size must be _IOC_SIZE(cmd) (-EINVAL), ih_version the ABI's (-EPROTO).
 */
int kv_ioc_hdr_check(unsigned int cmd, const struct kvfs_ioc_hdr *h);

/* A region registration: kind known, the fields its kind does not read zero, name terminated. */
int kv_ioc_region_check(const struct kvfs_ioc_region *rg);

/* A layout registration: 1..KVFS_LAYOUT_MAX_SEGS segments, out fields and unused segments zero. */
int kv_ioc_layout_check(const struct kvfs_ioc_layout *ly);

/* A batch as a whole: 1.. keys whose array fits bt_data (-E2BIG), flags its kind takes. */
int kv_ioc_batch_check(enum kv_ioc_kind kind, const struct kvfs_ioc_batch *bt);

/* True when [off, off + len) lies in bt_data, after the array of nkeys keys. */
bool kv_ioc_in_data(uint32_t nkeys, uint64_t off, uint64_t len);

/*
 * Resolves key k's memory for process tgid: its layout's block, or its
 * explicit ranges (in bt_data, 8-aligned, each checked against its region).
 * Fills sp (room for KVFS_LAYOUT_MAX_SEGS), sets *n and *len. -EINVAL,
 * -EBADF, -EPERM, -EFAULT.
 */
int kv_ioc_key_mem(struct kv_region_table *t, pid_t tgid, const struct kvfs_ioc_batch *bt,
		   const struct kvfs_ioc_key *k, struct kv_span *sp, int *n, uint64_t *len);

#endif
