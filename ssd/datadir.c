/* SPDX-License-Identifier: MIT */
#include "ssd/datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <inttypes.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

static pid_t read_holder(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return (pid_t)strtol(buf, NULL, 10);
}

/* mkdir -p: creates path and its missing parents. */
static int mkdir_p(const char *path, mode_t mode)
{
	char *p = strdup(path);
	int err = 0;

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			err = -errno;
		*s = '/';
		if (err)
			goto out_free;
	}
	if (mkdir(p, mode) < 0 && errno != EEXIST)
		err = -errno;
out_free:
	free(p);
	return err;
}

int kv_datadir_open(struct kv_datadir *dd, const char *path, pid_t *holder)
{
	char pid[32];
	int err, len;

	*holder = 0;
	err = mkdir_p(path, 0700);
	if (err)
		return err;
	dd->kd_dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dd->kd_dirfd < 0)
		return -errno;
	dd->kd_lockfd = openat(dd->kd_dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (dd->kd_lockfd < 0) {
		err = -errno;
		goto out_close_dir;
	}
	if (flock(dd->kd_lockfd, LOCK_EX | LOCK_NB) < 0) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (err == -EBUSY)
			*holder = read_holder(dd->kd_lockfd);
		goto out_close_lock;
	}
	len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(dd->kd_lockfd, 0) < 0 || pwrite(dd->kd_lockfd, pid, len, 0) != len) {
		err = -errno;
		goto out_close_lock;
	}
	return 0;

out_close_lock:
	close(dd->kd_lockfd);
out_close_dir:
	close(dd->kd_dirfd);
	return err;
}

/* Bytes held by the files of DATA_DIR/buckets. */
static uint64_t buckets_bytes(int dirfd)
{
	int fd = openat(dirfd, "buckets", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t total = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return 0;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (fstatat(fd, de->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
			total += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return total;
}

int kv_datadir_default_quota(const struct kv_datadir *dd, uint64_t *quota)
{
	struct statvfs sv;

	if (fstatvfs(dd->kd_dirfd, &sv) < 0)
		return -errno;
	*quota = (uint64_t)sv.f_bavail * sv.f_frsize / 10 * 9 + buckets_bytes(dd->kd_dirfd);
	return 0;
}

void kv_datadir_close(struct kv_datadir *dd)
{
	close(dd->kd_lockfd);
	close(dd->kd_dirfd);
}

int kv_datadir_node(const struct kv_datadir *dd, uint64_t *node)
{
	char buf[32];
	uint64_t id = 0;
	ssize_t n;
	int fd = openat(dd->kd_dirfd, "node", O_RDONLY | O_CLOEXEC), err = 0;

	if (fd >= 0) {
		n = pread(fd, buf, sizeof(buf) - 1, 0);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			id = strtoull(buf, NULL, 16);
		}
		if (id) {
			*node = id;
			return 0;
		}
		/* empty or damaged (a crash while it was made): make it again */
	} else if (errno != ENOENT)
		return -errno;
	while (!id)
		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			return -errno;
	fd = openat(dd->kd_dirfd, "node.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	n = snprintf(buf, sizeof(buf), "%016" PRIx64 "\n", id);
	if (write(fd, buf, (size_t)n) != n || fsync(fd) < 0)
		err = errno ? -errno : -EIO;
	close(fd);
	if (!err && renameat(dd->kd_dirfd, "node.tmp", dd->kd_dirfd, "node") < 0)
		err = -errno;
	if (!err && fsync(dd->kd_dirfd) < 0)
		err = -errno;
	if (!err)
		*node = id;
	return err;
}
