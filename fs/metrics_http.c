/* SPDX-License-Identifier: MIT */
/*
 * fs/metrics_http.c — `--metrics=ADDR:PORT`: GET /metrics over HTTP, with
 * libmicrohttpd (fs/metrics_http.h).
 *
 * Protocol: GET or HEAD /metrics answers 200 with the rendering it was
 * started with (fs/metrics.c's kv_fs_metrics_render, passed in by fs/main.c)
 * (Content-Type text/plain; version=0.0.4); any other path 404; any other
 * method 405 with "Allow: GET, HEAD". A query string is ignored.
 *
 * Threads: libmicrohttpd's own, a pool of KM_THREADS each polling its
 * share of the connections (epoll where it has it) and rendering on the
 * spot: a scrape never runs on a FUSE worker, and what it locks is said
 * in fs/metrics.h. kv_fs_metrics_stop joins them (MHD_stop_daemon), so a
 * stopped server touches nothing of the daemon's any more.
 *
 * The listening socket is made here, not by libmicrohttpd, so that a port
 * in use is reported as such ("Address already in use"), and handed over
 * with MHD_OPTION_LISTEN_SOCKET: MHD_stop_daemon closes it.
 *
 * Built without libmicrohttpd (KVFS_METRICS_HTTP=OFF, or AUTO without it),
 * kv_fs_metrics_start refuses a spec with -ENOTSUP; MNT/.kvfs/metrics
 * works either way.
 */
#include "fs/metrics_http.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef KVFS_HAVE_MHD
#include <microhttpd.h>
#endif

#define KM_THREADS	  2  /* libmicrohttpd's pool: scrapes are rare and quick */
#define KM_IDLE_TIMEOUT	  10 /* seconds an idle connection is kept */
#define KM_LISTEN_BACKLOG 256

/*
 * Splits spec into host (may be empty: every address) and port. Returns 0
 * or -EINVAL.
 */
static int split_spec(const char *spec, char *host, size_t host_len, char *port, size_t port_len)
{
	const char *colon, *h = spec, *hend;
	char *end;
	unsigned long p;

	if (*spec == '[') {
		h = spec + 1;
		hend = strchr(h, ']');
		if (!hend || hend[1] != ':')
			return -EINVAL;
		colon = hend + 1;
	} else {
		colon = strrchr(spec, ':');
		if (!colon)
			return -EINVAL;
		hend = colon;
		if (memchr(spec, ':', (size_t)(colon - spec))) /* IPv6 wants brackets */
			return -EINVAL;
	}
	if ((size_t)(hend - h) >= host_len || strlen(colon + 1) >= port_len)
		return -EINVAL;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || colon[1] < '0' || colon[1] > '9' || p < 1 ||
	    p > 65535)
		return -EINVAL;
	memcpy(host, h, (size_t)(hend - h));
	host[hend - h] = '\0';
	snprintf(port, port_len, "%lu", p);
	return 0;
}

int kv_fs_metrics_check(const char *spec)
{
	char host[256], port[8];

	return split_spec(spec, host, sizeof(host), port, sizeof(port));
}

#ifdef KVFS_HAVE_MHD

/*
 * A socket listening at spec. Returns it, or -errno with the reason in err:
 * of the resolution, or of the first address that could not be bound.
 */
static int listen_at(const char *spec, char *err, size_t err_len)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	char host[256], port[8];
	int fd = -1, rc, first = 0, one = 1;

	if (split_spec(spec, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, err_len, "--metrics=%s: not ADDR:PORT", spec);
		return -EINVAL;
	}
	rc = getaddrinfo(*host ? host : NULL, port, &hints, &res);
	if (rc) {
		snprintf(err, err_len, "--metrics=%s: cannot resolve '%s': %s", spec, host,
			 gai_strerror(rc));
		return rc == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			first = first ? first : -errno;
			continue;
		}
		/* a restart may rebind at once despite connections in TIME_WAIT */
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
		    bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, KM_LISTEN_BACKLOG) == 0)
			break;
		first = first ? first : -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd >= 0)
		return fd;
	first = first ? first : -EADDRNOTAVAIL;
	snprintf(err, err_len, "--metrics=%s: cannot listen on port %s: %s", spec, port,
		 strerror(-first));
	return first;
}

struct kv_fs_metrics {
	struct MHD_Daemon *km_daemon;
	struct kv_fs *km_fs;		   /* immutable; outlives the daemon (fs/metrics.h) */
	kv_fs_metrics_render_fn km_render; /* immutable: makes the text of a scrape */
};

bool kv_fs_metrics_built(void)
{
	return true;
}

/* Queues a short text answer with status code. */
static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned int code, const char *text,
				  bool allow)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain") == MHD_NO ||
	    (allow && MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD") == MHD_NO)) {
		MHD_destroy_response(r);
		return MHD_NO;
	}
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

/*
 * libmicrohttpd's access handler, called on its threads once the request's
 * headers are in. Every answer is queued at the first call: no request
 * served here has a body, and one that brings a body gets its 405 without
 * it being read (libmicrohttpd then closes the connection).
 */
static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **con_cls)
{
	struct kv_fs_metrics *m = cls;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char *buf;
	size_t len;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)con_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", true);
	if (strcmp(url, "/metrics"))
		return reply_text(c, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n",
				  false);
	if (m->km_render(m->km_fs, &buf, &len))
		return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", false);
	r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(buf);
		return MHD_NO;
	}
	if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, KV_METRICS_CONTENT_TYPE) ==
	    MHD_NO) {
		MHD_destroy_response(r);
		return MHD_NO;
	}
	ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

int kv_fs_metrics_start(struct kv_fs *fs, kv_fs_metrics_render_fn render, const char *spec,
			struct kv_fs_metrics **out, char *err, size_t err_len)
{
	struct kv_fs_metrics *m;
	int fd;

	*out = NULL;
	if (!spec)
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, err_len, "--metrics=%s: out of memory", spec);
		return -ENOMEM;
	}
	m->km_fs = fs;
	m->km_render = render;
	fd = listen_at(spec, err, err_len);
	if (fd < 0) {
		free(m);
		return fd;
	}
	m->km_daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, NULL,
					NULL, answer, m, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
					MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)KM_THREADS,
					MHD_OPTION_CONNECTION_TIMEOUT,
					(unsigned int)KM_IDLE_TIMEOUT, MHD_OPTION_END);
	if (!m->km_daemon) {
		/* whether libmicrohttpd closed fd is not said: left open, the daemon stops anyway
		 */
		snprintf(err, err_len, "--metrics=%s: libmicrohttpd could not start its threads",
			 spec);
		free(m);
		return -EIO;
	}
	*out = m;
	return 0;
}

void kv_fs_metrics_stop(struct kv_fs_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->km_daemon);
	free(m);
}

#else /* !KVFS_HAVE_MHD */

struct kv_fs_metrics {
	int km_unused;
};

bool kv_fs_metrics_built(void)
{
	return false;
}

int kv_fs_metrics_start(struct kv_fs *fs, kv_fs_metrics_render_fn render, const char *spec,
			struct kv_fs_metrics **out, char *err, size_t err_len)
{
	(void)fs;
	(void)render;
	*out = NULL;
	if (!spec)
		return 0;
	snprintf(err, err_len,
		 "--metrics=%s: this kvfs was built without libmicrohttpd (install "
		 "libmicrohttpd-dev and rebuild; MNT/.kvfs/metrics has the same text)",
		 spec);
	return -ENOTSUP;
}

void kv_fs_metrics_stop(struct kv_fs_metrics *m)
{
	(void)m;
}

#endif
