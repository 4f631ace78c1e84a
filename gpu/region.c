/* SPDX-License-Identifier: MIT */
/*
 * gpu/region.c — the table of regions and layouts (see gpu/region.h).
 *
 * Ids. The table has KV_REGION_SLOTS slots for regions and as many for
 * layouts; an id is (generation << SLOT_BITS) | slot, and a slot's
 * generation grows each time it is reused, so a stale id names nothing
 * (-EBADF) instead of someone else's new region. Finding an id is one
 * array index.
 */
#include "gpu/region.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gpu/copy_pool.h"
#include "gpu/dev.h"
#ifdef KVFS_HAVE_CUDA
#include "gpu/cuda.h"
#endif

#define SLOT_BITS	12
#define KV_REGION_SLOTS (1u << SLOT_BITS)
#define GEN_MAX		((UINT32_MAX >> SLOT_BITS) - 1)
/* Pieces of daemon memory handed to one ro_copy call. */
#define COPY_IOV 64
/* A copy is cut into parts for the copy pool's helpers when each part gets this much at least. */
#define COPY_PART_MIN (512u << 10)
/* Parts start on this boundary of the logical bytes: two threads never write one cache line. */
#define COPY_PART_ALIGN 4096u

struct kv_lseg {
	struct kv_region *ls_region;
	uint64_t ls_base, ls_stride, ls_len;
};

struct kv_layout {
	uint32_t ly_id;	 /* immutable */
	pid_t ly_owner;	 /* immutable */
	uint64_t ly_tag; /* immutable */
	uint64_t ly_nblocks;
	uint64_t ly_block_len;
	uint32_t ly_nsegs;
	struct kv_lseg ly_segs[];
};

/* How many regions and layouts one open file (tag) holds. */
struct kv_tagref {
	uint64_t tr_tag;
	uint32_t tr_count;
};

struct kv_region_table {
	pthread_rwlock_t rt_lock; /* guards everything below but the tags */
	struct kv_region *rt_region[KV_REGION_SLOTS];
	struct kv_layout *rt_layout[KV_REGION_SLOTS];
	uint32_t rt_rgen[KV_REGION_SLOTS], rt_lgen[KV_REGION_SLOTS];
	uint32_t rt_nregions, rt_nlayouts;
	uint32_t rt_rnext, rt_lnext; /* where the next free-slot search starts */
	/*
	 * The tags holding anything, so that the close of any other file (the
	 * common case) returns without waiting for rt_lock behind a batch.
	 * rt_tag_lock (a mutex, taken inside rt_lock or alone) guards them.
	 */
	pthread_mutex_t rt_tag_lock;
	struct kv_tagref rt_tags[2 * KV_REGION_SLOTS];
	uint32_t rt_ntags;
	struct kv_copy_pool *rt_copy; /* immutable: helpers for large host copies */
};

const struct kv_region_ops *kv_region_ops_of(uint32_t kind)
{
	switch (kind) {
	case KVFS_REGION_HOST_SHM:
		return &kv_host_shm_ops;
	case KVFS_REGION_HOST_PROC:
		return &kv_host_proc_ops;
#ifdef KVFS_HAVE_CUDA
	case KVFS_REGION_CUDA_IPC:
		return kv_dev_cuda() ? &kv_cuda_ipc_ops : NULL;
	case KVFS_REGION_CUDA_VMM:
		return kv_dev_cuda() ? &kv_cuda_vmm_ops : NULL;
#endif
	default:
		return NULL;
	}
}

uint32_t kv_region_kinds(void)
{
	uint32_t cuda = 1u << KVFS_REGION_CUDA_IPC | 1u << KVFS_REGION_CUDA_VMM;

	return 1u << KVFS_REGION_HOST_SHM | 1u << KVFS_REGION_HOST_PROC |
	       (kv_dev_cuda() ? cuda : 0);
}

