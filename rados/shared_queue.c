/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_queue.c — the change queue (sh_q_*, under sh_lock) and its
 * log, and kv_shared_sync and kv_shared_persist, which wait on it.
 *
 * Every change queued is also appended to DATA_DIR/rados.log
 * (rados/rados_log.h), under sh_lock so the log is in queue order, and the
 * thread records there how far it got: what a stop, a kill -9 or an outage
 * left unsent is queued again at the next start. A put is logged by its
 * local sequence number; the thread finds the key that still has it (one
 * walk of the namespace) before it sends anything.
 */
#include "rados/shared_int.h"

void kv_sh_change_free(struct change *ch)
{
	if (ch->ch_ino)
		kv_inode_put(ch->ch_ino);
	free(ch->ch_path);
	free(ch->ch_path2);
	free(ch);
}

static const enum kv_rlog_kind log_kinds[] = {
    [CH_PUT] = KV_RLOG_PUT,	[CH_DEL] = KV_RLOG_DEL,	      [CH_MKDIR] = KV_RLOG_MKDIR,
    [CH_RMDIR] = KV_RLOG_RMDIR, [CH_RENAME] = KV_RLOG_RENAME, [CH_SYMLINK] = KV_RLOG_SYMLINK};

static struct kv_rlog_change log_change(const struct change *ch)
{
	return (struct kv_rlog_change){
	    .rc_id = ch->ch_id,
	    .rc_kind = log_kinds[ch->ch_kind],
	    .rc_seq = ch->ch_kind == CH_DEL || ch->ch_kind == CH_RENAME ? ch->ch_vseq : ch->ch_seq,
	    .rc_node = ch->ch_vnode,
	    .rc_mark = ch->ch_mark,
	    .rc_size = ch->ch_kind == CH_PUT ? ch->ch_size : (uint64_t)ch->ch_time_ns,
	    .rc_mode = ch->ch_mode,
	    .rc_path = ch->ch_path,
	    .rc_path2 = ch->ch_path2};
}

/* Appends ch to the queue (sh_lock held), not to the log. */
static void queue_add(struct kv_shared *sh, struct change *ch)
{
	if (sh->sh_q_tail)
		sh->sh_q_tail->ch_next = ch;
	else
		sh->sh_q_head = ch;
	sh->sh_q_tail = ch;
	sh->sh_q_n++;
	sh->sh_q_bytes += ch->ch_size;
}

/* Appends ch to the queue and the log (sh_lock not held); wakes the thread. */
void kv_sh_enqueue(struct kv_shared *sh, struct change *ch)
{
	pthread_mutex_lock(&sh->sh_lock);
	ch->ch_id = ++sh->sh_q_last;
	queue_add(sh, ch);
	if (sh->sh_log) {
		const struct kv_rlog_change c = log_change(ch);
		int err = kv_rlog_append(sh->sh_log, &c);

		if (err && !sh->sh_log_failed)
			fprintf(stderr,
				"kvfs: rados: cannot log a change to %s: %s (changes not sent "
				"when kvfs stops are lost)\n",
				KV_RLOG_NAME, strerror(-err));
		sh->sh_log_failed |= err != 0;
		if (err)
			atomic_fetch_add(&sh->sh_errors, 1);
	}
	pthread_cond_broadcast(&sh->sh_cond);
	pthread_mutex_unlock(&sh->sh_lock);
}

/* Writes the log anew with only the changes left (sh_lock held). */
static int log_rewrite(struct kv_shared *sh)
{
	int err = kv_rlog_rewrite_begin(sh->sh_log), end;

	if (err)
		return err;
	for (struct change *c = sh->sh_q_head; !err && c; c = c->ch_next) {
		const struct kv_rlog_change lc = log_change(c);

		err = kv_rlog_rewrite_add(sh->sh_log, &lc);
	}
	end = kv_rlog_rewrite_end(sh->sh_log, !err);
	return err ? err : end;
}

