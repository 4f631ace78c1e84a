/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_region.c — the region table and its host backends
 * (gpu/region.h): registration checks, ownership, ids, layouts and their
 * block arithmetic, limits, release by tag and by process exit, the span
 * copier against a model (also copies large enough to run in parts on the
 * copy pool's helpers), and a shared-memory object shrunk under a copy.
 *
 * The "caller" of every call is this process (a HOST_PROC region of our own
 * memory is reachable with process_vm_readv without privileges), or a
 * forked child where a test needs another, or a dead, process.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/dev.h"
#include "gpu/region.h"

#ifdef KVFS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PAGE 4096u
#define MIB  (1u << 20)
/* The copy pool of every table here: copies of a megabyte or more run in parts on helpers. */
#define HELPERS 3

static char shm_name[64];

static struct kv_caller me(uint64_t tag)
{
	return (struct kv_caller){.kc_tgid = getpid(), .kc_uid = getuid(), .kc_tag = tag};
}

/* A fresh shared-memory object of len bytes (pattern filled), mapped here. */
static char *shm_new(size_t len)
{
	int fd;
	char *p;

	snprintf(shm_name, sizeof(shm_name), "/kvfs-test-region-%d", (int)getpid());
	fd = shm_open(shm_name, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	close(fd);
	for (size_t i = 0; i < len; i++)
		p[i] = (char)(i * 7 + 3);
	return p;
}

static struct kv_region_desc shm_desc(uint64_t off, uint64_t len)
{
	return (struct kv_region_desc){.rd_kind = KVFS_REGION_HOST_SHM,
				       .rd_offset = off,
				       .rd_length = len,
				       .rd_shm_name = shm_name};
}

static struct kv_region_desc proc_desc(const void *addr, uint64_t len)
{
	return (struct kv_region_desc){
	    .rd_kind = KVFS_REGION_HOST_PROC, .rd_addr = (uintptr_t)addr, .rd_length = len};
}

static struct kv_region_table *table(void)
{
	struct kv_region_table *t = NULL;

	assert_int_equal(kv_region_table_create(HELPERS, &t), 0);
	return t;
}

static void counts(struct kv_region_table *t, uint64_t regions, uint64_t layouts)
{
	uint64_t r, l;

	kv_region_counts(t, &r, &l);
	assert_int_equal(r, regions);
	assert_int_equal(l, layouts);
}

static void test_shm_register_span_copy(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	struct kv_region_desc d;
	char *mem = shm_new(3 * PAGE), buf[300], back[300];
	struct kv_span sp;
	struct iovec iov[3];
	uint32_t id, other;

	(void)state;
	d = shm_desc(100, 5000);
	assert_int_equal(kv_region_register(t, &c, &d, &id), 0);
	assert_int_not_equal(id, 0);
	assert_int_equal(kv_region_register(t, &c, &d, &other), 0);
	assert_int_not_equal(id, other);
	counts(t, 2, 0);

	kv_region_begin(t);
	assert_int_equal(kv_region_span(t, getpid(), id, 4900, 100, &sp), 0);
	assert_int_equal(kv_region_span(t, getpid(), id, 4900, 101, &sp), -EFAULT);
	assert_int_equal(kv_region_span(t, getpid(), id, UINT64_MAX, 2, &sp), -EFAULT);
	assert_int_equal(kv_region_span(t, getpid(), id, 0, 0, &sp), -EINVAL);
	assert_int_equal(kv_region_span(t, getpid() + 1, id, 0, 1, &sp), -EPERM);
	assert_int_equal(kv_region_span(t, getpid(), id ^ 0x1000, 0, 1, &sp), -EBADF);

	/* Out of the region (region byte 10 = object byte 110), in three pieces, and back. */
	assert_int_equal(kv_region_span(t, getpid(), id, 10, 300, &sp), 0);
	iov[0] = (struct iovec){buf, 1};
	iov[1] = (struct iovec){buf + 1, 150};
	iov[2] = (struct iovec){buf + 151, 149};
	assert_int_equal(kv_span_copy(&sp, 1, false, 0, iov, 3), 0);
	assert_memory_equal(buf, mem + 110, 300);
	for (int i = 0; i < 300; i++)
		back[i] = (char)~buf[i];
	iov[0] = (struct iovec){back, 300};
	assert_int_equal(kv_span_copy(&sp, 1, true, 0, iov, 1), 0);
	assert_memory_equal(mem + 110, back, 300);
	assert_int_equal(mem[109], (char)(109 * 7 + 3)); /* the bytes around are untouched */
	assert_int_equal(mem[410], (char)(410 * 7 + 3));
	kv_region_end(t);

	assert_int_equal(kv_region_unregister(t, &c, id), 0);
	assert_int_equal(kv_region_unregister(t, &c, id), -EBADF);
	kv_region_table_destroy(t);
	munmap(mem, 3 * PAGE);
	shm_unlink(shm_name);
}

static void test_shm_refusals(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	struct kv_region_desc d;
	char *mem = shm_new(2 * PAGE);
	uint32_t id;
	static const char *const bad[] = {"", "/", "noslash", "/a/b", "/.", "/.."};

	(void)state;
	d = shm_desc(0, 2 * PAGE + 1);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EFAULT);
	d = shm_desc(UINT64_MAX, 2);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EFAULT);
	d = shm_desc(0, 0);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		d = shm_desc(0, 1);
		d.rd_shm_name = bad[i];
		assert_int_equal(kv_region_register(t, &c, &d, &id), -EINVAL);
	}
	d = shm_desc(0, 1);
	d.rd_shm_name = "/kvfs-test-region-does-not-exist";
	assert_int_equal(kv_region_register(t, &c, &d, &id), -ENOENT);
	/* Another user's object. */
	c.kc_uid = getuid() + 1;
	d = shm_desc(0, 1);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EPERM);
	counts(t, 0, 0);
	kv_region_table_destroy(t);
	munmap(mem, 2 * PAGE);
	shm_unlink(shm_name);
}