int kv_region_table_create(unsigned copy_helpers, struct kv_region_table **out)
{
	struct kv_region_table *t = calloc(1, sizeof(*t));
	pthread_rwlockattr_t attr;
	int err;

	if (!t)
		return -ENOMEM;
	pthread_rwlockattr_init(&attr);
	/* A batch holds the lock shared for long: registrations must not starve. */
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	err = -pthread_rwlock_init(&t->rt_lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	if (err) {
		free(t);
		return err;
	}
	err = kv_copy_pool_create(copy_helpers, &t->rt_copy);
	if (err) {
		pthread_rwlock_destroy(&t->rt_lock);
		free(t);
		return err;
	}
	pthread_mutex_init(&t->rt_tag_lock, NULL);
	*out = t;
	return 0;
}

/* The entry of tag, or NULL (rt_tag_lock held). */
static struct kv_tagref *tag_find(struct kv_region_table *t, uint64_t tag)
{
	for (uint32_t i = 0; i < t->rt_ntags; i++)
		if (t->rt_tags[i].tr_tag == tag)
			return &t->rt_tags[i];
	return NULL;
}

static void tag_add(struct kv_region_table *t, uint64_t tag)
{
	struct kv_tagref *tr;

	pthread_mutex_lock(&t->rt_tag_lock);
	tr = tag_find(t, tag);
	if (!tr) { /* one entry per region or layout at most: there is room */
		tr = &t->rt_tags[t->rt_ntags++];
		*tr = (struct kv_tagref){tag, 0};
	}
	tr->tr_count++;
	pthread_mutex_unlock(&t->rt_tag_lock);
}

static void tag_drop(struct kv_region_table *t, uint64_t tag)
{
	struct kv_tagref *tr;

	pthread_mutex_lock(&t->rt_tag_lock);
	tr = tag_find(t, tag);
	if (tr && --tr->tr_count == 0)
		*tr = t->rt_tags[--t->rt_ntags];
	pthread_mutex_unlock(&t->rt_tag_lock);
}

static bool tag_held(struct kv_region_table *t, uint64_t tag)
{
	bool held;

	pthread_mutex_lock(&t->rt_tag_lock);
	held = tag_find(t, tag) != NULL;
	pthread_mutex_unlock(&t->rt_tag_lock);
	return held;
}

static uint32_t slot_of(uint32_t id)
{
	return id & (KV_REGION_SLOTS - 1);
}

/* A free slot and its next id, or -ENOSPC (rt_lock exclusive). */
static int slot_alloc(void *const *slots, uint32_t *gen, uint32_t *next, uint32_t *id)
{
	for (uint32_t i = 0; i < KV_REGION_SLOTS; i++) {
		uint32_t s = (*next + i) & (KV_REGION_SLOTS - 1);

		if (slots[s])
			continue;
		gen[s] = gen[s] >= GEN_MAX ? 1 : gen[s] + 1;
		*id = gen[s] << SLOT_BITS | s;
		*next = s + 1;
		return 0;
	}
	return -ENOSPC;
}

static struct kv_region *region_find(struct kv_region_table *t, uint32_t id)
{
	struct kv_region *r = t->rt_region[slot_of(id)];

	return r && r->rg_id == id ? r : NULL;
}

static struct kv_layout *layout_find(struct kv_region_table *t, uint32_t id)
{
	struct kv_layout *l = t->rt_layout[slot_of(id)];

	return l && l->ly_id == id ? l : NULL;
}

static void layout_free(struct kv_region_table *t, struct kv_layout *l)
{
	for (uint32_t i = 0; i < l->ly_nsegs; i++)
		l->ly_segs[i].ls_region->rg_users--;
	t->rt_layout[slot_of(l->ly_id)] = NULL;
	t->rt_nlayouts--;
	tag_drop(t, l->ly_tag);
	free(l);
}

static bool layout_uses(const struct kv_layout *l, const struct kv_region *r)
{
	for (uint32_t i = 0; i < l->ly_nsegs; i++)
		if (l->ly_segs[i].ls_region == r)
			return true;
	return false;
}

/* Frees a region and every layout over it (rt_lock exclusive). */
static void region_free(struct kv_region_table *t, struct kv_region *r)
{
	for (uint32_t s = 0; r->rg_users && s < KV_REGION_SLOTS; s++)
		if (t->rt_layout[s] && layout_uses(t->rt_layout[s], r))
			layout_free(t, t->rt_layout[s]);
	t->rt_region[slot_of(r->rg_id)] = NULL;
	t->rt_nregions--;
	tag_drop(t, r->rg_tag);
	r->rg_ops->ro_close(r);
	if (r->rg_pidfd >= 0)
		close(r->rg_pidfd);
	free(r);
}

void kv_region_table_destroy(struct kv_region_table *t)
{
	for (uint32_t s = 0; s < KV_REGION_SLOTS; s++)
		if (t->rt_region[s])
			region_free(t, t->rt_region[s]);
	kv_copy_pool_destroy(t->rt_copy);
	pthread_rwlock_destroy(&t->rt_lock);
	pthread_mutex_destroy(&t->rt_tag_lock);
	free(t);
}

/* True once the process behind a pidfd has exited. */
static bool pidfd_exited(int pidfd)
{
	struct pollfd p = {.fd = pidfd, .events = POLLIN};

	return pidfd >= 0 && poll(&p, 1, 0) > 0;
}

static void reap_locked(struct kv_region_table *t)
{
	for (uint32_t s = 0; t->rt_nregions && s < KV_REGION_SLOTS; s++)
		if (t->rt_region[s] && pidfd_exited(t->rt_region[s]->rg_pidfd))
			region_free(t, t->rt_region[s]);
}

void kv_region_reap(struct kv_region_table *t)
{
	pthread_rwlock_wrlock(&t->rt_lock);
	reap_locked(t);
	pthread_rwlock_unlock(&t->rt_lock);
}

static uint32_t owned_regions(struct kv_region_table *t, pid_t tgid)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < KV_REGION_SLOTS; s++)
		n += t->rt_region[s] && t->rt_region[s]->rg_owner == tgid;
	return n;
}