/* Records in the log how far the queue got (sh_lock held); rewrites a log grown large. */
void kv_sh_log_done(struct kv_shared *sh)
{
	bool empty = !sh->sh_q_head;
	int err = kv_rlog_done(sh->sh_log, sh->sh_q_done, empty);

	if (!err && empty)
		sh->sh_log_failed = false; /* what the log missed is sent */
	if (!err && !empty && (kv_rlog_bytes(sh->sh_log) > sh->sh_log_limit || sh->sh_log_failed)) {
		err = log_rewrite(sh);
		if (!err)
			sh->sh_log_failed = false;
		/* one that stays large is not rewritten again before it doubles */
		sh->sh_log_limit = 2 * kv_rlog_bytes(sh->sh_log) > KV_RLOG_REWRITE
				       ? 2 * kv_rlog_bytes(sh->sh_log)
				       : KV_RLOG_REWRITE;
	}
	if (err) /* the next start sends a change twice: harmless */
		atomic_fetch_add(&sh->sh_errors, 1);
}

/* A version a put read back from the log names, and the key found with it. */
struct found {
	uint64_t f_seq;
	struct kv_inode *f_ino; /* referenced, or NULL */
};

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return x->f_seq < y->f_seq ? -1 : x->f_seq > y->f_seq;
}

static int seq_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return *x < *y ? -1 : *x > *y;
}

/* What one walk of the local namespace looks for, and what it found. */
struct walk {
	struct found *w_f; /* sorted by f_seq: the keys with these versions */
	size_t w_nf;
	uint64_t *w_live; /* every key's version (NULL: not wanted) */
	size_t w_nlive, w_cap_live;
	bool w_short; /* out of memory: w_live misses some */
};

static void walk_key(struct walk *w, struct kv_inode *ino, const struct kv_attr *a)
{
	struct found key = {.f_seq = a->ka_seq}, *hit;

	if (w->w_live && w->w_nlive == w->w_cap_live) {
		uint64_t *more = realloc(w->w_live, 2 * w->w_cap_live * sizeof(*more));

		w->w_short |= !more;
		if (more) {
			w->w_live = more;
			w->w_cap_live *= 2;
		}
	}
	if (w->w_live && w->w_nlive < w->w_cap_live)
		w->w_live[w->w_nlive++] = a->ka_seq;
	hit = w->w_nf ? bsearch(&key, w->w_f, w->w_nf, sizeof(key), found_cmp) : NULL;
	if (hit && !hit->f_ino) {
		kv_inode_get(ino);
		hit->f_ino = ino;
	}
}

/* Visits every regular file of the local store once (directories by a stack). */
static void walk_store(struct kv_store *st, struct walk *w)
{
	struct kv_inode **dirs = malloc(sizeof(*dirs)), *root = kv_store_root(st);
	size_t nd = 0, cap = 1;

	w->w_short |= !dirs;
	if (!dirs)
		return;
	kv_inode_get(root);
	dirs[nd++] = root;
	while (nd) {
		struct kv_inode *d = dirs[--nd], *ino;
		struct kv_dir_snap snap = {0};
		struct kv_attr a;

		if (kv_store_readdir(st, d, &snap)) {
			snap.kds_count = 0; /* no memory: that directory is not searched */
			w->w_short = true;
		}
		for (uint32_t i = 0; i < snap.kds_count; i++) {
			const struct kv_dirent *e = &snap.kds_ent[i];

			if ((!S_ISDIR(e->kde_type) && !S_ISREG(e->kde_type)) ||
			    kv_store_lookup(st, d, e->kde_name, &ino, &a))
				continue;
			if (S_ISDIR(a.ka_mode) && nd == cap) {
				struct kv_inode **more = realloc(dirs, 2 * cap * sizeof(*dirs));

				w->w_short |= !more;
				if (more) {
					dirs = more;
					cap *= 2;
				}
			}
			if (S_ISDIR(a.ka_mode) && nd < cap) {
				dirs[nd++] = ino;
				continue;
			}
			if (S_ISREG(a.ka_mode))
				walk_key(w, ino, &a);
			kv_inode_put(ino);
		}
		kv_dir_snap_free(&snap);
		kv_inode_put(d);
	}
	free(dirs);
}

