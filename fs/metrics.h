/* SPDX-License-Identifier: MIT */
/*
 * fs/metrics.h — the daemon's figures for Prometheus.
 *
 * Two parts, one text. fs/metrics.c renders every figure MNT/.kvfs/stats
 * has in the Prometheus text exposition format, version 0.0.4; both
 * MNT/.kvfs/metrics (for node_exporter's textfile collector) and the HTTP
 * endpoint serve that one rendering. fs/metrics_http.c is the endpoint:
 * `--metrics=ADDR:PORT` serves GET /metrics with libmicrohttpd, on its own
 * threads.
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

/* The Content-Type of the rendering. */
#define KV_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/*
 * Renders the figures of fs into a malloc'ed buffer the caller frees
 * (*len bytes, newline-terminated, NUL after). Safe from any thread while
 * fs's store, shared tier and notifier live. Returns 0 or -ENOMEM.
 */
int kv_fs_metrics_render(struct kv_fs *fs, char **buf, size_t *len);

/* --- the HTTP endpoint (fs/metrics_http.c) --- */

struct kv_fs_metrics;

/* Whether this kvfs was built with libmicrohttpd (CMake KVFS_METRICS_HTTP). */
bool kv_fs_metrics_built(void);

/*
 * Checks an --metrics value: HOST:PORT, [IPV6]:PORT or :PORT (every
 * address), PORT 1..65535. HOST may be a name (resolved when the server
 * starts). Returns 0 or -EINVAL.
 */
int kv_fs_metrics_check(const char *spec);

/*
 * Starts serving fs's figures at spec (kv_fs_metrics_check's form); a NULL
 * spec starts nothing and sets *out to NULL. The listening socket is bound
 * before this returns, so a port in use fails here. Requests are served on
 * libmicrohttpd's threads until kv_fs_metrics_stop: stop it before fs's
 * store, shared tier or notifier go. On failure writes one line (without
 * "kvfs: " or a newline) to err. Returns 0, -ENOTSUP (built without
 * libmicrohttpd), or -errno of resolving, binding or starting.
 */
int kv_fs_metrics_start(struct kv_fs *fs, const char *spec, struct kv_fs_metrics **out, char *err,
			size_t err_len);

/* Stops the server and waits for its threads; a request in flight finishes first. NULL: no-op. */
void kv_fs_metrics_stop(struct kv_fs_metrics *m);

#endif
