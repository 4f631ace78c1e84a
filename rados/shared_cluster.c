/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_cluster.c — talking to the cluster, the bottom of the
 * shared tier: the connection and its users (FUSE threads count themselves
 * in so that the thread can replace a connection that stopped answering),
 * every cluster operation counted (latency, errors, timeouts, the
 * "healthy" flag and its log lines), and a key's directory entry: where it
 * lives (its parent's d.* object), whether it is sound, reading it. Calls
 * only rados/rados.h.
 */
#include "rados/shared_int.h"

/* Set while a thread changes the local store for the cluster: the hooks ignore it. */
_Thread_local bool kv_sh_quiet;

bool kv_shared_built(void)
{
	return kv_rados_built();
}

/* The connection, counted in, once there; NULL before. Pair with kv_sh_conn_put. */
struct conn *kv_sh_conn_get(struct kv_shared *sh)
{
	struct conn *c;

	pthread_mutex_lock(&sh->sh_lock);
	c = sh->sh_state == KV_SHARED_CONNECTED ? sh->sh_conn : NULL;
	if (c)
		atomic_fetch_add(&c->c_users, 1);
	pthread_mutex_unlock(&sh->sh_lock);
	return c;
}

void kv_sh_conn_put(struct conn *c)
{
	if (c)
		atomic_fetch_sub(&c->c_users, 1);
}

/* Wraps r; NULL (r closed) without memory. */
struct conn *kv_sh_conn_new(struct kv_rados *r)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (c)
		c->c_r = r;
	else
		kv_rados_close(r);
	return c;
}

/*
 * Takes the retired connections nobody uses any more (all: every one) off
 * sh_retired (sh_lock held, or no other thread left) and returns them, for
 * kv_sh_conn_close_all once the lock is dropped: closing one shuts a librados
 * client down, which never happens under sh_lock.
 */
struct conn *kv_sh_conn_idle(struct kv_shared *sh, bool all)
{
	struct conn *idle = NULL;

	for (struct conn **p = &sh->sh_retired; *p;) {
		struct conn *c = *p;

		if (!all && atomic_load(&c->c_users)) {
			p = &c->c_next;
			continue;
		}
		*p = c->c_next;
		c->c_next = idle;
		idle = c;
	}
	return idle;
}

void kv_sh_conn_close_all(struct conn *c)
{
	while (c) {
		struct conn *next = c->c_next;

		kv_rados_close(c->c_r);
		free(c);
		c = next;
	}
}

/* A failure that may pass: the change is kept and tried again. */
bool kv_sh_transient(int err)
{
	return err == -ETIMEDOUT || err == -ENOTCONN || err == -ESHUTDOWN || err == -ECONNREFUSED ||
	       err == -ENOSPC || err == -EAGAIN || err == -ENOMEM;
}

/*
 * Counts a cluster operation that started at t0 and ended with err: its
 * latency, and a timeout or error (told once per run of failures, the
 * first time, on stderr). Returns err.
 */
int kv_sh_counted(struct kv_shared *sh, uint64_t t0, int err, const char *what)
{
	kv_hist_record(&sh->sh_lat, kv_now_ns() - t0);
	if (err >= 0 || err == -ENOENT || err == -ECANCELED) {
		if (!atomic_exchange(&sh->sh_healthy, true))
			fprintf(stderr, "kvfs: rados: pool '%s' answers again\n", sh->sh_pool);
		return err;
	}
	if (err == -ETIMEDOUT)
		atomic_fetch_add(&sh->sh_timeouts, 1);
	else
		atomic_fetch_add(&sh->sh_errors, 1);
	pthread_mutex_lock(&sh->sh_lock);
	sh->sh_last_err = err;
	snprintf(sh->sh_last_text, sizeof(sh->sh_last_text), "%s: %s", what, strerror(-err));
	pthread_mutex_unlock(&sh->sh_lock);
	if (kv_sh_transient(err) && atomic_exchange(&sh->sh_healthy, false)) {
		/* the thread probes while nothing else is to be sent */
		pthread_mutex_lock(&sh->sh_lock);
		pthread_cond_broadcast(&sh->sh_cond);
		pthread_mutex_unlock(&sh->sh_lock);
		fprintf(stderr,
			"kvfs: rados: pool '%s' does not answer (%s: %s): local keys are "
			"served, changes wait\n",
			sh->sh_pool, what, strerror(-err));
	}
	return err;
}

