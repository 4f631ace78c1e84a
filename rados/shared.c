/* SPDX-License-Identifier: MIT */
/*
 * rados/shared.c — the shared tier's lifecycle (kv_shared_start and
 * kv_shared_stop) and the store's hooks (kh_sealed, kh_changed), which
 * turn each change of a named key into a change for the cluster's queue.
 * rados/shared.h is the tier's contract; the objects are drawn in
 * rados/rados_format.h.
 *
 * The tier's files, each one job, calls going down (no file calls one
 * above it; rados/shared_int.h holds what they share):
 *
 *   shared.c          start, stop, the hooks
 *   shared_thread.c   the thread: connects, probes, applies the queue
 *   shared_publish.c  applying a change to the cluster (the protocols)
 *   shared_sweep.c    the pool sweep (--rados-gc and the background one)
 *   shared_queue.c    the change queue, its log (DATA_DIR/rados.log) and
 *                     its replay at the start; kv_shared_sync, _persist
 *   shared_lookup.c   kv_shared_lookup and kv_shared_readdir: the local
 *                     store brought up to date with the cluster
 *   shared_fetch.c    values brought in: one key, and a batch's prefetch
 *   shared_dircache.c listings of directories, kept for the TTL
 *   shared_known.c    the known table (which local versions are copies)
 *   shared_cluster.c  connections, counted operations, directory entries
 *   shared_stats.c    the stats snapshot and its JSON
 *
 *   shared.c -> shared_thread.c -> shared_publish.c, shared_sweep.c,
 *   shared_queue.c; shared_lookup.c -> shared_fetch.c; then
 *   shared_dircache.c and shared_known.c; shared_cluster.c at the bottom,
 *   which calls only rados/rados.h. shared_stats.c calls none of them.
 *
 * Locks: as in rados/shared.h, "Locks". The hooks run under store locks
 * and take only sh_lock (in kv_sh_enqueue).
 */
#include "rados/shared_int.h"

const char *kv_shared_pool(const struct kv_shared *sh)
{
	return sh->sh_pool;
}

const char *kv_shared_namespace(const struct kv_shared *sh)
{
	return sh->sh_ns;
}

/* kh_sealed: a named file has a new sealed value. */
static void on_sealed(void *arg, struct kv_inode *ino, uint64_t seq, uint64_t size)
{
	struct kv_shared *sh = arg;
	struct change *ch;

	if (kv_sh_quiet)
		return;
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		atomic_fetch_add(&sh->sh_errors, 1); /* a lookup on this node still finds it */
		return;
	}
	ch->ch_kind = CH_PUT;
	kv_inode_get(ino);
	ch->ch_ino = ino;
	ch->ch_seq = seq;
	ch->ch_size = size;
	kv_sh_enqueue(sh, ch);
}

/* "/dir" + "/" + name, malloc'ed; NULL when dir has no path (or no memory). */
static char *path_in(struct kv_shared *sh, struct kv_inode *dir, const char *name)
{
	char *d = NULL, *p = NULL;

	if (kv_store_path_of(sh->sh_st, dir, &d))
		return NULL;
	if (asprintf(&p, "%s%s%s", d, strcmp(d, "/") ? "/" : "", name) < 0)
		p = NULL;
	free(d);
	return p;
}

/*
 * The cluster version the file ino is a clean copy of (fetched or
 * published; a version made here and not sent yet: the one it replaces),
 * in *node and *seq; *node 0: none known.
 */
static void copy_of(struct kv_shared *sh, struct kv_inode *ino, uint64_t *node, uint64_t *seq)
{
	struct kv_attr a;
	struct known k;

	*node = *seq = 0;
	kv_store_getattr(sh->sh_st, ino, &a);
	if (!S_ISREG(a.ka_mode))
		return;
	/* a version made here and not yet sent: the one its record describes, which it replaces */
	if ((a.ka_seq && kv_sh_known_of(sh, a.ka_ino, a.ka_seq, &k)) ||
	    kv_sh_known_get(sh, a.ka_ino, &k))
		if (k.kn_clean) {
			*node = k.kn_node;
			*seq = k.kn_rseq;
		}
}