static void test_kinds(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	struct kv_region_desc d = {.rd_length = 1};
	uint32_t id;

	(void)state;
	assert_non_null(kv_region_ops_of(KVFS_REGION_HOST_SHM));
	assert_non_null(kv_region_ops_of(KVFS_REGION_HOST_PROC));
	assert_null(kv_region_ops_of(KVFS_REGION_CUDA_IPC));
	assert_int_equal(kv_region_kinds(),
			 1u << KVFS_REGION_HOST_SHM | 1u << KVFS_REGION_HOST_PROC);
	d.rd_kind = KVFS_REGION_CUDA_IPC;
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EOPNOTSUPP);
	d.rd_kind = KVFS_REGION_CUDA_VMM;
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EOPNOTSUPP);
	d.rd_kind = 0;
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EINVAL);
	d.rd_kind = 99;
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EINVAL);
	kv_region_table_destroy(t);
}

static void test_proc(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	struct kv_region_desc d;
	char *buf = malloc(8192), out[1000];
	void *hole;
	struct kv_span sp;
	struct iovec iov = {out, sizeof(out)};
	uint32_t id;

	(void)state;
	for (int i = 0; i < 8192; i++)
		buf[i] = (char)(i ^ 0x5a);
	d = proc_desc(buf, 8192);
	assert_int_equal(kv_region_register(t, &c, &d, &id), 0);
	kv_region_begin(t);
	assert_int_equal(kv_region_span(t, getpid(), id, 7000, 1000, &sp), 0);
	assert_int_equal(kv_span_copy(&sp, 1, false, 0, &iov, 1), 0);
	assert_memory_equal(out, buf + 7000, 1000);
	memset(out, 0xee, sizeof(out));
	assert_int_equal(kv_span_copy(&sp, 1, true, 0, &iov, 1), 0);
	assert_memory_equal(buf + 7000, out, 1000);
	kv_region_end(t);

	/* Unmapped memory, a range that overflows, and one past the address space. */
	hole = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(hole != MAP_FAILED);
	munmap(hole, PAGE);
	d = proc_desc(hole, PAGE);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EFAULT);
	d = proc_desc(buf, UINT64_MAX);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EFAULT);
	d = proc_desc((void *)(uintptr_t)0xffffffffff600000ull, PAGE);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EFAULT);
	counts(t, 1, 0);
	kv_region_table_destroy(t);
	free(buf);
}

