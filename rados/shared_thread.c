/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_thread.c — the tier's thread.
 *
 * One thread, sh_thread, does everything that changes the cluster: it
 * connects (attempts until one works or kv_shared_stop, sleeping on sh_cond
 * between them), then takes the change queue in order. The store's hooks
 * (kh_sealed, kh_changed) append to that queue and never wait; since one
 * thread applies the changes in the order they were made, a delete can
 * never overtake the put it follows, and no lock is needed around the
 * compare-and-set protocols. A change the cluster cannot take now (a
 * timeout, a full cluster) stays at the head and is tried again after a
 * backoff: the backlog waits, in order, bounded by the SSD quota (the
 * values it names are local keys). Calls rados/shared_publish.c,
 * rados/shared_sweep.c, rados/shared_queue.c and rados/shared_cluster.c.
 */
#include "rados/shared_int.h"

/* Waits up to `ms` milliseconds or until a stop (sh_lock held). Returns true on a stop. */
static bool wait_stop_ms(struct kv_shared *sh, unsigned ms)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	while (!sh->sh_stop)
		if (pthread_cond_timedwait(&sh->sh_cond, &sh->sh_lock, &dl) == ETIMEDOUT)
			break;
	return sh->sh_stop;
}

/* Records a failed connection attempt (sh_lock held); logs the first of a run. */
static void attempt_failed(struct kv_shared *sh, int err, const char *step)
{
	const char *why = err == -ENOENT && !strcmp(step, "pool") ? "no such pool" : strerror(-err);

	atomic_fetch_add(&sh->sh_failures, 1);
	sh->sh_last_err = err;
	snprintf(sh->sh_last_text, sizeof(sh->sh_last_text), "%s: %s", step, why);
	if (sh->sh_state != KV_SHARED_UNREACHABLE)
		fprintf(stderr,
			"kvfs: rados: cannot connect to pool '%s': %s; retrying every 1 to %d s\n",
			sh->sh_pool, sh->sh_last_text, KV_SHARED_RETRY_MAX_S);
	sh->sh_state = KV_SHARED_UNREACHABLE;
}

/* Connects (sh_lock held, dropped meanwhile). Returns false on a stop. */
static bool connect_loop(struct kv_shared *sh)
{
	const struct kv_rados_params p = {.rp_conf = sh->sh_conf,
					  .rp_id = sh->sh_id,
					  .rp_pool = sh->sh_pool,
					  .rp_namespace = sh->sh_ns,
					  .rp_timeout_s = sh->sh_timeout_s};
	unsigned backoff = 1;

	while (!sh->sh_stop) {
		struct kv_rados *r = NULL;
		const char *step = "";
		int err;

		pthread_mutex_unlock(&sh->sh_lock);
		atomic_fetch_add(&sh->sh_attempts, 1);
		err = kv_rados_open(&p, &r, &step);
		pthread_mutex_lock(&sh->sh_lock);
		if (!err && !(sh->sh_conn = kv_sh_conn_new(r)))
			err = -ENOMEM;
		if (!err) {
			if (sh->sh_state == KV_SHARED_UNREACHABLE)
				fprintf(stderr, "kvfs: rados: connected to pool '%s'\n",
					sh->sh_pool);
			sh->sh_state = KV_SHARED_CONNECTED;
			atomic_store(&sh->sh_healthy, true);
			return true;
		}
		attempt_failed(sh, err, step);
		if (wait_stop_ms(sh, backoff * 1000))
			break;
		backoff = backoff * 2 > KV_SHARED_RETRY_MAX_S ? KV_SHARED_RETRY_MAX_S : backoff * 2;
	}
	return false;
}

/*
 * Reads an entry nobody has: an answer (-ENOENT) makes the tier healthy
 * again. librados clients whose operations timed out while an OSD was
 * down were seen to time out for good after it came back, while a new
 * client worked at once: a probe that fails replaces the connection (at
 * most every 10 s); the old one is closed once no FUSE thread uses it.
 */
static void probe(struct kv_shared *sh)
{
	const struct kv_rados_params p = {.rp_conf = sh->sh_conf,
					  .rp_id = sh->sh_id,
					  .rp_pool = sh->sh_pool,
					  .rp_namespace = sh->sh_ns,
					  .rp_timeout_s = sh->sh_timeout_s};
	char doid[KV_RADOS_OID_MAX];
	struct kv_rdent *e = NULL;
	struct kv_rados *r = NULL;
	struct conn *c, *idle;
	const char *step;
	size_t len;
	int err;

	kv_sh_dir_oid_of(doid, "/");
	pthread_mutex_lock(&sh->sh_lock);
	idle = kv_sh_conn_idle(sh, false);
	pthread_mutex_unlock(&sh->sh_lock);
	kv_sh_conn_close_all(idle);
	err = kv_sh_entry_get(sh, sh->sh_conn->c_r, doid, FETCH_PREFIX "probe", &e, &len);
	free(e);
	if (err != -ETIMEDOUT || mono_ns() - sh->sh_reconnected_ns < 10000000000ull)
		return;
	sh->sh_reconnected_ns = mono_ns();
	if (kv_rados_open(&p, &r, &step) || !(c = kv_sh_conn_new(r)))
		return;
	pthread_mutex_lock(&sh->sh_lock);
	sh->sh_conn->c_next = sh->sh_retired;
	sh->sh_retired = sh->sh_conn;
	sh->sh_conn = c;
	idle = kv_sh_conn_idle(sh, false);
	pthread_mutex_unlock(&sh->sh_lock);
	kv_sh_conn_close_all(idle);
	err = kv_sh_entry_get(sh, c->c_r, doid, FETCH_PREFIX "probe", &e, &len);
	free(e);
}