/* kh_changed: the namespace changed through the store's API. */
static void on_changed(void *arg, enum kv_store_change what, struct kv_inode *dir, const char *name,
		       struct kv_inode *dir2, const char *name2)
{
	static const enum change_kind kinds[] = {[KV_CHANGE_MKDIR] = CH_MKDIR,
						 [KV_CHANGE_UNLINK] = CH_DEL,
						 [KV_CHANGE_RMDIR] = CH_RMDIR,
						 [KV_CHANGE_RENAME] = CH_RENAME,
						 [KV_CHANGE_SYMLINK] = CH_SYMLINK};
	struct kv_shared *sh = arg;
	struct change *ch;

	if (kv_sh_quiet || !strncmp(name, FETCH_PREFIX, strlen(FETCH_PREFIX)))
		return;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		goto fail;
	ch->ch_kind = kinds[what];
	ch->ch_mode = 0755;
	ch->ch_time_ns = realtime_ns();
	if (what == KV_CHANGE_UNLINK || what == KV_CHANGE_RENAME)
		ch->ch_mark = kv_store_last_seq(sh->sh_st);
	if (what == KV_CHANGE_RENAME) {
		struct kv_inode *moved;
		struct kv_attr a;

		atomic_fetch_add(&sh->sh_renames, 1);
		if (!kv_store_lookup(sh->sh_st, dir2, name2, &moved, &a)) {
			copy_of(sh, moved, &ch->ch_vnode, &ch->ch_vseq);
			kv_inode_put(moved);
		}
	}
	if (what == KV_CHANGE_UNLINK && dir2) /* dir2: the inode that lost the name */
		copy_of(sh, dir2, &ch->ch_vnode, &ch->ch_vseq);
	if (what == KV_CHANGE_MKDIR) { /* the hook may call the store: the mode it was made with */
		struct kv_inode *d;
		struct kv_attr a;

		if (!kv_store_lookup(sh->sh_st, dir, name, &d, &a)) {
			ch->ch_mode = a.ka_mode & 07777;
			kv_inode_put(d);
		}
	}
	if (what == KV_CHANGE_SYMLINK) { /* its target and owner */
		struct kv_attr a;
		const char *target;

		if (kv_store_lookup(sh->sh_st, dir, name, &ch->ch_ino, &a) ||
		    kv_store_readlink(sh->sh_st, ch->ch_ino, &target) ||
		    !(ch->ch_path2 = strdup(target)))
			goto fail;
		ch->ch_seq = (uint64_t)a.ka_uid << 32 | a.ka_gid;
	}
	ch->ch_path = path_in(sh, dir, name);
	if (!ch->ch_path)
		goto fail;
	if (what == KV_CHANGE_RENAME && !(ch->ch_path2 = path_in(sh, dir2, name2)))
		goto fail;
	kv_sh_enqueue(sh, ch);
	return;
fail:
	if (ch)
		kv_sh_change_free(ch);
	atomic_fetch_add(&sh->sh_errors, 1);
}

static void shared_free(struct kv_shared *sh)
{
	while (sh->sh_q_head) {
		struct change *ch = sh->sh_q_head;

		sh->sh_q_head = ch->ch_next;
		kv_sh_change_free(ch);
	}
	for (unsigned b = 0; sh->sh_known && b < KNOWN_BUCKETS; b++)
		while (sh->sh_known[b]) {
			struct known *k = sh->sh_known[b];

			sh->sh_known[b] = k->kn_next;
			free(k);
		}
	free(sh->sh_known);
	free(sh->sh_dirs);
	kv_rlog_close(sh->sh_log);
	kv_rknown_close(sh->sh_rk);
	if (sh->sh_conn) {
		kv_rados_close(sh->sh_conn->c_r);
		free(sh->sh_conn);
	}
	kv_sh_conn_close_all(kv_sh_conn_idle(sh, true));
	pthread_cond_destroy(&sh->sh_done_cond);
	pthread_cond_destroy(&sh->sh_cond);
	for (unsigned i = 0; i < sh->sh_ndc; i++)
		kv_sh_dlist_put(sh->sh_dc[i]);
	pthread_mutex_destroy(&sh->sh_dc_lock);
	pthread_mutex_destroy(&sh->sh_known_lock);
	pthread_mutex_destroy(&sh->sh_lock);
	free(sh->sh_pool);
	free(sh->sh_ns);
	free(sh->sh_conf);
	free(sh->sh_id);
	free(sh);
}

static bool seq_at_most(void *arg, uint64_t seq)
{
	return seq <= *(const uint64_t *)arg;
}

