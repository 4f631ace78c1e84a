/* SPDX-License-Identifier: MIT */
/*
 * ssd/fileio.c — whole-buffer reads and writes (ssd/fileio.h).
 */
#include "ssd/fileio.h"

#include <errno.h>
#include <stdlib.h>
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