static bool seq_live(void *arg, uint64_t seq)
{
	const struct walk *w = arg;

	return bsearch(&seq, w->w_live, w->w_nlive, sizeof(seq), seq_cmp) != NULL;
}

/*
 * Before the thread sends anything after a start, one walk of the local
 * namespace does two things. It gives each put read back from the log the
 * key whose value still has its sequence number; a put whose version no
 * key has any more (replaced: the replacing put follows it; deleted: so
 * does the delete) is skipped when its turn comes. And it forgets, in
 * rados.known, the versions no key has any more (deleted, overwritten or
 * evicted while nobody told the tier), as far as the highest version
 * known when the walk began: versions made during the walk are newer. The
 * store serves meanwhile: a rename during the walk may hide a key from it,
 * so then nothing is forgotten (the next start tries again).
 */
void kv_sh_start_walk(struct kv_shared *sh)
{
	struct walk w = {0};
	uint64_t upto = 0, renames = atomic_load(&sh->sh_renames);
	struct found key = {0}, *hit;

	if (sh->sh_rk && kv_rknown_count(sh->sh_rk, &upto)) {
		w.w_cap_live = 1024;
		w.w_live = malloc(w.w_cap_live * sizeof(*w.w_live));
		w.w_short |= !w.w_live;
	}
	pthread_mutex_lock(&sh->sh_lock);
	if (sh->sh_unresolved)
		w.w_f = calloc(sh->sh_unresolved, sizeof(*w.w_f));
	for (struct change *c = sh->sh_q_head; w.w_f && c; c = c->ch_next)
		if (c->ch_kind == CH_PUT && !c->ch_ino)
			w.w_f[w.w_nf++].f_seq = c->ch_seq;
	pthread_mutex_unlock(&sh->sh_lock);
	if (sh->sh_unresolved && !w.w_f)
		fprintf(stderr, "kvfs: rados: out of memory: %" PRIu64 " logged puts not sent\n",
			sh->sh_unresolved);
	if (!w.w_nf && !w.w_live)
		return;
	qsort(w.w_f, w.w_nf, sizeof(*w.w_f), found_cmp);
	walk_store(sh->sh_st, &w);
	/* a key renamed during the walk may have been missed: no prune then */
	if (w.w_live && !w.w_short && atomic_load(&sh->sh_renames) == renames) {
		qsort(w.w_live, w.w_nlive, sizeof(*w.w_live), seq_cmp);
		kv_rknown_prune(sh->sh_rk, upto, seq_live, &w);
	}
	free(w.w_live);
	pthread_mutex_lock(&sh->sh_lock);
	for (struct change *c = sh->sh_q_head; w.w_nf && c; c = c->ch_next) {
		key.f_seq = c->ch_seq;
		if (c->ch_kind == CH_PUT && !c->ch_ino &&
		    (hit = bsearch(&key, w.w_f, w.w_nf, sizeof(key), found_cmp))) {
			c->ch_ino = hit->f_ino; /* its reference; NULL: skipped */
			hit->f_ino = NULL;
		}
	}
	sh->sh_unresolved = 0;
	pthread_mutex_unlock(&sh->sh_lock);
	for (size_t i = 0; i < w.w_nf; i++)
		if (w.w_f[i].f_ino)
			kv_inode_put(w.w_f[i].f_ino);
	free(w.w_f);
}

