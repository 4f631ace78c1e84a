/* SPDX-License-Identifier: MIT */
/*
 * fs/metrics.h — the daemon's figures for Prometheus.
 *
 * Two parts, one text. fs/metrics.c renders every figure MNT/.kvfs/stats
 * has in the Prometheus text exposition format, version 0.0.4; both
 * MNT/.kvfs/metrics (for node_exporter's textfile collector) and the HTTP
 * endpoint serve that one rendering. fs/metrics_http.c (fs/metrics_http.h)
 * is the endpoint: `--metrics=ADDR:PORT` serves GET /metrics with
 * libmicrohttpd, on its own threads. It sits below this file: it is handed
 * kv_fs_metrics_render when it starts (fs/main.c) and never calls up here;
 * this file asks it only whether it was built (kv_fs_metrics_built).
 *
 * Names follow Prometheus' conventions: a kvfs_ prefix, base units
 * (_bytes, _seconds), counters end in _total, and what differs only by
 * kind is a label (op, path, tier, stage, errno, result, ...), not a name
 * of its own. Latencies are histograms (_bucket{le=...}, _sum, _count)
 * made from the log-scale histograms core/stats.h keeps: their `le` bounds
 * are bucket edges of those (two per power of two, 1 us to 34 s), so each
 * cumulative count is exact, not interpolated. The families are listed in
 * README.md, "Metrics".
 *
 * Cost to the FUSE requests: a rendering reads kv_stats' relaxed atomics
 * (no lock), and takes the same short locks MNT/.kvfs/stats takes, each
 * only while it copies a few counters: the tier's kt_lock (the offload
 * backlog, two fields) and the bucket set's bs_lock (used bytes and the
 * dead bytes of each bucket) in kv_store_usage, and the shared tier's own
 * copy in kv_shared_stats. Nothing is rendered under a lock.
 */
#ifndef KVFS_FS_METRICS_H
#define KVFS_FS_METRICS_H

#include <stdbool.h>
#include <stddef.h>

struct kv_fs;

/*
 * Renders the figures of fs into a malloc'ed buffer the caller frees
 * (*len bytes, newline-terminated, NUL after). Safe from any thread while
 * fs's store, shared tier and notifier live. Returns 0 or -ENOMEM.
 */
int kv_fs_metrics_render(struct kv_fs *fs, char **buf, size_t *len);

#endif