static uint32_t owned_layouts(struct kv_region_table *t, pid_t tgid)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < KV_REGION_SLOTS; s++)
		n += t->rt_layout[s] && t->rt_layout[s]->ly_owner == tgid;
	return n;
}

int kv_region_register(struct kv_region_table *t, const struct kv_caller *c,
		       const struct kv_region_desc *d, uint32_t *id)
{
	const struct kv_region_ops *ops = kv_region_ops_of(d->rd_kind);
	struct kv_region *r;
	int err;

	if (d->rd_kind < KVFS_REGION_HOST_SHM || d->rd_kind > KVFS_REGION_CUDA_VMM ||
	    d->rd_length == 0)
		return -EINVAL;
	if (!ops)
		return -EOPNOTSUPP;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->rg_kind = d->rd_kind;
	r->rg_table = t;
	r->rg_owner = c->kc_tgid;
	r->rg_tag = c->kc_tag;
	r->rg_len = d->rd_length;
	r->rg_ops = ops;
	r->rg_pidfd = (int)syscall(SYS_pidfd_open, c->kc_tgid, 0);
	if (r->rg_pidfd < 0) {
		err = -errno;
		goto out_free;
	}
	/* Mapping and probing happen outside the table's lock. */
	err = ops->ro_open(r, d, c);
	if (err)
		goto out_pidfd;
	pthread_rwlock_wrlock(&t->rt_lock);
	reap_locked(t);
	err = owned_regions(t, c->kc_tgid) >= KVFS_MAX_REGIONS ? -EMFILE : 0;
	if (!err)
		err = slot_alloc((void *const *)t->rt_region, t->rt_rgen, &t->rt_rnext, &r->rg_id);
	if (!err) {
		t->rt_region[slot_of(r->rg_id)] = r;
		t->rt_nregions++;
		tag_add(t, r->rg_tag);
		*id = r->rg_id;
	}
	pthread_rwlock_unlock(&t->rt_lock);
	if (!err)
		return 0;
	ops->ro_close(r);
out_pidfd:
	close(r->rg_pidfd);
out_free:
	free(r);
	return err;
}

int kv_region_unregister(struct kv_region_table *t, const struct kv_caller *c, uint32_t id)
{
	struct kv_region *r;
	int err = 0;

	pthread_rwlock_wrlock(&t->rt_lock);
	r = region_find(t, id);
	if (!r)
		err = -EBADF;
	else if (r->rg_owner != c->kc_tgid)
		err = -EPERM;
	else if (r->rg_users)
		err = -EBUSY;
	else
		region_free(t, r);
	pthread_rwlock_unlock(&t->rt_lock);
	return err;
}