void kv_sh_dir_oid_of(char *oid, const char *path)
{
	kv_rados_dir_oid(oid, path, strlen(path));
}

/* Splits "/a/b" into its parent ("/a", malloc'ed) and its last name (in path). */
char *kv_sh_parent_of(const char *path, const char **name)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	char *p = strndup(path, n);

	*name = slash + 1;
	return p;
}

/*
 * Where the entry of path lives: sets *name to its last name and doid to its
 * parent's object; returns the parent's path (malloc'ed; NULL: no memory).
 */
char *kv_sh_entry_place(const char *path, const char **name, char *doid)
{
	char *pp = kv_sh_parent_of(path, name);

	if (pp)
		kv_sh_dir_oid_of(doid, pp);
	return pp;
}

/* Whether an entry (len bytes) is well formed; a damaged one is counted and told. */
bool kv_sh_entry_ok(struct kv_shared *sh, const char *doid, const char *name,
		    const struct kv_rdent *e, size_t len)
{
	if (len >= sizeof(*e) && e->re_magic == KV_RDENT_MAGIC && e->re_format == KV_RDENT_FORMAT &&
	    (e->re_type != KV_RDENT_SYMLINK ||
	     (e->re_size && e->re_size <= KV_SYMLINK_MAX && len == sizeof(*e) + e->re_size &&
	      !memchr(e + 1, '\0', e->re_size))) &&
	    (e->re_type != KV_RDENT_FILE ||
	     (e->re_extent && e->re_nobj <= KV_RDENT_MAX_OBJ &&
	      len == sizeof(*e) + 8ull * e->re_nobj &&
	      e->re_nobj == (e->re_size + e->re_extent - 1) / e->re_extent)))
		return true;
	fprintf(stderr, "kvfs: rados: entry '%s' in %s is damaged: ignored\n", name, doid);
	atomic_fetch_add(&sh->sh_errors, 1);
	return false;
}

/* Reads and checks an entry; the sums (FILE) follow the header in *ent. */
int kv_sh_entry_get(struct kv_shared *sh, struct kv_rados *r, const char *doid, const char *name,
		    struct kv_rdent **ent, size_t *len)
{
	uint64_t t0 = kv_now_ns();
	void *v = NULL;
	int err = kv_sh_counted(sh, t0, kv_rados_omap_get(r, doid, name, &v, len), "read entry");
	const struct kv_rdent *e = v;

	if (err)
		return err;
	if (!kv_sh_entry_ok(sh, doid, name, e, *len)) {
		free(v);
		return -EIO;
	}
	*ent = v;
	return 0;
}

bool kv_sh_same_version(const struct kv_rdent *a, uint64_t node, uint64_t seq)
{
	return a->re_type == KV_RDENT_FILE && a->re_node == node && a->re_seq == seq;
}

/* Removes the data objects of a FILE entry, best effort (--rados-gc takes what is left). */
void kv_sh_remove_objects(struct kv_shared *sh, struct kv_rados *r, const struct kv_rdent *e)
{
	char oid[KV_RADOS_OID_MAX];

	if (e->re_type != KV_RDENT_FILE)
		return;
	for (uint32_t i = 0; i < e->re_nobj; i++) {
		uint64_t t0 = kv_now_ns();

		kv_rados_data_oid(oid, e->re_node, e->re_seq, i);
		kv_sh_counted(sh, t0, kv_rados_remove(r, oid),
			      "remove"); /* a failure: --rados-gc */
	}
}

/* Bytes of data object i of e, and how many objects of e a batch from first takes. */
size_t kv_sh_object_len(const struct kv_rdent *e, uint64_t i)
{
	uint64_t off = i * e->re_extent;

	return e->re_size - off < e->re_extent ? e->re_size - off : e->re_extent;
}

unsigned kv_sh_batch_of(const struct kv_rdent *e, uint64_t first)
{
	return e->re_nobj - first < IO_BATCH ? (unsigned)(e->re_nobj - first) : IO_BATCH;
}

/* The credentials a key from the cluster is made with. */
struct kv_cred kv_sh_cred_of(const struct kv_rdent *e)
{
	return (struct kv_cred){.kc_uid = e->re_uid, .kc_gid = e->re_gid};
}