static void test_layouts(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	struct kv_region_desc d;
	char *a = malloc(100000), *b = malloc(50000);
	struct kvfs_ioc_seg s[3];
	struct kv_span sp[KVFS_LAYOUT_MAX_SEGS];
	uint32_t ra, rb, l, l0;
	uint64_t blen, nb, total;

	(void)state;
	d = proc_desc(a, 100000);
	assert_int_equal(kv_region_register(t, &c, &d, &ra), 0);
	d = proc_desc(b, 50000);
	assert_int_equal(kv_region_register(t, &c, &d, &rb), 0);
	/* a: blocks of 1000 at 0 (99 fit after the base...), b: 500 at 100, stride 600. */
	s[0] = (struct kvfs_ioc_seg){
	    .sg_region = ra, .sg_base = 0, .sg_stride = 1000, .sg_length = 1000};
	s[1] = (struct kvfs_ioc_seg){
	    .sg_region = rb, .sg_base = 100, .sg_stride = 600, .sg_length = 500};
	s[2] = (struct kvfs_ioc_seg){
	    .sg_region = ra, .sg_base = 99000, .sg_stride = 0, .sg_length = 1000};
	assert_int_equal(kv_layout_register(t, &c, s, 3, &l, &blen, &nb), 0);
	assert_int_equal(blen, 2500);
	/* a: (100000 - 1000) / 1000 + 1 = 100; b: (50000 - 600) / 600 + 1 = 83; stride 0: any. */
	assert_int_equal(nb, 83);
	kv_region_begin(t);
	assert_int_equal(kv_layout_spans(t, getpid(), l, 82, sp, &total), 3);
	assert_int_equal(total, 2500);
	assert_int_equal(sp[0].sp_off, 82000);
	assert_int_equal(sp[1].sp_off, 100 + 82 * 600);
	assert_int_equal(sp[1].sp_off + sp[1].sp_len, 49800);
	assert_int_equal(sp[2].sp_off, 99000);
	assert_int_equal(kv_layout_spans(t, getpid(), l, 83, sp, &total), -EFAULT);
	assert_int_equal(kv_layout_spans(t, getpid(), l, UINT64_MAX, sp, &total), -EFAULT);
	assert_int_equal(kv_layout_spans(t, getpid() + 1, l, 0, sp, &total), -EPERM);
	assert_int_equal(kv_layout_spans(t, getpid(), l + 1, 0, sp, &total), -EBADF);
	kv_region_end(t);

	/* Only stride 0: every block index is valid. */
	assert_int_equal(kv_layout_register(t, &c, &s[2], 1, &l0, &blen, &nb), 0);
	assert_int_equal(nb, UINT64_MAX);

	/* Refusals. */
	s[1].sg_base = 49501;
	assert_int_equal(kv_layout_register(t, &c, s, 2, &l0, &blen, &nb), -EFAULT);
	s[1].sg_base = UINT64_MAX - 10;
	assert_int_equal(kv_layout_register(t, &c, s, 2, &l0, &blen, &nb), -EFAULT);
	s[1].sg_base = 0;
	s[1].sg_length = 0;
	assert_int_equal(kv_layout_register(t, &c, s, 2, &l0, &blen, &nb), -EINVAL);
	s[1].sg_length = 1;
	s[1].sg_pad = 1;
	assert_int_equal(kv_layout_register(t, &c, s, 2, &l0, &blen, &nb), -EINVAL);
	s[1].sg_pad = 0;
	s[1].sg_region = 12345;
	assert_int_equal(kv_layout_register(t, &c, s, 2, &l0, &blen, &nb), -EBADF);
	assert_int_equal(kv_layout_register(t, &c, s, 0, &l0, &blen, &nb), -EINVAL);
	assert_int_equal(kv_layout_register(t, &c, s, KVFS_LAYOUT_MAX_SEGS + 1, &l0, &blen, &nb),
			 -EINVAL);
	c.kc_tgid = getpid() + 1;
	s[1].sg_region = rb;
	assert_int_equal(kv_layout_register(t, &c, s, 2, &l0, &blen, &nb), -EPERM);
	assert_int_equal(kv_layout_unregister(t, &c, l), -EPERM);
	assert_int_equal(kv_region_unregister(t, &c, ra), -EPERM);
	c = me(1);
	counts(t, 2, 2);

	/* A region in use stays until its layouts go. */
	assert_int_equal(kv_region_unregister(t, &c, ra), -EBUSY);
	assert_int_equal(kv_layout_unregister(t, &c, l), 0);
	assert_int_equal(kv_region_unregister(t, &c, rb), 0);
	assert_int_equal(kv_region_unregister(t, &c, ra), -EBUSY); /* the stride-0 layout */
	kv_region_table_destroy(t);				   /* frees the rest */
	free(a);
	free(b);
}

