/* SPDX-License-Identifier: MIT */
/*
 * core/shared.c — the shared tier on RADOS (see core/shared.h).
 *
 * One thread, sh_thread, connects: it makes attempts until one works or
 * kv_shared_stop asks it to end, then exits; the connection it made stays
 * in sh_rados until kv_shared_stop closes it. Between attempts it sleeps
 * on sh_cond, which kv_shared_stop signals, so a stop never waits for a
 * backoff; it can wait for an attempt in flight, which librados bounds by
 * the timeouts kv_rados_open sets.
 */
#include "core/shared.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/stats.h"
#include "ssd/rados.h"

struct kv_shared {
	/* immutable after kv_shared_start */
	char *sh_pool, *sh_ns, *sh_conf, *sh_id;
	unsigned sh_timeout_s;
	pthread_t sh_thread;

	/*
	 * sh_lock guards the fields below it and is a leaf (core/shared.h,
	 * "Locks"); sh_cond (CLOCK_MONOTONIC) wakes the thread for a stop.
	 */
	pthread_mutex_t sh_lock;
	pthread_cond_t sh_cond;
	bool sh_stop; /* kv_shared_stop was called */
	enum kv_shared_state sh_state;
	struct kv_rados *sh_rados; /* set once, when connected */
	int sh_last_err;	   /* -errno of the last failed attempt */
	char sh_last_text[160];	   /* its step and strerror */

	/* atomics: read by the stats at any time */
	_Atomic uint64_t sh_attempts, sh_failures;
	_Atomic uint64_t sh_objects_read, sh_objects_written;
	_Atomic uint64_t sh_bytes_read, sh_bytes_written;
	_Atomic uint64_t sh_errors, sh_timeouts;
};

bool kv_shared_built(void)
{
	return kv_rados_built();
}

const char *kv_shared_state_name(enum kv_shared_state st)
{
	switch (st) {
	case KV_SHARED_CONNECTING:
		return "connecting";
	case KV_SHARED_CONNECTED:
		return "connected";
	case KV_SHARED_UNREACHABLE:
		return "unreachable";
	}
	return "?";
}

const char *kv_shared_pool(const struct kv_shared *sh)
{
	return sh->sh_pool;
}

const char *kv_shared_namespace(const struct kv_shared *sh)
{
	return sh->sh_ns;
}

/* Waits up to `s` seconds or until a stop (sh_lock held). Returns true on a stop. */
static bool wait_stop(struct kv_shared *sh, unsigned s)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += s;
	while (!sh->sh_stop)
		if (pthread_cond_timedwait(&sh->sh_cond, &sh->sh_lock, &dl) == ETIMEDOUT)
			break;
	return sh->sh_stop;
}

/* Records a failed attempt (sh_lock held); logs the first of a run. */
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

static void *connect_thread(void *arg)
{
	struct kv_shared *sh = arg;
	const struct kv_rados_params p = {.rp_conf = sh->sh_conf,
					  .rp_id = sh->sh_id,
					  .rp_pool = sh->sh_pool,
					  .rp_namespace = sh->sh_ns,
					  .rp_timeout_s = sh->sh_timeout_s};
	unsigned backoff = 1;

	pthread_mutex_lock(&sh->sh_lock);
	while (!sh->sh_stop) {
		struct kv_rados *r = NULL;
		const char *step = "";
		int err;

		pthread_mutex_unlock(&sh->sh_lock);
		atomic_fetch_add(&sh->sh_attempts, 1);
		err = kv_rados_open(&p, &r, &step);
		pthread_mutex_lock(&sh->sh_lock);
		if (!err) {
			if (sh->sh_state == KV_SHARED_UNREACHABLE)
				fprintf(stderr, "kvfs: rados: connected to pool '%s'\n",
					sh->sh_pool);
			sh->sh_rados = r;
			sh->sh_state = KV_SHARED_CONNECTED;
			break;
		}
		attempt_failed(sh, err, step);
		if (wait_stop(sh, backoff))
			break;
		backoff = backoff * 2 > KV_SHARED_RETRY_MAX_S ? KV_SHARED_RETRY_MAX_S : backoff * 2;
	}
	pthread_mutex_unlock(&sh->sh_lock);
	return NULL;
}

static void shared_free(struct kv_shared *sh)
{
	kv_rados_close(sh->sh_rados);
	pthread_cond_destroy(&sh->sh_cond);
	pthread_mutex_destroy(&sh->sh_lock);
	free(sh->sh_pool);
	free(sh->sh_ns);
	free(sh->sh_conf);
	free(sh->sh_id);
	free(sh);
}