/* kv_rlog_open's: a change read back from the log goes to the queue (before the thread runs). */
static int replayed(void *arg, const struct kv_rlog_change *c)
{
	static const enum change_kind kinds[] = {
	    [KV_RLOG_PUT] = CH_PUT,	  [KV_RLOG_DEL] = CH_DEL,
	    [KV_RLOG_MKDIR] = CH_MKDIR,	  [KV_RLOG_RMDIR] = CH_RMDIR,
	    [KV_RLOG_RENAME] = CH_RENAME, [KV_RLOG_SYMLINK] = CH_SYMLINK};
	struct kv_shared *sh = arg;
	struct change *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return -ENOMEM;
	ch->ch_kind = kinds[c->rc_kind];
	ch->ch_id = c->rc_id;
	ch->ch_seq = c->rc_seq;
	ch->ch_size = c->rc_kind == KV_RLOG_PUT ? c->rc_size : 0;
	ch->ch_time_ns = c->rc_kind == KV_RLOG_PUT ? 0 : (int64_t)c->rc_size;
	if (c->rc_kind == KV_RLOG_DEL || c->rc_kind == KV_RLOG_RENAME) {
		ch->ch_vnode = c->rc_node;
		ch->ch_vseq = c->rc_node ? c->rc_seq : 0;
		ch->ch_mark = c->rc_mark;
		ch->ch_seq = 0;
	}
	ch->ch_mode = c->rc_mode;
	if (c->rc_kind != KV_RLOG_PUT && !(ch->ch_path = strdup(c->rc_path)))
		goto nomem;
	if ((c->rc_kind == KV_RLOG_RENAME || c->rc_kind == KV_RLOG_SYMLINK) &&
	    !(ch->ch_path2 = strdup(c->rc_path2)))
		goto nomem;
	if (c->rc_kind == KV_RLOG_PUT)
		sh->sh_unresolved++;
	queue_add(sh, ch);
	sh->sh_replayed++;
	return 0;
nomem:
	kv_sh_change_free(ch);
	return -ENOMEM;
}

/* Opens DATA_DIR's log and queues what it holds; without one (logged) the tier still runs. */
void kv_sh_log_open(struct kv_shared *sh, int dirfd)
{
	uint64_t last = 0;
	int err;

	sh->sh_log_limit = KV_RLOG_REWRITE;
	err = kv_rlog_open(dirfd, sh->sh_pool, sh->sh_ns, replayed, sh, &sh->sh_log, &last);
	if (err) {
		fprintf(stderr,
			"kvfs: rados: cannot open %s: %s (changes not sent when kvfs stops are "
			"lost)\n",
			KV_RLOG_NAME, strerror(-err));
		while (sh->sh_q_head) { /* a part read before the failure */
			struct change *ch = sh->sh_q_head;

			sh->sh_q_head = ch->ch_next;
			kv_sh_change_free(ch);
		}
		sh->sh_q_tail = NULL;
		sh->sh_q_n = sh->sh_q_bytes = sh->sh_unresolved = sh->sh_replayed = 0;
		return;
	}
	sh->sh_q_last = last;
	sh->sh_q_done = sh->sh_q_head ? sh->sh_q_head->ch_id - 1 : last;
	if (sh->sh_replayed)
		fprintf(stderr,
			"kvfs: rados: %" PRIu64 " changes not sent before the last stop: "
			"queued again\n",
			sh->sh_replayed);
}

int kv_shared_sync(struct kv_shared *sh)
{
	struct timespec dl;
	uint64_t want;
	int err = 0;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += sh->sh_timeout_s;
	pthread_mutex_lock(&sh->sh_lock);
	want = sh->sh_q_last;
	while (sh->sh_q_done < want && !err)
		if (pthread_cond_timedwait(&sh->sh_done_cond, &sh->sh_lock, &dl) == ETIMEDOUT)
			err = -EIO;
	pthread_mutex_unlock(&sh->sh_lock);
	return err;
}

int kv_shared_persist(struct kv_shared *sh)
{
	int fd = -EBADF, err = 0;

	pthread_mutex_lock(&sh->sh_lock);
	if (sh->sh_log)
		fd = sh->sh_log_failed ? -EIO : kv_rlog_dup(sh->sh_log);
	pthread_mutex_unlock(&sh->sh_lock);
	if (fd == -EBADF)
		return 0; /* no log */
	if (fd < 0)
		return fd;
	if (fdatasync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

bool kv_shared_sync_on(const struct kv_shared *sh)
{
	return sh->sh_sync;
}
