/* SPDX-License-Identifier: MIT */
/*
 * gpu/copy_pool.c — helper threads for large host copies (see
 * gpu/copy_pool.h).
 *
 * A run queues its parts 1..n-1 (struct task, on the caller's stack) and
 * wakes that many helpers, runs part 0, then under cp_lock takes back
 * every part still queued (T_QUEUED: from then on no helper can reach it)
 * to run it itself, and waits on cp_done until none of its parts is
 * T_RUNNING. A helper pops a part, marks it
 * T_RUNNING, runs it without the lock, and marks it T_DONE under the lock
 * with a broadcast on cp_done: after that store it never touches the part
 * again, as the caller may have returned and its stack be gone.
 */
#include "gpu/copy_pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>

enum task_state { T_QUEUED, T_RUNNING, T_DONE };

struct task {
	void (*t_part)(void *arg, unsigned i); /* immutable */
	void *t_arg;			       /* immutable */
	unsigned t_i;			       /* immutable */
	enum task_state t_state;	       /* cp_lock */
	struct task *t_next;		       /* cp_lock: the queue's link */
};

struct kv_copy_pool {
	pthread_mutex_t cp_lock; /* guards the queue, each queued task's state, cp_stop */
	pthread_cond_t cp_work;	 /* helpers wait here for a task or the stop */
	pthread_cond_t cp_done;	 /* callers wait here for their tasks a helper runs */
	struct task *cp_head;	 /* queued tasks, oldest first */
	struct task **cp_tail;
	bool cp_stop;
	unsigned cp_nthreads; /* immutable once created */
	pthread_t cp_threads[KV_COPY_HELPERS_MAX];
};

static void *helper_main(void *arg)
{
	struct kv_copy_pool *p = arg;
	struct task *t;

	pthread_mutex_lock(&p->cp_lock);
	for (;;) {
		while (!p->cp_head && !p->cp_stop)
			pthread_cond_wait(&p->cp_work, &p->cp_lock);
		if (!p->cp_head)
			break; /* stopping, and nothing is left queued */
		t = p->cp_head;
		p->cp_head = t->t_next;
		if (!p->cp_head)
			p->cp_tail = &p->cp_head;
		t->t_state = T_RUNNING;
		pthread_mutex_unlock(&p->cp_lock);
		t->t_part(t->t_arg, t->t_i);
		pthread_mutex_lock(&p->cp_lock);
		t->t_state = T_DONE; /* t may be gone from here on */
		pthread_cond_broadcast(&p->cp_done);
	}
	pthread_mutex_unlock(&p->cp_lock);
	return NULL;
}

static void stop(struct kv_copy_pool *p)
{
	pthread_mutex_lock(&p->cp_lock);
	p->cp_stop = true;
	pthread_cond_broadcast(&p->cp_work);
	pthread_mutex_unlock(&p->cp_lock);
	for (unsigned i = 0; i < p->cp_nthreads; i++)
		pthread_join(p->cp_threads[i], NULL);
}

int kv_copy_pool_create(unsigned helpers, struct kv_copy_pool **out)
{
	struct kv_copy_pool *p = calloc(1, sizeof(*p));
	int err = 0;

	if (!p)
		return -ENOMEM;
	if (helpers > KV_COPY_HELPERS_MAX)
		helpers = KV_COPY_HELPERS_MAX;
	pthread_mutex_init(&p->cp_lock, NULL);
	pthread_cond_init(&p->cp_work, NULL);
	pthread_cond_init(&p->cp_done, NULL);
	p->cp_tail = &p->cp_head;
	for (; p->cp_nthreads < helpers; p->cp_nthreads++) {
		err = -pthread_create(&p->cp_threads[p->cp_nthreads], NULL, helper_main, p);
		if (err)
			break;
	}
	if (err) {
		kv_copy_pool_destroy(p);
		return err;
	}
	*out = p;
	return 0;
}

unsigned kv_copy_pool_default_helpers(void)
{
	cpu_set_t set;
	int cpus;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 0;
	cpus = CPU_COUNT(&set);
	if (cpus <= 1)
		return 0;
	return cpus - 1 > KV_COPY_HELPERS_MAX ? KV_COPY_HELPERS_MAX : (unsigned)cpus - 1;
}

void kv_copy_pool_destroy(struct kv_copy_pool *p)
{
	if (!p)
		return;
	stop(p);
	pthread_cond_destroy(&p->cp_done);
	pthread_cond_destroy(&p->cp_work);
	pthread_mutex_destroy(&p->cp_lock);
	free(p);
}

unsigned kv_copy_pool_width(const struct kv_copy_pool *p)
{
	return p->cp_nthreads + 1;
}

/* Takes t off the queue (cp_lock held, t queued). */
static void unqueue(struct kv_copy_pool *p, struct task *t)
{
	struct task **pp = &p->cp_head;

	while (*pp != t)
		pp = &(*pp)->t_next;
	*pp = t->t_next;
	if (!*pp)
		p->cp_tail = pp;
}

void kv_copy_pool_run(struct kv_copy_pool *p, void (*part)(void *arg, unsigned i), void *arg,
		      unsigned n)
{
	struct task tasks[KV_COPY_PARTS_MAX];
	bool mine[KV_COPY_PARTS_MAX] = {false}, waiting;

	if (n > KV_COPY_PARTS_MAX)
		n = KV_COPY_PARTS_MAX;
	if (n > 1 && p->cp_nthreads) {
		pthread_mutex_lock(&p->cp_lock);
		for (unsigned i = 1; i < n; i++) {
			tasks[i] = (struct task){part, arg, i, T_QUEUED, NULL};
			*p->cp_tail = &tasks[i];
			p->cp_tail = &tasks[i].t_next;
			pthread_cond_signal(&p->cp_work);
		}
		pthread_mutex_unlock(&p->cp_lock);
	}
	part(arg, 0);
	if (n < 2)
		return;
	if (!p->cp_nthreads) {
		for (unsigned i = 1; i < n; i++)
			part(arg, i);
		return;
	}
	pthread_mutex_lock(&p->cp_lock);
	for (unsigned i = 1; i < n; i++) {
		if (tasks[i].t_state == T_QUEUED) {
			unqueue(p, &tasks[i]);
			mine[i] = true;
		}
	}
	pthread_mutex_unlock(&p->cp_lock);
	for (unsigned i = 1; i < n; i++)
		if (mine[i])
			part(arg, i);
	pthread_mutex_lock(&p->cp_lock);
	do {
		waiting = false;
		for (unsigned i = 1; i < n; i++)
			waiting |= tasks[i].t_state == T_RUNNING;
		if (waiting)
			pthread_cond_wait(&p->cp_done, &p->cp_lock);
	} while (waiting);
	pthread_mutex_unlock(&p->cp_lock);
}