int kv_shared_start(const struct kv_config *cfg, struct kv_shared **out)
{
	const uint64_t sec = 1000ull * 1000 * 1000;
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
	sh->sh_timeout_s = (unsigned)((cfg->kc_rados_timeout_ns + sec - 1) / sec);
	if (sh->sh_timeout_s < 1)
		sh->sh_timeout_s = 1;
	pthread_mutex_init(&sh->sh_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sh->sh_cond, &ca);
	pthread_condattr_destroy(&ca);
	sh->sh_state = KV_SHARED_CONNECTING;
	if (!sh->sh_pool || !sh->sh_ns || !sh->sh_conf || !sh->sh_id) {
		shared_free(sh);
		return -ENOMEM;
	}
	err = pthread_create(&sh->sh_thread, NULL, connect_thread, sh);
	if (err) {
		shared_free(sh);
		return -err;
	}
	*out = sh;
	return 0;
}

void kv_shared_stop(struct kv_shared *sh)
{
	struct timespec dl;

	if (!sh)
		return;
	pthread_mutex_lock(&sh->sh_lock);
	sh->sh_stop = true;
	pthread_cond_broadcast(&sh->sh_cond);
	pthread_mutex_unlock(&sh->sh_lock);
	/* An attempt in flight ends within the timeout; a little slack for shutdown. */
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += sh->sh_timeout_s + 2;
	if (pthread_timedjoin_np(sh->sh_thread, NULL, &dl) != 0) {
		fprintf(stderr,
			"kvfs: rados: a connection attempt to pool '%s' is stuck in "
			"librados: left behind\n",
			sh->sh_pool);
		return;
	}
	shared_free(sh);
}

void kv_shared_stats(struct kv_shared *sh, struct kv_shared_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&sh->sh_lock);
	out->ss_state = sh->sh_state;
	out->ss_last_err = sh->sh_last_err;
	memcpy(out->ss_last_error_text, sh->sh_last_text, sizeof(out->ss_last_error_text));
	pthread_mutex_unlock(&sh->sh_lock);
	out->ss_connect_attempts = atomic_load(&sh->sh_attempts);
	out->ss_connect_failures = atomic_load(&sh->sh_failures);
	out->ss_objects_read = atomic_load(&sh->sh_objects_read);
	out->ss_objects_written = atomic_load(&sh->sh_objects_written);
	out->ss_bytes_read = atomic_load(&sh->sh_bytes_read);
	out->ss_bytes_written = atomic_load(&sh->sh_bytes_written);
	out->ss_errors = atomic_load(&sh->sh_errors);
	out->ss_timeouts = atomic_load(&sh->sh_timeouts);
}

/* Writes s as a JSON string literal, quotes included. */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	kv_json_str(f, s, strlen(s));
	fputc('"', f);
}

int kv_shared_render(const char *pool, const char *ns, const struct kv_shared_stats *s, char **out)
{
	const char *ename = s->ss_last_err ? strerrorname_np(-s->ss_last_err) : "";
	size_t len;
	FILE *f = open_memstream(out, &len);

	if (!f)
		return -ENOMEM;
	fprintf(f, "\"rados\": {\"state\": \"%s\", \"pool\": ", kv_shared_state_name(s->ss_state));
	json_string(f, pool);
	fputs(", \"namespace\": ", f);
	json_string(f, ns);
	fprintf(f,
		", \"connect_attempts\": %" PRIu64 ", \"connect_failures\": %" PRIu64
		", \"last_error\": ",
		s->ss_connect_attempts, s->ss_connect_failures);
	json_string(f, ename ? ename : "other");
	fputs(", \"last_error_text\": ", f);
	json_string(f, s->ss_last_error_text);
	fprintf(f,
		", \"objects_read\": %" PRIu64 ", \"objects_written\": %" PRIu64
		", \"bytes_read\": %" PRIu64 ", \"bytes_written\": %" PRIu64
		", \"errors\": %" PRIu64 ", \"timeouts\": %" PRIu64 "}",
		s->ss_objects_read, s->ss_objects_written, s->ss_bytes_read, s->ss_bytes_written,
		s->ss_errors, s->ss_timeouts);
	if (fclose(f) != 0)
		return -ENOMEM;
	return 0;
}