int kv_shared_start(const struct kv_config *cfg, struct kv_store *st, uint64_t node, int dirfd,
		    struct kv_shared **out)
{
	const uint64_t sec = 1000ull * 1000 * 1000;
	const struct kv_store_hooks hooks = {
	    .kh_sealed = on_sealed, .kh_changed = on_changed, .kh_arg = NULL};
	struct kv_store_hooks h = hooks;
	struct kv_shared *sh;
	pthread_condattr_t ca;
	int err;

	if (!kv_shared_built())
		return -ENOTSUP;
	sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	sh->sh_pool = strdup(cfg->kc_rados_pool);
	sh->sh_ns = strdup(cfg->kc_rados_namespace ? cfg->kc_rados_namespace : "");
	sh->sh_conf = strdup(cfg->kc_rados_conf ? cfg->kc_rados_conf : KV_RADOS_CONF_DEFAULT);
	sh->sh_id = strdup(cfg->kc_rados_id ? cfg->kc_rados_id : KV_RADOS_ID_DEFAULT);
	sh->sh_known = calloc(KNOWN_BUCKETS, sizeof(*sh->sh_known));
	sh->sh_timeout_s = (unsigned)((cfg->kc_rados_timeout_ns + sec - 1) / sec);
	if (sh->sh_timeout_s < 1)
		sh->sh_timeout_s = 1;
	sh->sh_ttl_ns = cfg->kc_rados_cache_ttl_ns;
	sh->sh_sync = cfg->kc_rados_sync;
	sh->sh_gc_interval_ns = cfg->kc_rados_gc_interval_ns;
	sh->sh_gc_grace_ns = cfg->kc_rados_gc_grace_ns;
	sh->sh_node = node;
	sh->sh_st = st;
	if (getenv("KVFS_TEST_RADOS_PUBLISH_PAUSE_MS"))
		sh->sh_pause_ms =
		    (unsigned)strtoul(getenv("KVFS_TEST_RADOS_PUBLISH_PAUSE_MS"), NULL, 10);
	pthread_mutex_init(&sh->sh_lock, NULL);
	pthread_mutex_init(&sh->sh_known_lock, NULL);
	pthread_mutex_init(&sh->sh_dc_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sh->sh_cond, &ca);
	pthread_cond_init(&sh->sh_done_cond, &ca);
	pthread_condattr_destroy(&ca);
	sh->sh_state = KV_SHARED_CONNECTING;
	if (!sh->sh_pool || !sh->sh_ns || !sh->sh_conf || !sh->sh_id || !sh->sh_known) {
		shared_free(sh);
		return -ENOMEM;
	}
	if (dirfd >= 0) {
		kv_sh_log_open(sh, dirfd);
		err = kv_rknown_open(dirfd, sh->sh_pool, sh->sh_ns, &sh->sh_rk);
		if (err) /* copies are then kept as local keys after a restart */
			fprintf(stderr, "kvfs: rados: cannot open %s: %s\n", KV_RKNOWN_NAME,
				strerror(-err));
		if (!err && kv_rknown_count(sh->sh_rk, NULL)) {
			/*
			 * Versions past the store's last sequence number are not this
			 * store's (it lost them: no SSD tier, a journal tail lost to a
			 * power cut): forgotten before a new value can take the number.
			 */
			uint64_t last = kv_store_last_seq(st);

			kv_rknown_prune(sh->sh_rk, UINT64_MAX, seq_at_most, &last);
		}
	}
	err = pthread_create(&sh->sh_thread, NULL, kv_sh_worker, sh);
	if (err) {
		shared_free(sh);
		return -err;
	}
	h.kh_arg = sh;
	kv_store_set_hooks(st, &h);
	*out = sh;
	return 0;
}

void kv_shared_stop(struct kv_shared *sh)
{
	struct timespec dl;

	if (!sh)
		return;
	kv_store_set_hooks(sh->sh_st, NULL);
	pthread_mutex_lock(&sh->sh_lock);
	sh->sh_stop = true;
	pthread_cond_broadcast(&sh->sh_cond);
	pthread_mutex_unlock(&sh->sh_lock);
	/* The drain and an operation in flight end within twice the timeout; a little slack. */
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 2 * sh->sh_timeout_s + 2;
	if (pthread_timedjoin_np(sh->sh_thread, NULL, &dl) != 0) {
		fprintf(stderr,
			"kvfs: rados: an operation on pool '%s' is stuck in librados: left "
			"behind\n",
			sh->sh_pool);
		return;
	}
	shared_free(sh);
}