static void test_limits(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	char *buf = malloc(PAGE);
	struct kv_region_desc d = proc_desc(buf, PAGE);
	struct kvfs_ioc_seg s = {.sg_length = 1};
	uint32_t id, first;
	uint64_t blen, nb;

	(void)state;
	for (int i = 0; i < KVFS_MAX_REGIONS; i++)
		assert_int_equal(kv_region_register(t, &c, &d, i ? &id : &first), 0);
	assert_int_equal(kv_region_register(t, &c, &d, &id), -EMFILE);
	s.sg_region = first;
	for (int i = 0; i < KVFS_MAX_LAYOUTS; i++)
		assert_int_equal(kv_layout_register(t, &c, &s, 1, &id, &blen, &nb), 0);
	assert_int_equal(kv_layout_register(t, &c, &s, 1, &id, &blen, &nb), -EMFILE);
	counts(t, KVFS_MAX_REGIONS, KVFS_MAX_LAYOUTS);
	kv_region_table_destroy(t);
	free(buf);
}

static void test_release_tag(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c5 = me(5), c6 = me(6);
	char *buf = malloc(PAGE);
	struct kv_region_desc d = proc_desc(buf, PAGE);
	struct kvfs_ioc_seg s = {.sg_length = 1};
	uint32_t r5, r6, l6;
	uint64_t blen, nb;

	(void)state;
	assert_int_equal(kv_region_register(t, &c5, &d, &r5), 0);
	assert_int_equal(kv_region_register(t, &c6, &d, &r6), 0);
	s.sg_region = r5;
	assert_int_equal(kv_layout_register(t, &c6, &s, 1, &l6, &blen, &nb), 0);
	assert_int_equal(kv_region_release_tag(t, 7), 0);
	counts(t, 2, 1);
	/* Tag 5's region goes, and the layout of tag 6 over it with it. */
	assert_int_equal(kv_region_release_tag(t, 5), 1);
	counts(t, 1, 0);
	assert_int_equal(kv_layout_unregister(t, &c6, l6), -EBADF);
	assert_int_equal(kv_region_release_tag(t, 6), 1);
	counts(t, 0, 0);
	kv_region_table_destroy(t);
	free(buf);
}

/* A region whose owner exits is reaped through its pidfd. */
static void test_reap(void **state)
{
	struct kv_region_table *t = table();
	char *mem = shm_new(PAGE);
	struct kv_region_desc d = shm_desc(0, PAGE);
	struct kv_caller c = me(1);
	int go[2];
	uint32_t id;
	pid_t pid;
	char x = 0;

	(void)state;
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(go[1]);
		_exit(read(go[0], &x, 1) == 1 ? 0 : 1);
	}
	close(go[0]);
	c.kc_tgid = pid;
	assert_int_equal(kv_region_register(t, &c, &d, &id), 0);
	kv_region_reap(t);
	counts(t, 1, 0);
	assert_int_equal(write(go[1], &x, 1), 1);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	kv_region_reap(t);
	counts(t, 0, 0);
	close(go[1]);
	kv_region_table_destroy(t);
	munmap(mem, PAGE);
	shm_unlink(shm_name);
}

