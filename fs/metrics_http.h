/* SPDX-License-Identifier: MIT */
/*
 * fs/metrics_http.h — the HTTP endpoint of the daemon's figures:
 * `--metrics=ADDR:PORT` serves GET /metrics with libmicrohttpd
 * (fs/metrics_http.c). It knows nothing of what it serves: the rendering
 * (fs/metrics.h, kv_fs_metrics_render) is passed in when it starts, so
 * calls go one way, fs/metrics.c -> fs/metrics_http.c (only to ask whether
 * it was built). What a scrape locks is said in fs/metrics.h.
 */
#ifndef KVFS_FS_METRICS_HTTP_H
#define KVFS_FS_METRICS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct kv_fs;

/* The Content-Type of the rendering (the text exposition format, 0.0.4). */
#define KV_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
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
 * Renders the figures of fs into a malloc'ed buffer the caller frees, as
 * kv_fs_metrics_render (fs/metrics.h) does: the server calls it on its own
 * threads for each scrape. Returns 0 or -errno (the scrape gets a 500).
 */
typedef int (*kv_fs_metrics_render_fn)(struct kv_fs *fs, char **buf, size_t *len);

/*
 * Starts serving fs's figures, as render makes them, at spec
 * (kv_fs_metrics_check's form); a NULL spec starts nothing and sets *out
 * to NULL. The listening socket is bound
 * before this returns, so a port in use fails here. Requests are served on
 * libmicrohttpd's threads until kv_fs_metrics_stop: stop it before fs's
 * store, shared tier or notifier go. On failure writes one line (without
 * "kvfs: " or a newline) to err. Returns 0, -ENOTSUP (built without
 * libmicrohttpd), or -errno of resolving, binding or starting.
 */
int kv_fs_metrics_start(struct kv_fs *fs, kv_fs_metrics_render_fn render, const char *spec,
			struct kv_fs_metrics **out, char *err, size_t err_len);

/* Stops the server and waits for its threads; a request in flight finishes first. NULL: no-op. */
void kv_fs_metrics_stop(struct kv_fs_metrics *m);

#endif