/* Checks one segment against its region; sets *nblocks for it. */
static int seg_check(struct kv_region_table *t, const struct kv_caller *c,
		     const struct kvfs_ioc_seg *s, struct kv_lseg *out, uint64_t *nblocks)
{
	struct kv_region *r;
	uint64_t end;

	if (s->sg_pad || s->sg_length == 0)
		return -EINVAL;
	r = region_find(t, s->sg_region);
	if (!r)
		return -EBADF;
	if (r->rg_owner != c->kc_tgid)
		return -EPERM;
	if (__builtin_add_overflow(s->sg_base, s->sg_length, &end) || end > r->rg_len)
		return -EFAULT;
	*nblocks = s->sg_stride ? (r->rg_len - end) / s->sg_stride + 1 : UINT64_MAX;
	*out = (struct kv_lseg){r, s->sg_base, s->sg_stride, s->sg_length};
	return 0;
}

int kv_layout_register(struct kv_region_table *t, const struct kv_caller *c,
		       const struct kvfs_ioc_seg *segs, uint32_t nsegs, uint32_t *id,
		       uint64_t *block_len, uint64_t *nblocks)
{
	struct kv_layout *l;
	int err = 0;

	if (nsegs == 0 || nsegs > KVFS_LAYOUT_MAX_SEGS)
		return -EINVAL;
	l = calloc(1, sizeof(*l) + nsegs * sizeof(l->ly_segs[0]));
	if (!l)
		return -ENOMEM;
	l->ly_owner = c->kc_tgid;
	l->ly_tag = c->kc_tag;
	l->ly_nsegs = nsegs;
	l->ly_nblocks = UINT64_MAX;
	pthread_rwlock_wrlock(&t->rt_lock);
	for (uint32_t i = 0; !err && i < nsegs; i++) {
		uint64_t n;

		err = seg_check(t, c, &segs[i], &l->ly_segs[i], &n);
		if (!err &&
		    __builtin_add_overflow(l->ly_block_len, segs[i].sg_length, &l->ly_block_len))
			err = -EFAULT;
		if (!err && n < l->ly_nblocks)
			l->ly_nblocks = n;
	}
	if (!err && owned_layouts(t, c->kc_tgid) >= KVFS_MAX_LAYOUTS)
		err = -EMFILE;
	if (!err)
		err = slot_alloc((void *const *)t->rt_layout, t->rt_lgen, &t->rt_lnext, &l->ly_id);
	if (!err) {
		for (uint32_t i = 0; i < nsegs; i++)
			l->ly_segs[i].ls_region->rg_users++;
		t->rt_layout[slot_of(l->ly_id)] = l;
		t->rt_nlayouts++;
		tag_add(t, l->ly_tag);
		*id = l->ly_id;
		*block_len = l->ly_block_len;
		*nblocks = l->ly_nblocks;
	}
	pthread_rwlock_unlock(&t->rt_lock);
	if (err)
		free(l);
	return err;
}

int kv_layout_unregister(struct kv_region_table *t, const struct kv_caller *c, uint32_t id)
{
	struct kv_layout *l;
	int err = 0;

	pthread_rwlock_wrlock(&t->rt_lock);
	l = layout_find(t, id);
	if (!l)
		err = -EBADF;
	else if (l->ly_owner != c->kc_tgid)
		err = -EPERM;
	else
		layout_free(t, l);
	pthread_rwlock_unlock(&t->rt_lock);
	return err;
}

unsigned kv_region_release_tag(struct kv_region_table *t, uint64_t tag)
{
	unsigned n = 0;

	if (!tag_held(t, tag))
		return 0;
	pthread_rwlock_wrlock(&t->rt_lock);
	for (uint32_t s = 0; t->rt_nlayouts && s < KV_REGION_SLOTS; s++)
		if (t->rt_layout[s] && t->rt_layout[s]->ly_tag == tag) {
			layout_free(t, t->rt_layout[s]);
			n++;
		}
	for (uint32_t s = 0; t->rt_nregions && s < KV_REGION_SLOTS; s++)
		if (t->rt_region[s] && t->rt_region[s]->rg_tag == tag) {
			region_free(t, t->rt_region[s]);
			n++;
		}
	pthread_rwlock_unlock(&t->rt_lock);
	return n;
}

void kv_region_counts(struct kv_region_table *t, uint64_t *regions, uint64_t *layouts)
{
	pthread_rwlock_rdlock(&t->rt_lock);
	*regions = t->rt_nregions;
	*layouts = t->rt_nlayouts;
	pthread_rwlock_unlock(&t->rt_lock);
}

void kv_region_begin(struct kv_region_table *t)
{
	pthread_rwlock_rdlock(&t->rt_lock);
}

void kv_region_end(struct kv_region_table *t)
{
	pthread_rwlock_unlock(&t->rt_lock);
}