/* Random spans over two regions and random iov cuts, against a plain-memory model. */
static void test_span_copy_model(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	char *mem = shm_new(64 * 1024), *pm = malloc(64 * 1024), *local = malloc(70000),
	     *model = malloc(70000);
	struct kv_region_desc d;
	uint32_t rs, rp;
	unsigned seed = 1;

	(void)state;
	d = shm_desc(0, 64 * 1024);
	assert_int_equal(kv_region_register(t, &c, &d, &rs), 0);
	d = proc_desc(pm, 64 * 1024);
	assert_int_equal(kv_region_register(t, &c, &d, &rp), 0);
	kv_region_begin(t);
	for (int round = 0; round < 300; round++) {
		struct kv_span sp[8];
		struct iovec iov[200];
		char *base[8];
		int nsp = rand_r(&seed) % 8 + 1, niov = 0;
		uint64_t total = 0, off, len, at = 0;
		bool to_region = rand_r(&seed) & 1;

		for (int s = 0; s < nsp; s++) {
			bool shm = rand_r(&seed) & 1;
			uint64_t l = (uint64_t)(rand_r(&seed) % 4000) + 1;
			/* Span s lives in slot s of its region: spans never overlap. */
			uint64_t o = (uint64_t)s * 8192 + (uint64_t)(rand_r(&seed) % (8192 - l));

			assert_int_equal(kv_region_span(t, getpid(), shm ? rs : rp, o, l, &sp[s]),
					 0);
			base[s] = (shm ? mem : pm) + o;
			total += l;
		}
		off = (uint64_t)rand_r(&seed) % total;
		len = (uint64_t)rand_r(&seed) % (total - off) + 1;
		for (uint64_t done = 0; done < len; niov++) {
			uint64_t n = (uint64_t)(rand_r(&seed) % 700) + 1;

			n = n > len - done || niov == 199 ? len - done : n;
			iov[niov] = (struct iovec){local + done, n};
			done += n;
		}
		for (uint64_t i = 0; i < len; i++)
			local[i] = (char)rand_r(&seed);
		/* The model: the spans' bytes, concatenated. */
		for (int s = 0; s < nsp; s++) {
			memcpy(model + at, base[s], sp[s].sp_len);
			at += sp[s].sp_len;
		}
		assert_int_equal(kv_span_copy(sp, nsp, to_region, off, iov, niov), 0);
		if (to_region)
			memcpy(model + off, local, len);
		else
			memcpy(local, model + off, len);
		at = 0;
		for (int s = 0; s < nsp; s++) {
			assert_memory_equal(base[s], model + at, sp[s].sp_len);
			at += sp[s].sp_len;
		}
		assert_memory_equal(local, model + off, len);
	}
	kv_region_end(t);
	kv_region_table_destroy(t);
	munmap(mem, 64 * 1024);
	shm_unlink(shm_name);
	free(pm);
	free(local);
	free(model);
}

/*
 * Copies large enough to run in parts on the copy pool's helpers: random
 * spans (up to 32, of up to 512 KiB) over a shared-memory and a process
 * region, random iov cuts (some empty), random starts, against the model.
 */
