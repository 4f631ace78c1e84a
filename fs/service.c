/* SPDX-License-Identifier: MIT */
/*
 * fs/service.c — systemd's notification protocol (fs/service.h).
 *
 * One thread of ours, started by the first call when NOTIFY_SOCKET is set,
 * sends the periodic STATUS= lines (the first of each phase is sent by the
 * call that enters it, before it returns): while recovering, the seconds so far;
 * while serving, the store's keys, pool and SSD use (kv_store_usage, which
 * copies counters: the thread holds none of the store's locks for longer).
 * READY=1 and STOPPING=1 are sent by the caller's thread itself, so that
 * each is out before the call returns.
 *
 * svc_lock guards svc (its phase, store, names and the thread's handle);
 * the thread waits on svc_cond with it held and sends holding it (a
 * datagram to a local socket: it does not block on anyone of ours).
 * kv_service_stopping takes the store away under it, so the thread never
 * reads a store that is being destroyed. Nothing else is taken inside it,
 * and it is taken inside nothing.
 */
#include "fs/service.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "core/store.h"

#ifdef KVFS_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

enum svc_phase { SVC_IDLE, SVC_RECOVERING, SVC_SERVING, SVC_STOPPING };

static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t svc_cond = PTHREAD_COND_INITIALIZER;
static struct {
	enum svc_phase phase;
	struct kv_store *store; /* while SVC_SERVING */
	char where[512];	/* DATA_DIR while recovering, MNT while serving */
	struct timespec since;	/* the start of the phase */
	pthread_t thread;
	bool running;
} svc;

bool kv_service_built(void)
{
#ifdef KVFS_HAVE_SYSTEMD
	return true;
#else
	return false;
#endif
}

static bool svc_wanted(void)
{
	return kv_service_built() && getenv("NOTIFY_SOCKET");
}

static void svc_send(const char *msg)
{
#ifdef KVFS_HAVE_SYSTEMD
	/* A manager that went away is no reason to stop serving. */
	(void)sd_notify(0, msg);
#else
	(void)msg;
#endif
}

static double svc_elapsed(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - svc.since.tv_sec) +
	       (double)(now.tv_nsec - svc.since.tv_nsec) / 1e9;
}

/* The STATUS= line of the current phase; called with svc_lock held. */
static void svc_status(char *buf, size_t len)
{
	struct kv_store_usage u;
	struct kv_pool *pool;

	switch (svc.phase) {
	case SVC_RECOVERING:
		snprintf(buf, len, "STATUS=Recovering %s: %.0f s", svc.where, svc_elapsed());
		break;
	case SVC_SERVING:
		kv_store_usage(svc.store, &u);
		pool = kv_store_pool(svc.store);
		snprintf(buf, len,
			 "STATUS=Serving %s: %" PRIu64 " keys, pool %" PRIu64 "/%" PRIu64
			 " MiB, SSD %" PRIu64 "/%" PRIu64 " MiB",
			 svc.where, u.ku_keys, kv_pool_used(pool) >> 20, kv_pool_size(pool) >> 20,
			 u.ku_ssd_used >> 20, u.ku_ssd_cap >> 20);
		break;
	default:
		buf[0] = '\0';
	}
}

static void *svc_main(void *arg)
{
	struct timespec until;
	char msg[1024];

	(void)arg;
	pthread_mutex_lock(&svc_lock);
	while (svc.phase == SVC_RECOVERING || svc.phase == SVC_SERVING) {
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += svc.phase == SVC_RECOVERING ? 1 : KV_SERVICE_STATUS_S;
		/* a phase entered meanwhile sent its own line: wait again from there */
		if (pthread_cond_timedwait(&svc_cond, &svc_lock, &until) != ETIMEDOUT)
			continue;
		svc_status(msg, sizeof(msg));
		svc_send(msg);
	}
	pthread_mutex_unlock(&svc_lock);
	return NULL;
}

/* Enters a phase; starts the thread if needed. Called with svc_lock held. */
static void svc_enter(enum svc_phase phase, const char *where)
{
	svc.phase = phase;
	snprintf(svc.where, sizeof(svc.where), "%s", where);
	clock_gettime(CLOCK_MONOTONIC, &svc.since);
	if (!svc.running)
		svc.running = pthread_create(&svc.thread, NULL, svc_main, NULL) == 0;
	pthread_cond_broadcast(&svc_cond);
}

void kv_service_recovering(const char *data_dir)
{
	char msg[1024];

	if (!svc_wanted())
		return;
	pthread_mutex_lock(&svc_lock);
	svc_enter(SVC_RECOVERING, data_dir);
	svc_status(msg, sizeof(msg)); /* the first line before recovery starts */
	svc_send(msg);
	pthread_mutex_unlock(&svc_lock);
}

void kv_service_ready(struct kv_store *st, const char *mnt)
{
	char msg[1024];

	if (!svc_wanted())
		return;
	pthread_mutex_lock(&svc_lock);
	svc.store = st;
	svc_enter(SVC_SERVING, mnt);
	svc_status(msg + 8, sizeof(msg) - 8);
	memcpy(msg, "READY=1\n", 8);
	svc_send(msg);
	pthread_mutex_unlock(&svc_lock);
}

void kv_service_stopping(void)
{
	char msg[1024];
	bool running;
	pthread_t thread;

	if (!svc_wanted())
		return;
	pthread_mutex_lock(&svc_lock);
	if (svc.phase == SVC_STOPPING) {
		pthread_mutex_unlock(&svc_lock);
		return;
	}
	svc.phase = SVC_STOPPING;
	svc.store = NULL;
	snprintf(msg, sizeof(msg), "STOPPING=1\nSTATUS=Stopping: writing back and unmounting %s",
		 svc.where);
	svc_send(msg);
	pthread_cond_broadcast(&svc_cond);
	running = svc.running;
	thread = svc.thread;
	svc.running = false;
	pthread_mutex_unlock(&svc_lock);
	if (running)
		pthread_join(thread, NULL);
}