int kv_region_span(struct kv_region_table *t, pid_t tgid, uint32_t id, uint64_t off, uint64_t len,
		   struct kv_span *out)
{
	struct kv_region *r = region_find(t, id);
	uint64_t end;

	if (!r)
		return -EBADF;
	if (r->rg_owner != tgid)
		return -EPERM;
	if (len == 0)
		return -EINVAL;
	if (__builtin_add_overflow(off, len, &end) || end > r->rg_len)
		return -EFAULT;
	*out = (struct kv_span){r, off, len};
	return 0;
}

int kv_layout_spans(struct kv_region_table *t, pid_t tgid, uint32_t id, uint64_t block,
		    struct kv_span *out, uint64_t *total)
{
	struct kv_layout *l = layout_find(t, id);

	if (!l)
		return -EBADF;
	if (l->ly_owner != tgid)
		return -EPERM;
	if (block >= l->ly_nblocks)
		return -EFAULT;
	/* block < ly_nblocks: base + block * stride + len lies inside each region. */
	for (uint32_t i = 0; i < l->ly_nsegs; i++) {
		const struct kv_lseg *s = &l->ly_segs[i];

		out[i] =
		    (struct kv_span){s->ls_region, s->ls_base + block * s->ls_stride, s->ls_len};
	}
	*total = l->ly_block_len;
	return (int)l->ly_nsegs;
}

/*
 * Hands each span's part of logical bytes [off, off + len) to its
 * backend's ro_copy: walks the spans and the daemon's iov side by side,
 * the iov from byte ioff of iov[i] on, and gathers the iov pieces
 * covering each span's overlap (at most COPY_IOV per call).
 */
static int copy_pieces(const struct kv_span *sp, int nsp, bool to_region, uint64_t off,
		       uint64_t len, const struct iovec *iov, int i, uint64_t ioff)
{
	struct iovec piece[COPY_IOV];
	uint64_t start = 0, cur = off, end = off + len;
	int err = 0;

	for (int s = 0; !err && s < nsp && cur < end; s++) {
		uint64_t s_end = start + sp[s].sp_len;

		while (!err && cur < s_end && cur < end) {
			uint64_t roff = sp[s].sp_off + (cur - start), got = 0;
			uint64_t want = (s_end < end ? s_end : end) - cur;
			int n = 0;

			while (got < want && n < COPY_IOV) {
				uint64_t m = iov[i].iov_len - ioff;

				if (m > want - got)
					m = want - got;
				piece[n].iov_base = (char *)iov[i].iov_base + ioff;
				piece[n++].iov_len = m;
				got += m;
				ioff += m;
				if (ioff == iov[i].iov_len) {
					i++;
					ioff = 0;
				}
			}
			err = sp[s].sp_region->rg_ops->ro_copy(sp[s].sp_region, to_region, roff,
							       piece, n);
			cur += got;
		}
		start = s_end;
	}
	return err;
}

/* One copy cut into parts for kv_copy_pool_run: part k is [cp_at[k], cp_at[k + 1]). */
struct copy_job {
	const struct kv_span *cj_sp;
	int cj_nsp;
	bool cj_to_region;
	const struct iovec *cj_iov;
	uint64_t cj_at[KV_COPY_PARTS_MAX + 1]; /* logical offsets */
	int cj_i[KV_COPY_PARTS_MAX];	       /* where part k starts in the iov: iov[i] ... */
	uint64_t cj_ioff[KV_COPY_PARTS_MAX];   /* ... at byte ioff */
	int cj_err[KV_COPY_PARTS_MAX];
};

static void copy_part(void *arg, unsigned k)
{
	struct copy_job *j = arg;

	j->cj_err[k] =
	    copy_pieces(j->cj_sp, j->cj_nsp, j->cj_to_region, j->cj_at[k],
			j->cj_at[k + 1] - j->cj_at[k], j->cj_iov, j->cj_i[k], j->cj_ioff[k]);
}

/* Whether two of the spans share a byte: a region byte written twice. */
static bool spans_overlap(const struct kv_span *sp, int nsp)
{
	for (int a = 0; a < nsp; a++)
		for (int b = a + 1; b < nsp; b++)
			if (sp[a].sp_region == sp[b].sp_region &&
			    sp[a].sp_off < sp[b].sp_off + sp[b].sp_len &&
			    sp[b].sp_off < sp[a].sp_off + sp[a].sp_len)
				return true;
	return false;
}