static void test_span_copy_split(void **state)
{
	const uint64_t slot = 512 * 1024, size = 32 * slot;
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	char *mem = shm_new(size), *pm = malloc(size), *local = malloc(size), *model = malloc(size);
	struct kv_region_desc d;
	uint32_t rs, rp;
	unsigned seed = 7;

	(void)state;
	d = shm_desc(0, size);
	assert_int_equal(kv_region_register(t, &c, &d, &rs), 0);
	d = proc_desc(pm, size);
	assert_int_equal(kv_region_register(t, &c, &d, &rp), 0);
	for (uint64_t i = 0; i < size; i++)
		pm[i] = (char)(i * 13 + 5);
	kv_region_begin(t);
	for (int round = 0; round < 40; round++) {
		struct kv_span sp[32];
		struct iovec iov[300];
		char *base[32];
		int nsp = rand_r(&seed) % 32 + 1, niov = 0;
		uint64_t total = 0, off, len, at = 0;
		bool to_region = rand_r(&seed) & 1;

		for (int s = 0; s < nsp; s++) {
			bool shm = rand_r(&seed) & 1;
			uint64_t l = (uint64_t)rand_r(&seed) % slot + 1;
			uint64_t o = (uint64_t)s * slot + (uint64_t)rand_r(&seed) % (slot - l + 1);

			assert_int_equal(kv_region_span(t, getpid(), shm ? rs : rp, o, l, &sp[s]),
					 0);
			base[s] = (shm ? mem : pm) + o;
			total += l;
		}
		off = round % 2 ? (uint64_t)rand_r(&seed) % (total / 4 + 1) : 0;
		len = total - off;
		for (uint64_t done = 0; done < len; niov++) {
			uint64_t n =
			    rand_r(&seed) % 8 == 0 ? 0 : (uint64_t)rand_r(&seed) % (300 << 10);

			n = n > len - done || niov == 299 ? len - done : n;
			iov[niov] = (struct iovec){local + done, n};
			done += n;
		}
		for (uint64_t i = 0; i < len; i++)
			local[i] = (char)rand_r(&seed);
		for (int s = 0; s < nsp; s++) {
			memcpy(model + at, base[s], sp[s].sp_len);
			at += sp[s].sp_len;
		}
		assert_int_equal(kv_span_copy(sp, nsp, to_region, off, iov, niov), 0);
		if (to_region)
			memcpy(model + off, local, len);
		else
			memcpy(local, model + off, len);
		at = 0;
		for (int s = 0; s < nsp; s++) {
			assert_memory_equal(base[s], model + at, sp[s].sp_len);
			at += sp[s].sp_len;
		}
		assert_memory_equal(local, model + off, len);
	}
	kv_region_end(t);
	kv_region_table_destroy(t);
	munmap(mem, size);
	shm_unlink(shm_name);
	free(pm);
	free(local);
	free(model);
}

/*
 * Into spans that overlap, a large copy leaves what one pass would: the
 * later span's bytes. Cut into parts, the end of the first span and the
 * start of the second (where they overlap) would run at about the same
 * time, the first's last.
 */
static void test_span_copy_overlap(void **state)
{
	const uint64_t at = 1920 * 1024; /* where the second span starts in the region */
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	char *mem = shm_new(4 * MIB), *local = malloc(4 * MIB);
	struct kv_region_desc d = shm_desc(0, 4 * MIB);
	struct kv_span sp[2];
	struct iovec iov = {local, 4 * MIB};
	uint32_t id;
	unsigned seed = 3;

	(void)state;
	assert_int_equal(kv_region_register(t, &c, &d, &id), 0);
	kv_region_begin(t);
	assert_int_equal(kv_region_span(t, getpid(), id, 0, 2 * MIB, &sp[0]), 0);
	assert_int_equal(kv_region_span(t, getpid(), id, at, 2 * MIB, &sp[1]), 0);
	for (int round = 0; round < 20; round++) {
		for (uint64_t i = 0; i < 4 * MIB; i++)
			local[i] = (char)rand_r(&seed);
		assert_int_equal(kv_span_copy(sp, 2, true, 0, &iov, 1), 0);
		assert_memory_equal(mem, local, at);
		assert_memory_equal(mem + at, local + 2 * MIB, 2 * MIB);
	}
	kv_region_end(t);
	kv_region_table_destroy(t);
	munmap(mem, 4 * MIB);
	shm_unlink(shm_name);
	free(local);
}

