/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/shared_fixture.h — what the tests of the shared tier
 * (tests/unit/test_shared_*.c, rados/shared.h) share: a scratch data
 * directory under /tmp, made and removed.
 *
 * The helpers are static inline: each test program includes this header
 * once and uses some of them.
 */
#ifndef KVFS_TESTS_SHARED_FIXTURE_H
#define KVFS_TESTS_SHARED_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A scratch data directory, removed with what is in it by rm_dir. */
static inline int scratch_dir(char *path)
{
	int fd;

	strcpy(path, "/tmp/kvfs-test-shared.XXXXXX");
	assert_non_null(mkdtemp(path));
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

static inline void rm_dir(int fd, const char *path)
{
	char cmd[128];

	close(fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	assert_int_equal(system(cmd), 0);
}

#endif