/*
 * Copies as copy_pieces does, the whole iov, on several threads when the
 * copy is large and every span's backend copies synchronously (host
 * memory: a device backend queues its copies on the calling thread, to be
 * synced there). The parts are runs of logical bytes of about equal size
 * starting on COPY_PART_ALIGN (page-aligned memory: no cache line written
 * by two threads). Spans that overlap keep a copy into them on one thread,
 * so that a byte they share gets the last span's, as in one pass.
 */
static int copy_all(const struct kv_span *sp, int nsp, bool to_region, uint64_t off,
		    const struct iovec *iov, int niov)
{
	struct kv_copy_pool *pool = nsp ? sp[0].sp_region->rg_table->rt_copy : NULL;
	struct copy_job j = {.cj_sp = sp, .cj_nsp = nsp, .cj_to_region = to_region, .cj_iov = iov};
	uint64_t total = 0, step, at = 0;
	unsigned parts = 0, k;
	int i = 0;

	for (int n = 0; n < niov; n++)
		total += iov[n].iov_len;
	if (pool) {
		parts = kv_copy_pool_width(pool);
		if (parts > total / COPY_PART_MIN)
			parts = (unsigned)(total / COPY_PART_MIN);
	}
	for (int s = 0; parts > 1 && s < nsp; s++)
		if (sp[s].sp_region->rg_ops->ro_sync)
			parts = 1;
	if (parts > 1 && to_region && spans_overlap(sp, nsp))
		parts = 1;
	if (parts < 2)
		return copy_pieces(sp, nsp, to_region, off, total, iov, 0, 0);
	step = (total / parts + COPY_PART_ALIGN - 1) / COPY_PART_ALIGN * COPY_PART_ALIGN;
	for (k = 0; k < parts; k++) {
		uint64_t from = k * step < total ? k * step : total;

		/* Walk the iov from the previous part's start to this one's. */
		while (i < niov && at + iov[i].iov_len <= from) {
			at += iov[i].iov_len;
			i++;
		}
		j.cj_at[k] = off + from;
		j.cj_i[k] = i;
		j.cj_ioff[k] = from - at;
	}
	j.cj_at[parts] = off + total;
	kv_copy_pool_run(pool, copy_part, &j, parts);
	for (k = 0; k < parts; k++)
		if (j.cj_err[k])
			return j.cj_err[k];
	return 0;
}

/* Syncs every region of the spans (also after an error); 0 or the first error. */
static int sync_all(const struct kv_span *sp, int nsp, int err)
{
	for (int s = 0; s < nsp; s++) {
		const struct kv_region_ops *ops = sp[s].sp_region->rg_ops;
		int e = ops->ro_sync ? ops->ro_sync(sp[s].sp_region) : 0;

		if (e && !err)
			err = e;
	}
	return err;
}

int kv_span_copy(const struct kv_span *sp, int nsp, bool to_region, uint64_t off,
		 const struct iovec *iov, int niov)
{
	return sync_all(sp, nsp, copy_all(sp, nsp, to_region, off, iov, niov));
}

int kv_span_copy_start(const struct kv_span *sp, int nsp, bool to_region, uint64_t off,
		       const struct iovec *iov, int niov, struct kv_copy_ticket *t)
{
	int err = copy_all(sp, nsp, to_region, off, iov, niov);

	*t = (struct kv_copy_ticket){0};
	for (int s = 0; !err && s < nsp; s++) {
		const struct kv_region_ops *ops = sp[s].sp_region->rg_ops;

		/* One issue covers every device copy the thread queued. */
		if (ops->ro_issue)
			return ops->ro_issue(sp[s].sp_region, t);
	}
	return sync_all(sp, nsp, err);
}

int kv_span_direct(const struct kv_span *sp, int nsp, size_t align, struct iovec *iov, int max)
{
	if (nsp > max)
		return 0;
	for (int s = 0; s < nsp; s++) {
		const struct kv_region *r = sp[s].sp_region;
		char *p = r->rg_ops->ro_direct ? r->rg_ops->ro_direct(sp[s].sp_region, sp[s].sp_off)
					       : NULL;

		if (!p || (uintptr_t)p % align || sp[s].sp_len % align)
			return 0;
		iov[s] = (struct iovec){p, sp[s].sp_len};
	}
	return nsp;
}