/* The owner shrinks its object under the daemon: the copy fails with EIO, nothing crashes. */
static void test_shm_shrunk(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	char *mem = shm_new(4 * PAGE), out[2 * PAGE];
	struct kv_region_desc d = shm_desc(0, 4 * PAGE);
	struct kv_span sp;
	struct iovec iov = {out, sizeof(out)};
	uint32_t id;
	int fd;

	(void)state;
	assert_int_equal(kv_region_register(t, &c, &d, &id), 0);
	fd = shm_open(shm_name, O_RDWR, 0);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, PAGE), 0);
	close(fd);
	kv_region_begin(t);
	assert_int_equal(kv_region_span(t, getpid(), id, 2 * PAGE, 2 * PAGE, &sp), 0);
	assert_int_equal(kv_span_copy(&sp, 1, false, 0, &iov, 1), -EIO);
	assert_int_equal(kv_span_copy(&sp, 1, true, 0, &iov, 1), -EIO);
	assert_int_equal(kv_region_span(t, getpid(), id, 0, 100, &sp), 0);
	iov.iov_len = 100;
	assert_int_equal(kv_span_copy(&sp, 1, false, 0, &iov, 1), 0);
	assert_memory_equal(out, mem, 100);
	kv_region_end(t);
	kv_region_table_destroy(t);
	munmap(mem, 4 * PAGE);
	shm_unlink(shm_name);
}

/* As above, in a copy large enough to run in parts: the parts past the end fail it. */
static void test_shm_shrunk_split(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	char *mem = shm_new(4 * MIB), *out = malloc(4 * MIB);
	struct kv_region_desc d = shm_desc(0, 4 * MIB);
	struct kv_span sp;
	struct iovec iov = {out, 4 * MIB};
	uint32_t id;
	int fd;

	(void)state;
	assert_int_equal(kv_region_register(t, &c, &d, &id), 0);
	fd = shm_open(shm_name, O_RDWR, 0);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, MIB), 0);
	close(fd);
	kv_region_begin(t);
	assert_int_equal(kv_region_span(t, getpid(), id, 0, 4 * MIB, &sp), 0);
	for (int round = 0; round < 10; round++) {
		assert_int_equal(kv_span_copy(&sp, 1, false, 0, &iov, 1), -EIO);
		assert_int_equal(kv_span_copy(&sp, 1, true, 0, &iov, 1), -EIO);
	}
	assert_int_equal(kv_region_span(t, getpid(), id, 0, MIB, &sp), 0);
	iov.iov_len = MIB;
	memset(out, 0, MIB);
	assert_int_equal(kv_span_copy(&sp, 1, false, 0, &iov, 1), 0);
	assert_memory_equal(out, mem, MIB);
	kv_region_end(t);
	kv_region_table_destroy(t);
	munmap(mem, 4 * MIB);
	shm_unlink(shm_name);
	free(out);
}

/* Spans the daemon maps, 4 KiB-aligned, become iovecs for O_DIRECT; nothing else does. */
static void test_span_direct(void **state)
{
	struct kv_region_table *t = table();
	struct kv_caller c = me(1);
	char *mem = shm_new(8 * PAGE), *pm = aligned_alloc(PAGE, 8 * PAGE);
	struct kv_region_desc d = shm_desc(0, 8 * PAGE);
	struct kv_span sp[3];
	struct iovec iov[3];
	uint32_t rs, rp;

	(void)state;
	assert_int_equal(kv_region_register(t, &c, &d, &rs), 0);
	d = proc_desc(pm, 8 * PAGE);
	assert_int_equal(kv_region_register(t, &c, &d, &rp), 0);
	kv_region_begin(t);
	assert_int_equal(kv_region_span(t, getpid(), rs, 4 * PAGE, 2 * PAGE, &sp[0]), 0);
	assert_int_equal(kv_region_span(t, getpid(), rs, 0, PAGE, &sp[1]), 0);
	assert_int_equal(kv_span_direct(sp, 2, PAGE, iov, 3), 2);
	assert_int_equal(kv_span_direct(sp, 2, PAGE, iov, 1), 0); /* no room */
	/* The daemon's own mapping: writing there is writing the object. */
	memset(iov[0].iov_base, 0x77, iov[0].iov_len);
	assert_int_equal(mem[4 * PAGE], 0x77);
	assert_int_equal(mem[6 * PAGE - 1], 0x77);
	assert_int_equal(iov[1].iov_len, PAGE);
	assert_int_equal(kv_region_span(t, getpid(), rs, 100, PAGE, &sp[2]), 0);
	assert_int_equal(kv_span_direct(sp, 3, PAGE, iov, 3), 0); /* misaligned start */
	assert_int_equal(kv_region_span(t, getpid(), rs, 0, PAGE + 1, &sp[2]), 0);
	assert_int_equal(kv_span_direct(sp, 3, PAGE, iov, 3), 0); /* misaligned length */
	assert_int_equal(kv_region_span(t, getpid(), rp, 0, PAGE, &sp[2]), 0);
	assert_int_equal(kv_span_direct(sp, 3, PAGE, iov, 3), 0); /* process memory */
	kv_region_end(t);
	kv_region_table_destroy(t);
	munmap(mem, 8 * PAGE);
	shm_unlink(shm_name);
	free(pm);
}

