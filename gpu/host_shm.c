/* SPDX-License-Identifier: MIT */
/*
 * gpu/host_shm.c — regions in POSIX shared memory (KVFS_REGION_HOST_SHM).
 *
 * The daemon opens the client's object by name, refuses it unless the
 * caller's uid owns it, maps the registered range once (MAP_SHARED), and
 * copies with memcpy. The owner can still shrink the object afterwards
 * (ftruncate), and touching a page past its new end raises SIGBUS: every
 * copy runs under a per-thread recovery point, and a SIGBUS inside a copy
 * ends that copy with -EIO instead of the daemon. A SIGBUS anywhere else
 * goes on to the handler that was there before (or kills, as it would
 * have).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu/region.h"

static struct sigaction old_bus; /* the handler before ours (bus_lock) */
static pthread_mutex_t bus_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread sigjmp_buf *copy_jmp; /* set while this thread copies */

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	if (copy_jmp)
		siglongjmp(*copy_jmp, 1);
	if (old_bus.sa_flags & SA_SIGINFO && old_bus.sa_sigaction) {
		old_bus.sa_sigaction(sig, si, uc);
		return;
	}
	if (old_bus.sa_handler != SIG_DFL && old_bus.sa_handler != SIG_IGN) {
		old_bus.sa_handler(sig);
		return;
	}
	signal(SIGBUS, SIG_DFL); /* returning re-runs the access: the default action */
}

/*
 * Makes on_bus the SIGBUS handler, keeping the one it replaces. Called at
 * every registration, so a handler installed later by someone else (a
 * sanitizer runtime, a test framework) is chained rather than lost.
 */
static void install_bus(void)
{
	struct sigaction cur, sa = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO | SA_NODEFER};

	sigemptyset(&sa.sa_mask);
	pthread_mutex_lock(&bus_lock);
	if (sigaction(SIGBUS, NULL, &cur) == 0 &&
	    !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_bus))
		sigaction(SIGBUS, &sa, &old_bus);
	pthread_mutex_unlock(&bus_lock);
}

/* "/name": one component after the slash, NUL-terminated within KVFS_SHM_NAME_MAX. */
static int shm_name_check(const char *name)
{
	size_t len = strnlen(name, KVFS_SHM_NAME_MAX);

	if (len == KVFS_SHM_NAME_MAX)
		return -ENAMETOOLONG;
	if (len < 2 || name[0] != '/' || strchr(name + 1, '/') || !strcmp(name, "/.") ||
	    !strcmp(name, "/.."))
		return -EINVAL;
	return len - 1 > NAME_MAX ? -ENAMETOOLONG : 0;
}

static int shm_open_region(struct kv_region *r, const struct kv_region_desc *d,
			   const struct kv_caller *c)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t end, start;
	struct stat st;
	int fd, err;

	err = shm_name_check(d->rd_shm_name);
	if (err)
		return err;
	if (__builtin_add_overflow(d->rd_offset, d->rd_length, &end))
		return -EFAULT;
	fd = shm_open(d->rd_shm_name, O_RDWR, 0);
	if (fd < 0)
		return -errno;
	err = fstat(fd, &st) ? -errno : 0;
	if (!err && !S_ISREG(st.st_mode))
		err = -EINVAL;
	if (!err && st.st_uid != c->kc_uid)
		err = -EPERM;
	if (!err && end > (uint64_t)st.st_size)
		err = -EFAULT;
	if (err)
		goto out_close;
	start = d->rd_offset & ~(uint64_t)(page - 1);
	r->rg_map_len = end - start;
	/* Populated now: no page fault per 4 KiB on the first copies. */
	r->rg_map = mmap(NULL, r->rg_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
			 (off_t)start);
	if (r->rg_map == MAP_FAILED) {
		err = -errno;
		r->rg_map = NULL;
		goto out_close;
	}
	r->rg_base = (char *)r->rg_map + (d->rd_offset - start);
	install_bus();
out_close:
	close(fd);
	return err;
}

static void shm_close(struct kv_region *r)
{
	if (r->rg_map)
		munmap(r->rg_map, r->rg_map_len);
}

static void copy_pieces(char *p, bool to_region, const struct iovec *iov, int n)
{
	for (int i = 0; i < n; i++) {
		if (to_region)
			memcpy(p, iov[i].iov_base, iov[i].iov_len);
		else
			memcpy(iov[i].iov_base, p, iov[i].iov_len);
		p += iov[i].iov_len;
	}
}

/* SA_NODEFER leaves SIGBUS unblocked in the handler: no signal mask to save and restore. */
static int shm_copy(struct kv_region *r, bool to_region, uint64_t off, const struct iovec *iov,
		    int n)
{
	sigjmp_buf jb;

	if (sigsetjmp(jb, 0)) {
		copy_jmp = NULL;
		return -EIO;
	}
	copy_jmp = &jb;
	copy_pieces(r->rg_base + off, to_region, iov, n);
	copy_jmp = NULL;
	return 0;
}

static void *shm_direct(struct kv_region *r, uint64_t off)
{
	return r->rg_base + off;
}

const struct kv_region_ops kv_host_shm_ops = {
    .ro_name = "host_shm",
    .ro_open = shm_open_region,
    .ro_close = shm_close,
    .ro_copy = shm_copy,
    .ro_direct = shm_direct,
};
