/* SPDX-License-Identifier: MIT */
/*
 * ssd/fileio.c — whole-buffer reads and writes (ssd/fileio.h).
 */
#include "ssd/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum io_kind { IO_PREAD, IO_PWRITE, IO_WRITE };

/* The one loop: all len bytes, EINTR retried; -EIO when a call moves nothing. */
static int io_all(int fd, enum io_kind kind, void *buf, uint64_t len, uint64_t off)
{
	uint64_t done = 0;

	while (done < len) {
		char *p = (char *)buf + done;
		ssize_t n = kind == IO_WRITE	? write(fd, p, len - done)
			    : kind == IO_PWRITE ? pwrite(fd, p, len - done, (off_t)(off + done))
						: pread(fd, p, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (uint64_t)n;
	}
	return 0;
}

int kv_write_all(int fd, const void *buf, size_t len)
{
	return io_all(fd, IO_WRITE, (void *)buf, len, 0);
}

int kv_prw_all(int fd, bool write, void *buf, uint64_t len, uint64_t off)
{
	return io_all(fd, write ? IO_PWRITE : IO_PREAD, buf, len, off);
}

int kv_read_whole(int fd, char **out, uint64_t *len)
{
	struct stat sb;
	uint64_t got = 0;
	char *buf;

	if (fstat(fd, &sb) < 0)
		return -errno;
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (got < (uint64_t)sb.st_size) {
		ssize_t n = pread(fd, buf + got, (size_t)sb.st_size - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return -errno;
		}
		if (n == 0)
			break;
		got += (uint64_t)n;
	}
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return 0;
}

int kv_file_head(uint64_t magic, uint32_t version, const char *pool, const char *ns, char **head,
		 size_t *hlen)
{
	size_t plen = strlen(pool), nlen = strlen(ns);
	const struct kv_file_head h = {.fh_magic = magic,
				       .fh_version = version,
				       .fh_pool_len = (uint16_t)plen,
				       .fh_ns_len = (uint16_t)nlen};

	if (plen > 1024 || nlen > 1024)
		return -EINVAL;
	*hlen = sizeof(h) + plen + nlen;
	*head = malloc(*hlen);
	if (!*head)
		return -ENOMEM;
	memcpy(*head, &h, sizeof(h));
	memcpy(*head + sizeof(h), pool, plen);
	memcpy(*head + sizeof(h) + plen, ns, nlen);
	return 0;
}

int kv_file_load(int dirfd, const char *name, int *fd, char **buf, uint64_t *len)
{
	int err;

	*buf = NULL;
	*len = 0;
	*fd = openat(dirfd, name, O_RDWR | O_APPEND | O_CLOEXEC);
	if (*fd < 0)
		return errno == ENOENT ? 0 : -errno;
	err = kv_read_whole(*fd, buf, len);
	if (err) {
		close(*fd);
		*fd = -1;
	}
	return err;
}

int kv_file_create(int dirfd, const char *name, const char *head, size_t hlen)
{
	int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
	int err;

	if (fd < 0)
		return -errno;
	err = kv_write_all(fd, head, hlen);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}