/*
 * The CUDA backend in force (a CUDA build on a machine with a device):
 * both device kinds served; a registration naming no device of the
 * daemon's is -ENODEV, a made-up handle on a real device -EINVAL, a VMM fd
 * that is no CUDA handle -EINVAL, and nothing stays registered. Skipped,
 * with the reason, anywhere else.
 */
static void test_cuda_backend(void **state)
{
	char note[256];
	int rc;

	(void)state;
	rc = kv_dev_start(KV_DEV_AUTO, note, sizeof(note));
	assert_int_equal(rc, 0); /* auto never refuses to start */
	if (!kv_dev_cuda()) {
		print_message("skipped: no CUDA backend here: %s\n", note);
		skip();
	}
#ifdef KVFS_HAVE_CUDA
	{
		struct kv_region_table *t = table();
		struct kv_caller c = me(1);
		struct cudaDeviceProp p;
		uint8_t uuid[16], handle[64];
		struct kv_region_desc d = {.rd_kind = KVFS_REGION_CUDA_IPC,
					   .rd_length = 4096,
					   .rd_dev_uuid = uuid,
					   .rd_ipc_handle = handle};
		uint64_t regions, layouts;
		uint32_t id;
		int fd = open("/dev/null", O_RDONLY);

		assert_int_equal(kv_region_kinds() &
				     (1u << KVFS_REGION_CUDA_IPC | 1u << KVFS_REGION_CUDA_VMM),
				 1u << KVFS_REGION_CUDA_IPC | 1u << KVFS_REGION_CUDA_VMM);
		assert_non_null(kv_region_ops_of(KVFS_REGION_CUDA_VMM));
		memset(uuid, 0xab, sizeof(uuid));
		memset(handle, 0x5a, sizeof(handle));
		assert_int_equal(kv_region_register(t, &c, &d, &id), -ENODEV);
		assert_int_equal(cudaGetDeviceProperties(&p, 0), cudaSuccess);
		memcpy(uuid, p.uuid.bytes, sizeof(uuid));
		assert_int_equal(kv_region_register(t, &c, &d, &id), -EINVAL);
		d = (struct kv_region_desc){.rd_kind = KVFS_REGION_CUDA_VMM,
					    .rd_length = 4096,
					    .rd_fd = fd,
					    .rd_dev_uuid = uuid};
		assert_int_equal(kv_region_register(t, &c, &d, &id), -EINVAL);
		kv_region_counts(t, &regions, &layouts);
		assert_int_equal(regions, 0);
		close(fd);
		kv_region_table_destroy(t);
	}
#endif
	kv_dev_stop();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_shm_register_span_copy),
	    cmocka_unit_test(test_shm_refusals),
	    cmocka_unit_test(test_kinds),
	    cmocka_unit_test(test_cuda_backend),
	    cmocka_unit_test(test_proc),
	    cmocka_unit_test(test_layouts),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_release_tag),
	    cmocka_unit_test(test_reap),
	    cmocka_unit_test(test_span_copy_model),
	    cmocka_unit_test(test_span_copy_split),
	    cmocka_unit_test(test_span_copy_overlap),
	    cmocka_unit_test(test_shm_shrunk),
	    cmocka_unit_test(test_shm_shrunk_split),
	    cmocka_unit_test(test_span_direct),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