/*
 * The thread: connects, then applies the queue in order. After a stop it
 * goes on while the cluster answers, for at most --rados-timeout, so that
 * an unmount sends what it can.
 */
void *kv_sh_worker(void *arg)
{
	struct kv_shared *sh = arg;
	struct change *small[SMALL_PUTS];
	uint64_t drain_until = 0, gc_last = mono_ns();
	bool moved = false;
	unsigned backoff_ms = 250, nsmall, ndone;

	kv_sh_start_walk(sh);
	pthread_mutex_lock(&sh->sh_lock);
	if (!connect_loop(sh)) {
		pthread_mutex_unlock(&sh->sh_lock);
		return NULL;
	}
	for (;;) {
		struct change *ch;
		int err;

		while (!sh->sh_stop && !sh->sh_q_head) {
			if (atomic_load(&sh->sh_healthy) && sh->sh_gc_interval_ns) {
				/* the slow background sweep, when due and nothing is queued */
				uint64_t now = mono_ns(), due = gc_last + sh->sh_gc_interval_ns;

				if (now < due) {
					struct timespec dl;

					/* one wait: a change queued, or a stop, wakes it */
					clock_gettime(CLOCK_MONOTONIC, &dl);
					dl.tv_sec += (time_t)((due - now) / 1000000000);
					dl.tv_nsec += (long)((due - now) % 1000000000);
					if (dl.tv_nsec >= 1000000000) {
						dl.tv_sec++;
						dl.tv_nsec -= 1000000000;
					}
					pthread_cond_timedwait(&sh->sh_cond, &sh->sh_lock, &dl);
					continue;
				}
				gc_last = now;
				pthread_mutex_unlock(&sh->sh_lock);
				kv_sh_background_sweep(sh);
				pthread_mutex_lock(&sh->sh_lock);
				continue;
			}
			if (atomic_load(&sh->sh_healthy)) {
				pthread_cond_wait(&sh->sh_cond, &sh->sh_lock);
				continue;
			}
			/* Nothing to send, and the cluster did not answer: ask it every second. */
			if (wait_stop_ms(sh, 1000) || sh->sh_q_head)
				continue;
			pthread_mutex_unlock(&sh->sh_lock);
			probe(sh);
			pthread_mutex_lock(&sh->sh_lock);
		}
		if (sh->sh_stop && !drain_until)
			drain_until = mono_ns() + sh->sh_timeout_s * 1000000000ull;
		if (!sh->sh_q_head || (sh->sh_stop && mono_ns() > drain_until))
			break;
		ch = sh->sh_q_head;
		nsmall = 0;
		for (struct change *c = ch; c && nsmall < SMALL_PUTS && c->ch_kind == CH_PUT &&
					    c->ch_size <= KV_RADOS_EXTENT;
		     c = c->ch_next)
			small[nsmall++] = c;
		pthread_mutex_unlock(&sh->sh_lock);
		if (nsmall > 1) {
			ndone = kv_sh_apply_small_puts(sh, sh->sh_conn->c_r, small, nsmall, &err);
		} else {
			err = kv_sh_apply(sh, sh->sh_conn->c_r, ch);
			ndone = kv_sh_transient(err) ? 0 : 1;
		}
		pthread_mutex_lock(&sh->sh_lock);
		if (ndone && sh->sh_log)
			moved = true;
		for (; ndone; ndone--) {
			ch = sh->sh_q_head;
			if (err && !kv_sh_transient(err) && ndone == 1) {
				atomic_fetch_add(&sh->sh_errors, 1);
				fprintf(stderr,
					"kvfs: rados: a change to '%s' was not shared: %s\n",
					ch->ch_path ? ch->ch_path : "a key", strerror(-err));
			}
			sh->sh_q_head = ch->ch_next;
			if (!sh->sh_q_head)
				sh->sh_q_tail = NULL;
			sh->sh_q_n--;
			sh->sh_q_bytes -= ch->ch_size;
			sh->sh_q_done = ch->ch_id;
			pthread_cond_broadcast(&sh->sh_done_cond);
			pthread_mutex_unlock(&sh->sh_lock);
			kv_sh_change_free(ch);
			pthread_mutex_lock(&sh->sh_lock);
		}
		if (moved)
			kv_sh_log_done(sh);
		moved = false;
		if (kv_sh_transient(err)) {
			if (sh->sh_stop)
				break;
			/* kept at the head: tried again, after a pause that grows to 5 s */
			if (wait_stop_ms(sh, backoff_ms))
				continue;
			backoff_ms = backoff_ms * 2 > 5000 ? 5000 : backoff_ms * 2;
			pthread_mutex_unlock(&sh->sh_lock);
			probe(sh); /* replaces a connection that stopped answering */
			pthread_mutex_lock(&sh->sh_lock);
			continue;
		}
		backoff_ms = 250;
	}
	if (sh->sh_q_n)
		fprintf(stderr, "kvfs: rados: %" PRIu64 " changes were not sent to pool '%s'%s\n",
			sh->sh_q_n, sh->sh_pool,
			sh->sh_log ? ": kept in " KV_RLOG_NAME " for the next start" : "");
	pthread_mutex_unlock(&sh->sh_lock);
	return NULL;
}
