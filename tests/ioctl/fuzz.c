/* SPDX-License-Identifier: MIT */
/*
 * tests/ioctl/fuzz.c — random and adversarial ioctls against a live daemon,
 * every answer checked against a model of what the daemon must hold.
 *
 *   ioctl_e2e fuzz DIR N SEED [MODEL first|next|verify]
 *
 * N ioctls come from a seeded generator: unknown command numbers and sizes,
 * known commands full of random bytes, valid headers with random bodies,
 * and structured batches and registrations whose every field is drawn from
 * valid values, boundary values (0, the last valid one, one past it,
 * UINT64_MAX) and noise. Each answer must be a documented errno. Beyond
 * that the fuzzer knows what the daemon must answer:
 *
 * - The model holds every name the fuzzer made below the mount's root
 *   (DIR's keys and directories, the canary keys beside DIR) with each
 *   key's exact bytes, and the table of its regions and layouts. Every key
 *   of every batch that runs, random or built, is predicted from them in
 *   key order: a key that breaks a documented rule (its name, its memory)
 *   fails with the errno of one of the rules it breaks; any other key gets
 *   exactly what the model says (the bytes stored, the size found, the
 *   count removed, -ENOENT, -ENOTDIR, -EISDIR, -EEXIST, -EMSGSIZE with the
 *   modelled size in ik_size), and what succeeded is applied to the model.
 *   A successful get's memory, poisoned before, is compared byte for byte
 *   with the model wherever it overlaps no other key's.
 * - Every ROUND_EVERY ioctls an oracle round: batches of good keys and of
 *   keys carrying one deliberate fault each (a bad name, an unknown region
 *   or layout, a range outside its region, a block past its layout, a
 *   misplaced iov list, a missing key or parent, a file as a parent, a
 *   directory, the wrong size, an existing key under NOREPLACE), each of
 *   which must fail with that fault's errno while the others succeed; now
 *   and then a tree the kernel has cached (stat, an open fd) removed by
 *   ioctl: the fd still reads the old bytes.
 * - Values over five SSD extents (10 MiB, what one SSD read covers), got
 *   into memory of the wrong size (exactly five extents among them): each
 *   must be -EMSGSIZE with the whole size.
 * - Regions registered on a directory fd and on .kvfs/ctl opened
 *   write-only keep working while other descriptors of the same and of
 *   other files open and close, in this process and in a child that
 *   exits; each is gone once its own descriptor closes.
 * - Guard bytes around the random regions and the canary keys beside DIR
 *   are unchanged at the end.
 *
 * MODEL carries the model from one mount of the same data to the next:
 * "first" saves it; "next" loads it, reads every key back first (from the
 * SSD, after a remount), fuzzes and saves it again; "verify" reads every
 * key back. A failed check prints the seed. The tally of what was sent is
 * printed for the driver to compare with the daemon's statistics.
 */
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ioc_util.h"

#define RLEN	    (256u << 10) /* registered bytes of each random region */
#define NCANARY	    8
#define MAXFRESH    8		/* registrations the fuzzer keeps before unregistering */
#define OLEN	    (8u << 20)	/* each region of the oracle rounds */
#define OLAYOUT	    (1u << 20)	/* the start of od and oq, where the destination layout lies */
#define BIGLEN	    (24u << 20) /* each region of the big values */
#define MIB	    (1ull << 20)
#define EXTENT	    (2ull << 20) /* an SSD extent: one SSD read covers five */
#define RCLEN	    (64u << 10)	 /* each region of the registration checks */
#define PROBE	    4096u	 /* bytes of @rc/probe, the key that tells a region is alive */
#define RCW	    20000u	 /* bytes each registration check puts and gets */
#define ROUND_EVERY 1000	 /* random ioctls between two oracle rounds */
#define MAXREGS	    160
#define MAXLAYS	    96
#define MAXK	    KVFS_BATCH_MAX_KEYS
#define NAMEBUF	    (KVFS_BATCH_DATA_SIZE + 64)
#define WANT_ANY    INT64_MIN	    /* a key the model predicts, whatever it says */
#define WANT_OK	    (INT64_MIN + 1) /* a key the model must predict a success for */

static const char *const good_names[] = {
    "a", "b/c", "k7", "x/y/z", "deep/er/and/deeper/still", "same", "same/sub",
};

/* A key or directory below the mount's root, named from there ("fuzz/k7"). */
struct ment {
	struct ment *next; /* hash chain */
	uint8_t *val;	   /* a key's bytes; NULL: a directory, or bytes the fuzzer cannot see */
	uint64_t size;
	size_t kidx; /* index in model.keys */
	bool dir;
	bool busy; /* open for writing by the fuzzer: a lookup or get may say -EBUSY */
	uint32_t len;
	char name[];
};

struct model {
	struct ment **tab;
	size_t cap, n;
	struct ment **keys; /* every key, to draw from */
	size_t nkeys, maxkeys;
};

/* A region or layout of the fuzzer's (or, other, of another process's). */
struct mreg {
	uint32_t id;
	bool other;
	char *base; /* NULL: memory the fuzzer does not read (other, or outside its buffers) */
	uint64_t len;
};

struct mlay {
	uint32_t id, nsegs;
	uint64_t blen, nblocks;
	struct kvfs_ioc_seg *segs;
};

struct span {
	char *p; /* NULL: memory the fuzzer cannot read */
	uint64_t len;
};

/* A key's memory as the model sees it: the errnos it must fail with, or its spans. */
struct kmem {
	uint32_t errs; /* ebit() of each rule it breaks */
	bool foreign;
	int n;
	uint64_t total;
	struct span sp[KVFS_LAYOUT_MAX_SEGS];
};

struct sweep {
	char *p, *end;
	uint32_t key;
};

/* A batch built on purpose: what each key must give and what it carries. */
struct sb {
	unsigned long cmd;
	int fd;
	bool at_root;
	struct bt_build b;
	int64_t want[MAXK];
	const char *fault[MAXK];
};

struct fresh {
	uint32_t id;
	bool layout;
};

struct fz {
	uint64_t s; /* xorshift state */
	unsigned long seed;
	const char *dir, *phase, *model_path;
	char ph; /* the phase's letter in the names of its oracle keys */
	char pfx[256];
	size_t pfxlen; /* DIR's name in the mount's root, "/" included */
	int dirfd, rootfd, filefd, ctlfd;
	uint32_t rs, rp, layout;
	struct fresh fresh[MAXFRESH];
	int nfresh;
	char shm[64], shm_other[64], shm_o[64], shm_b[64], shm_rc[64];
	char *smem, *pmem; /* 3 * RLEN each: guard, registered, guard */
	uint8_t *buf, *in; /* the ioctl argument as returned, and as sent */
	/* oracle rounds: sources os, op; destinations od, oq (a layout lod at their start) */
	char *os, *op, *od, *oq;
	uint32_t ros, rop, rod, roq, lod;
	uint64_t lod_nblocks, bump[4];
	/* big values: a source and two destinations */
	char *bs, *bd, *bp;
	uint32_t rbs, rbd, rbp;
	/* registration checks: 3 * RCLEN each */
	char *rcs, *rcm;
	uint32_t dead_region, dead_layout;
	struct mreg regs[MAXREGS];
	int nregs;
	struct mlay lays[MAXLAYS];
	int nlays;
	struct model md;
	struct kmem *km;
	struct ment **kent;
	struct sweep *sw;
	uint8_t *dirty;
	struct sb sb;
	char *nbuf, *full;
	char last[16][96];
	int nlast;
	uint64_t ctr, fcount[32]; /* fcount: keys built with each fault */
	long i;
	int round;
	bool done;
	char ctx[200];
	struct {
		uint64_t rounds, fault_keys, checked_gets, overlapped, regchecks, rmtrees;
		uint64_t verified, verified_ssd, verified_empty, big_wrong, big_wrong_ssd;
		uint64_t big_keys, enospc, unseen;
	} n;
};

static struct fz *the_fz; /* for the note a failed check leaves */

static uint64_t rnd(struct fz *f)
{
	f->s ^= f->s << 13;
	f->s ^= f->s >> 7;
	f->s ^= f->s << 17;
	return f->s;
}

static uint64_t below(struct fz *f, uint64_t n)
{
	return n ? rnd(f) % n : 0;
}

/* A value for a 64-bit offset, length, block or address field. */
static uint64_t pick64(struct fz *f, uint64_t valid_end)
{
	switch (below(f, 8)) {
	case 0:
		return 0;
	case 1:
		return valid_end ? valid_end - 1 : 0;
	case 2:
		return valid_end;
	case 3:
		return valid_end + 1;
	case 4:
		return UINT64_MAX - below(f, 16);
	case 5:
		return 1ull << below(f, 64);
	case 6:
		return rnd(f);
	default:
		return below(f, valid_end + 1);
	}
}

static uint32_t pick_id(struct fz *f)
{
	switch (below(f, 6)) {
	case 0:
		return f->rs;
	case 1:
		return f->rp;
	case 2:
		return f->layout;
	case 3:
		return 0;
	case 4:
		return f->nfresh ? f->fresh[below(f, (uint64_t)f->nfresh)].id : 1;
	default:
		return (uint32_t)rnd(f);
	}
}

/* --- messages --- */

/* The per-key errnos first: ebit() numbers them. */
static const struct {
	int err;
	const char *name;
} errnames[] = {
    {EINVAL, "EINVAL"},	    {ENAMETOOLONG, "ENAMETOOLONG"},
    {EBADF, "EBADF"},	    {EPERM, "EPERM"},
    {EFAULT, "EFAULT"},	    {ENOENT, "ENOENT"},
    {ENOTDIR, "ENOTDIR"},   {EISDIR, "EISDIR"},
    {EMSGSIZE, "EMSGSIZE"}, {EEXIST, "EEXIST"},
    {EBUSY, "EBUSY"},	    {ENOSPC, "ENOSPC"},
    {EIO, "EIO"},	    {ENOTEMPTY, "ENOTEMPTY"},
    {ENOMEM, "ENOMEM"},	    {ENOTTY, "ENOTTY"},
    {EPROTO, "EPROTO"},	    {E2BIG, "E2BIG"},
};
#define NEBITS 12

/* The bit of a per-key errno in a set of them (kmem.errs); 0 for any other. */
static uint32_t ebit(int64_t err)
{
	for (unsigned i = 0; i < NEBITS; i++)
		if (err == errnames[i].err)
			return 1u << i;
	return 0;
}

/* A result as the header writes it: bytes, or -ENAME. */
static const char *res(int64_t r)
{
	static char b[8][48];
	static int k;
	char *o = b[k++ & 7];

	if (r == WANT_OK)
		return "success";
	if (r >= 0) {
		snprintf(o, 48, "%lld", (long long)r);
		return o;
	}
	for (unsigned i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
		if (-r == errnames[i].err) {
			snprintf(o, 48, "-%s", errnames[i].name);
			return o;
		}
	snprintf(o, 48, "-errno %lld", (long long)-r);
	return o;
}

static const char *errs_shown(uint32_t errs)
{
	static char o[160];
	size_t n = 0;

	o[0] = '\0';
	for (unsigned i = 0; i < NEBITS; i++)
		if (errs & (1u << i))
			n += (size_t)snprintf(o + n, sizeof(o) - n, "%s%s", n ? "|" : "",
					      errnames[i].name);
	return o;
}

/* A name fit for a message: escaped, cut short. */
static const char *shown(const char *p, size_t len)
{
	static char out[4][240];
	static int k;
	char *o = out[k++ & 3];
	size_t j = 0;

	for (size_t i = 0; i < len && j < 200; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c >= 0x20 && c < 0x7f && c != '\\')
			o[j++] = (char)c;
		else
			j += (size_t)snprintf(o + j, 8, "\\x%02x", c);
	}
	if (j >= 200)
		j += (size_t)snprintf(o + j, 32, "...(%zu bytes)", len);
	o[j] = '\0';
	return o;
}

static const char *cmd_name(unsigned long cmd)
{
	return cmd == KVFS_IOC_LOOKUP ? "lookup"
	       : cmd == KVFS_IOC_PUT  ? "put"
	       : cmd == KVFS_IOC_GET  ? "get"
				      : "remove";
}

static void ctx(struct fz *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->ctx, sizeof(f->ctx), fmt, ap);
	va_end(ap);
}

/* Said when a check fails (exit(1) runs it): what ran, and how to run it again. */
static void fail_note(void)
{
	struct fz *f = the_fz;

	if (!f || f->done)
		return;
	fprintf(stderr,
		"fuzz: failed with seed %lu, phase %s, after %ld random ioctls, round %d, during: "
		"%s\nfuzz: rerun: ioctl_e2e fuzz DIR N %lu%s%s%s\n",
		f->seed, f->phase, f->i, f->round, f->ctx, f->seed, f->model_path ? " " : "",
		f->model_path ? f->model_path : "", f->model_path ? " PHASE" : "");
	shm_unlink(f->shm);
	shm_unlink(f->shm_other);
	shm_unlink(f->shm_rc);
}

/* --- the model --- */

static uint64_t hash(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
	return h;
}

static struct ment *m_find(struct model *md, const char *name, size_t len)
{
	if (!md->cap)
		return NULL;
	for (struct ment *e = md->tab[hash(name, len) & (md->cap - 1)]; e; e = e->next)
		if (e->len == len && !memcmp(e->name, name, len))
			return e;
	return NULL;
}

static void m_grow(struct model *md)
{
	size_t cap = md->cap ? 2 * md->cap : 4096;
	struct ment **tab = calloc(cap, sizeof(*tab));

	CHECK(tab, "out of memory");
	for (size_t i = 0; i < md->cap; i++)
		while (md->tab[i]) {
			struct ment *e = md->tab[i];

			md->tab[i] = e->next;
			e->next = tab[hash(e->name, e->len) & (cap - 1)];
			tab[hash(e->name, e->len) & (cap - 1)] = e;
		}
	free(md->tab);
	md->tab = tab;
	md->cap = cap;
}

static struct ment *m_insert(struct model *md, const char *name, size_t len, bool dir)
{
	struct ment *e = calloc(1, sizeof(*e) + len + 1);
	struct ment **head;

	CHECK(e, "out of memory");
	if (2 * (md->n + 1) > md->cap)
		m_grow(md);
	memcpy(e->name, name, len);
	e->len = (uint32_t)len;
	e->dir = dir;
	head = &md->tab[hash(name, len) & (md->cap - 1)];
	e->next = *head;
	*head = e;
	md->n++;
	if (!dir) {
		if (md->nkeys == md->maxkeys) {
			md->maxkeys = md->maxkeys ? 2 * md->maxkeys : 4096;
			md->keys = realloc(md->keys, md->maxkeys * sizeof(*md->keys));
			CHECK(md->keys, "out of memory");
		}
		e->kidx = md->nkeys;
		md->keys[md->nkeys++] = e;
	}
	return e;
}

static void m_unlink(struct model *md, struct ment *e)
{
	struct ment **pp = &md->tab[hash(e->name, e->len) & (md->cap - 1)];

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	if (!e->dir) {
		md->keys[e->kidx] = md->keys[--md->nkeys];
		md->keys[e->kidx]->kidx = e->kidx;
	}
	md->n--;
	free(e->val);
	free(e);
}

/* Sets a key's bytes (val: size of them, the model's now; NULL: unseen). */
static struct ment *m_set(struct model *md, const char *name, size_t len, uint8_t *val,
			  uint64_t size)
{
	struct ment *e = m_find(md, name, len);

	CHECK(!e || !e->dir, "model: %s is a directory", shown(name, len));
	if (!e) {
		for (size_t i = 0; i < len; i++)
			if (name[i] == '/' && !m_find(md, name, i))
				m_insert(md, name, i, true);
		e = m_insert(md, name, len, false);
	}
	free(e->val);
	e->val = val;
	e->size = size;
	return e;
}

static bool below_dir(const struct ment *d, const struct ment *e)
{
	return e->len > d->len && e->name[d->len] == '/' && !memcmp(e->name, d->name, d->len);
}

/* The keys a recursive remove of d takes away. */
static uint64_t m_keys_below(struct model *md, const struct ment *d)
{
	uint64_t n = 0;

	for (size_t i = 0; i < md->nkeys; i++)
		n += below_dir(d, md->keys[i]);
	return n;
}

/* Removes e and all below it; returns the keys removed. */
static uint64_t m_remove(struct model *md, struct ment *e)
{
	uint64_t n = e->dir ? 0 : 1;

	if (e->dir) {
		struct ment **gone = NULL;
		size_t k = 0;

		for (size_t i = 0; i < md->cap; i++)
			for (struct ment *c = md->tab[i]; c; c = c->next)
				if (below_dir(e, c)) {
					gone = realloc(gone, (k + 1) * sizeof(*gone));
					CHECK(gone, "out of memory");
					gone[k++] = c;
				}
		for (size_t i = 0; i < k; i++) {
			n += !gone[i]->dir;
			m_unlink(md, gone[i]);
		}
		free(gone);
	}
	m_unlink(md, e);
	return n;
}

/*
 * What the model says of a valid name: 0 and the entry it names (NULL:
 * none), or -ENOTDIR (a key on its path), -ENOENT (a directory of its path
 * missing; with mkdir they would be made, so the name is new).
 */
static int m_walk(struct model *md, const char *name, size_t len, bool mkdir, struct ment **out)
{
	*out = NULL;
	for (size_t i = 0; i < len; i++) {
		struct ment *p;

		if (name[i] != '/')
			continue;
		p = m_find(md, name, i);
		if (!p)
			return mkdir ? 0 : -ENOENT; /* all below it is missing too */
		if (!p->dir)
			return -ENOTDIR;
	}
	*out = m_find(md, name, len);
	return 0;
}

static void m_save(struct fz *f)
{
	char tmp[4200];
	FILE *fp;

	snprintf(tmp, sizeof(tmp), "%s.tmp", f->model_path);
	fp = fopen(tmp, "w");
	CHECK(fp, "open %s: %s", tmp, strerror(errno));
	fprintf(fp, "kvfs-fuzz-model 1\n");
	for (size_t i = 0; i < f->md.cap; i++)
		for (struct ment *e = f->md.tab[i]; e; e = e->next) {
			char t = e->dir ? 'd' : e->val ? 'k' : 'u';

			fputc(t, fp);
			fwrite(&e->len, sizeof(e->len), 1, fp);
			fwrite(e->name, 1, e->len, fp);
			fwrite(&e->size, sizeof(e->size), 1, fp);
			if (t == 'k')
				fwrite(e->val, 1, e->size, fp);
		}
	fputc('.', fp);
	CHECK(!ferror(fp) && fclose(fp) == 0 && rename(tmp, f->model_path) == 0, "save %s",
	      f->model_path);
}

static void m_load(struct fz *f)
{
	FILE *fp = fopen(f->model_path, "r");
	char head[32];
	int t;

	CHECK(fp && fgets(head, sizeof(head), fp) && !strcmp(head, "kvfs-fuzz-model 1\n"),
	      "%s is no model", f->model_path);
	while ((t = fgetc(fp)) == 'd' || t == 'k' || t == 'u') {
		uint32_t len;
		uint64_t size;
		uint8_t *val = NULL;

		CHECK(fread(&len, sizeof(len), 1, fp) == 1 && len < NAMEBUF &&
			  fread(f->nbuf, 1, len, fp) == len &&
			  fread(&size, sizeof(size), 1, fp) == 1,
		      "model %s cut short", f->model_path);
		if (t == 'k') {
			val = malloc(size ? size : 1);
			CHECK(val && fread(val, 1, size, fp) == size, "model value cut short");
		}
		if (t == 'd') {
			if (!m_find(&f->md, f->nbuf, len))
				m_insert(&f->md, f->nbuf, len, true);
		} else {
			m_set(&f->md, f->nbuf, len, val, size);
		}
	}
	CHECK(t == '.', "model %s cut short", f->model_path);
	fclose(fp);
}

/* --- the fuzzer's regions and layouts --- */

static struct mreg *reg_find(struct fz *f, uint32_t id)
{
	for (int i = 0; id && i < f->nregs; i++)
		if (f->regs[i].id == id)
			return &f->regs[i];
	return NULL;
}

static struct mlay *lay_find(struct fz *f, uint32_t id)
{
	for (int i = 0; id && i < f->nlays; i++)
		if (f->lays[i].id == id)
			return &f->lays[i];
	return NULL;
}

static void reg_add(struct fz *f, uint32_t id, char *base, uint64_t len, bool other)
{
	CHECK(id && !reg_find(f, id), "region id %u given twice", id);
	CHECK(f->nregs < MAXREGS, "too many regions");
	f->regs[f->nregs++] = (struct mreg){id, other, base, len};
}

static void lay_del(struct fz *f, uint32_t id)
{
	struct mlay *l = lay_find(f, id);

	CHECK(l, "no layout %u", id);
	free(l->segs);
	*l = f->lays[--f->nlays];
}

/* A region is gone, and with it every layout over it. */
static void reg_del(struct fz *f, uint32_t id)
{
	struct mreg *r = reg_find(f, id);

	CHECK(r, "no region %u", id);
	for (int i = 0; i < f->nlays; i++)
		for (uint32_t s = 0; s < f->lays[i].nsegs; s++)
			if (f->lays[i].segs[s].sg_region == id) {
				lay_del(f, f->lays[i--].id);
				break;
			}
	*r = f->regs[--f->nregs];
}

/*
 * A layout the daemon registered: its segments must have been valid, and
 * its block length and count are the header's (the sum of the lengths; the
 * largest count that keeps every segment inside its region).
 */
static void lay_add(struct fz *f, uint32_t id, const struct kvfs_ioc_seg *segs, uint32_t n,
		    uint64_t blen, uint64_t nblocks)
{
	uint64_t want_len = 0, want_n = UINT64_MAX;
	struct mlay *l;

	CHECK(id && !lay_find(f, id), "layout id %u given twice", id);
	CHECK(f->nlays < MAXLAYS, "too many layouts");
	for (uint32_t i = 0; i < n; i++) {
		const struct kvfs_ioc_seg *s = &segs[i];
		struct mreg *r = reg_find(f, s->sg_region);
		uint64_t end;

		CHECK(r && !r->other, "layout %u registered over region %u, not the fuzzer's", id,
		      s->sg_region);
		CHECK(!s->sg_pad && s->sg_length &&
			  !__builtin_add_overflow(s->sg_base, s->sg_length, &end) && end <= r->len,
		      "layout %u registered with segment %u outside region %u", id, i, r->id);
		want_len += s->sg_length;
		if (s->sg_stride && (r->len - end) / s->sg_stride + 1 < want_n)
			want_n = (r->len - end) / s->sg_stride + 1;
	}
	CHECK(blen == want_len && nblocks == want_n,
	      "layout %u: block length %llu, %llu blocks; the header says %llu, %llu", id,
	      (unsigned long long)blen, (unsigned long long)nblocks, (unsigned long long)want_len,
	      (unsigned long long)want_n);
	l = &f->lays[f->nlays++];
	*l = (struct mlay){id, n, blen, nblocks, malloc(n * sizeof(*segs))};
	CHECK(l->segs, "out of memory");
	memcpy(l->segs, segs, n * sizeof(*segs));
}

/* The fuzzer's own registrations, which random unregistrations must not drop. */
static bool fixture(struct fz *f, uint32_t id)
{
	const uint32_t ids[] = {f->rs,	f->rp,	f->layout, f->ros, f->rop, f->rod,
				f->roq, f->lod, f->rbs,	   f->rbd, f->rbp};

	for (unsigned i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if (id == ids[i])
			return true;
	return false;
}

/* --- what the model says of a key --- */

/* The name rules of the header: the errno of each one the name breaks. */
static uint32_t name_faults(const char *p, size_t len, bool at_root)
{
	uint32_t e = 0;
	size_t start = 0;

	if (len == 0)
		return ebit(EINVAL);
	if (len > KVFS_PATH_MAX)
		e |= ebit(ENAMETOOLONG);
	if (memchr(p, '\0', len))
		e |= ebit(EINVAL);
	for (size_t i = 0; i <= len; i++) {
		size_t n;

		if (i < len && p[i] != '/')
			continue;
		n = i - start;
		if (n == 0)
			e |= ebit(EINVAL);
		else if (n > KVFS_NAME_MAX)
			e |= ebit(ENAMETOOLONG);
		else if ((n == 1 && p[start] == '.') ||
			 (n == 2 && p[start] == '.' && p[start + 1] == '.'))
			e |= ebit(EINVAL);
		else if (at_root && start == 0 && n == 5 && !memcmp(p, ".kvfs", 5))
			e |= ebit(EINVAL);
		start = i + 1;
	}
	return e;
}

/* Whether [off, off + len) lies in bt_data after the key array. */
static bool in_data(uint32_t nkeys, uint64_t off, uint64_t len)
{
	return off >= (uint64_t)nkeys * sizeof(struct kvfs_ioc_key) &&
	       off <= KVFS_BATCH_DATA_SIZE && len <= KVFS_BATCH_DATA_SIZE - off;
}

static void add_span(struct kmem *km, const struct mreg *r, uint64_t off, uint64_t len)
{
	if (!r->base)
		km->foreign = true;
	km->sp[km->n++] = (struct span){r->base ? r->base + off : NULL, len};
}

/* A put's or get's memory: the rules it breaks, or its spans in this process. */
static void key_mem(struct fz *f, const struct kvfs_ioc_batch *bt, const struct kvfs_ioc_key *k,
		    struct kmem *km)
{
	km->errs = 0;
	km->foreign = false;
	km->n = 0;
	km->total = 0;
	if (k->ik_layout) {
		struct mlay *l = lay_find(f, k->ik_layout);

		if (k->ik_niov || k->ik_iov_off)
			km->errs |= ebit(EINVAL);
		if (!l) {
			km->errs |= ebit(EBADF);
			return;
		}
		if (k->ik_block >= l->nblocks) {
			km->errs |= ebit(EFAULT);
			return;
		}
		for (uint32_t s = 0; s < l->nsegs; s++) {
			const struct kvfs_ioc_seg *g = &l->segs[s];

			add_span(km, reg_find(f, g->sg_region),
				 g->sg_base + k->ik_block * g->sg_stride, g->sg_length);
		}
		km->total = l->blen;
		return;
	}
	/* A list out of place is not read: its ranges break no rule of their own. */
	if (k->ik_block || k->ik_iov_off % 8 || k->ik_niov == 0 ||
	    k->ik_niov > KVFS_LAYOUT_MAX_SEGS ||
	    !in_data(bt->bt_nkeys, k->ik_iov_off,
		     (uint64_t)k->ik_niov * sizeof(struct kvfs_ioc_iov))) {
		km->errs |= ebit(EINVAL);
		return;
	}
	for (uint16_t v = 0; v < k->ik_niov; v++) {
		struct kvfs_ioc_iov iv;
		struct mreg *r;
		uint64_t end;

		memcpy(&iv, bt->bt_data + k->ik_iov_off + v * sizeof(iv), sizeof(iv));
		r = reg_find(f, iv.iv_region);
		if (iv.iv_pad)
			km->errs |= ebit(EINVAL);
		if (!r)
			km->errs |= ebit(EBADF);
		else if (r->other)
			km->errs |= ebit(EPERM);
		else if (!iv.iv_length)
			km->errs |= ebit(EINVAL);
		else if (__builtin_add_overflow(iv.iv_offset, iv.iv_length, &end) || end > r->len)
			km->errs |= ebit(EFAULT);
		else
			add_span(km, r, iv.iv_offset, iv.iv_length);
		if (__builtin_add_overflow(km->total, iv.iv_length, &km->total))
			km->errs |= ebit(EFAULT);
	}
}

static uint8_t *gather(const struct kmem *km)
{
	uint8_t *v = malloc(km->total ? km->total : 1), *p = v;

	CHECK(v, "out of memory");
	for (int s = 0; s < km->n; s++) {
		memcpy(p, km->sp[s].p, km->sp[s].len);
		p += km->sp[s].len;
	}
	return v;
}

/* The name below the mount's root of a batch's name: DIR's prefix unless at_root. */
static size_t full_name(struct fz *f, bool at_root, const char *nm, size_t len)
{
	size_t p = at_root ? 0 : f->pfxlen;

	memcpy(f->full, f->pfx, p);
	memcpy(f->full + p, nm, len);
	f->full[p + len] = '\0';
	return p + len;
}

/* A get's bytes against the model's, in every key whose memory overlaps no other's. */
static int sweep_cmp(const void *a, const void *b)
{
	const struct sweep *x = a, *y = b;

	return x->p < y->p ? -1 : x->p > y->p;
}

static void cmp_value(struct fz *f, uint32_t i, const struct ment *e, const struct kmem *km)
{
	uint64_t off = 0;

	for (int s = 0; s < km->n; s++) {
		const uint8_t *p = (const uint8_t *)km->sp[s].p;

		if (memcmp(p, e->val + off, km->sp[s].len))
			for (uint64_t j = 0; j < km->sp[s].len; j++)
				CHECK(p[j] == e->val[off + j],
				      "%s: get key %u %s: byte %llu of %llu is %#x, the model's is "
				      "%#x",
				      f->ctx, i, shown(e->name, e->len),
				      (unsigned long long)(off + j), (unsigned long long)e->size,
				      p[j], e->val[off + j]);
		off += km->sp[s].len;
	}
}

static void check_get_bytes(struct fz *f, uint32_t nkeys)
{
	size_t n = 0;
	char *maxend = NULL;
	uint32_t owner = 0;

	for (uint32_t i = 0; i < nkeys; i++)
		if (f->kent[i] && f->kent[i]->val && !f->km[i].foreign)
			for (int s = 0; s < f->km[i].n; s++)
				f->sw[n++] = (struct sweep){
				    f->km[i].sp[s].p, f->km[i].sp[s].p + f->km[i].sp[s].len, i};
	qsort(f->sw, n, sizeof(*f->sw), sweep_cmp);
	memset(f->dirty, 0, nkeys);
	/* Keys of one get whose memory overlaps land in no defined order. */
	for (size_t j = 0; j < n; j++) {
		if (j && f->sw[j].p < maxend)
			f->dirty[f->sw[j].key] = f->dirty[owner] = 1;
		if (!j || f->sw[j].end > maxend) {
			maxend = f->sw[j].end;
			owner = f->sw[j].key;
		}
	}
	for (uint32_t i = 0; i < nkeys; i++) {
		if (!f->kent[i])
			continue;
		if (!f->kent[i]->val || f->km[i].foreign) {
			f->n.unseen++;
		} else if (f->dirty[i]) {
			f->n.overlapped++;
		} else {
			cmp_value(f, i, f->kent[i], &f->km[i]);
			f->n.checked_gets++;
		}
	}
}

/*
 * Checks every key of a batch that ran against the model, in key order,
 * and applies what succeeded. in: the batch as sent; out: as returned;
 * want, fault: what each key of a built batch must give (NULL: random).
 */
static void check_batch(struct fz *f, unsigned long cmd, bool at_root,
			const struct kvfs_ioc_batch *in, const struct kvfs_ioc_batch *out,
			const int64_t *want, const char *const *fault)
{
	uint32_t ok = 0, prefix = 0, nkeys = in->bt_nkeys;
	uint64_t bytes = 0;
	bool mem = cmd == KVFS_IOC_PUT || cmd == KVFS_IOC_GET;

	for (uint32_t i = 0; i < nkeys; i++) {
		struct kvfs_ioc_key ki = bt_key(in, i), ko = bt_key(out, i);
		struct kmem *km = &f->km[i];
		int64_t r = ko.ik_result, pred = 0, w = want ? want[i] : WANT_ANY;
		const char *nm = "", *what = fault && fault[i] ? fault[i] : "";
		bool named = in_data(nkeys, ki.ik_name_off, ki.ik_name_len), valid = false, fine;
		struct ment *e = NULL;
		uint32_t errs = 0;
		size_t flen = 0;

		f->kent[i] = NULL;
		km->n = 0;
		km->errs = 0;
		if (named) {
			nm = (const char *)in->bt_data + ki.ik_name_off;
			errs = name_faults(nm, ki.ik_name_len, at_root);
			valid = !errs;
		} else {
			errs = ebit(EINVAL);
		}
		if (mem) {
			key_mem(f, in, &ki, km);
			errs |= km->errs;
		}
		if (valid) {
			int wk;

			flen = full_name(f, at_root, nm, ki.ik_name_len);
			wk = m_walk(&f->md, f->full, flen,
				    cmd == KVFS_IOC_PUT && (in->bt_flags & KVFS_PUT_MKDIR), &e);
			if (wk)
				pred = wk;
			else if (cmd == KVFS_IOC_PUT && e && e->dir)
				pred = -EISDIR;
			else if (cmd == KVFS_IOC_PUT && e && (in->bt_flags & KVFS_PUT_NOREPLACE))
				pred = -EEXIST;
			else if (cmd == KVFS_IOC_PUT)
				pred = (int64_t)km->total;
			else if (!e)
				pred = -ENOENT;
			else if (cmd == KVFS_IOC_REMOVE)
				pred = !e->dir ? 1
				       : in->bt_flags & KVFS_REMOVE_RECURSIVE
					   ? (int64_t)m_keys_below(&f->md, e)
					   : -EISDIR;
			else if (e->dir)
				pred = -EISDIR;
			else if (cmd == KVFS_IOC_GET && !km->errs && km->total != e->size)
				pred = -EMSGSIZE;
			else
				pred = (int64_t)e->size;
		}
		/* A built key carries the one fault it was built with, or none. */
		if (w == WANT_OK)
			CHECK(!errs && valid && pred >= 0,
			      "%s: built %s key %u %s was meant to succeed; the model says %s (%s)",
			      f->ctx, cmd_name(cmd), i, shown(nm, ki.ik_name_len), res(pred),
			      errs_shown(errs));
		else if (w != WANT_ANY)
			CHECK((errs == ebit(-w) && (!valid || pred >= 0)) || (!errs && pred == w),
			      "%s: built %s key %u %s (%s) carries other faults: %s, the model "
			      "says %s",
			      f->ctx, cmd_name(cmd), i, shown(nm, ki.ik_name_len), what,
			      errs_shown(errs), res(pred));
		if (w != WANT_ANY) {
			CHECK(r == (w == WANT_OK ? pred : w),
			      "%s: %s key %u %s (%s): got %s, want %s", f->ctx, cmd_name(cmd), i,
			      shown(nm, ki.ik_name_len), w == WANT_OK ? "no fault" : what, res(r),
			      res(w == WANT_OK ? pred : w));
			f->n.fault_keys += w < 0 && w != WANT_OK;
		}
		if (errs)
			fine = r < 0 && ((ebit(-r) & errs) || (valid && r == pred && pred < 0));
		else
			fine = r == pred || (cmd == KVFS_IOC_PUT && r == -ENOSPC) ||
			       (e && e->busy && r == -EBUSY);
		CHECK(fine, "%s: %s key %u %s: got %s; the model says %s%s%s", f->ctx,
		      cmd_name(cmd), i, shown(nm, ki.ik_name_len), res(r), res(pred),
		      errs ? ", or one of " : "", errs_shown(errs));
		f->n.enospc += r == -ENOSPC;
		if ((cmd == KVFS_IOC_LOOKUP || cmd == KVFS_IOC_GET) && !errs && e && !e->dir &&
		    (r >= 0 || r == -EMSGSIZE))
			CHECK(ko.ik_size == e->size,
			      "%s: %s key %u %s: %s with ik_size %llu; the model's size is %llu",
			      f->ctx, cmd_name(cmd), i, shown(nm, ki.ik_name_len), res(r),
			      (unsigned long long)ko.ik_size, (unsigned long long)e->size);
		if (cmd == KVFS_IOC_LOOKUP && r >= 0)
			CHECK((ko.ik_flags & (KVFS_KEY_PRESENT | KVFS_KEY_SEALED)) ==
				  (KVFS_KEY_PRESENT | KVFS_KEY_SEALED),
			      "%s: lookup key %u: flags %#x", f->ctx, i, ko.ik_flags);
		if (cmd == KVFS_IOC_GET && r >= 0)
			CHECK(ko.ik_flags & (KVFS_KEY_DRAM | KVFS_KEY_SSD),
			      "%s: get key %u: no tier in flags %#x", f->ctx, i, ko.ik_flags);
		if ((cmd == KVFS_IOC_LOOKUP || cmd == KVFS_IOC_GET) && r == -EISDIR)
			CHECK(ko.ik_flags & KVFS_KEY_DIR, "%s: %s key %u: EISDIR, flags %#x",
			      f->ctx, cmd_name(cmd), i, ko.ik_flags);
		if (r < 0)
			continue;
		ok++;
		prefix += prefix == i;
		bytes += cmd == KVFS_IOC_REMOVE ? 0 : (uint64_t)r;
		if (cmd == KVFS_IOC_PUT)
			m_set(&f->md, f->full, flen, km->foreign ? NULL : gather(km), km->total);
		else if (cmd == KVFS_IOC_REMOVE)
			m_remove(&f->md, e);
		else if (cmd == KVFS_IOC_GET)
			f->kent[i] = e;
	}
	CHECK(out->bt_ok == ok && out->bt_prefix == prefix,
	      "%s: %s batch: bt_ok %u, bt_prefix %u; its keys say %u, %u", f->ctx, cmd_name(cmd),
	      out->bt_ok, out->bt_prefix, ok, prefix);
	CHECK(cmd == KVFS_IOC_REMOVE || out->bt_bytes == bytes,
	      "%s: %s batch: bt_bytes %llu; its keys say %llu", f->ctx, cmd_name(cmd),
	      (unsigned long long)out->bt_bytes, (unsigned long long)bytes);
	if (cmd == KVFS_IOC_GET)
		check_get_bytes(f, nkeys);
}

/* Fills what a get may write with noise, so that bytes it did not write show. */
static void poison_get(struct fz *f, const struct kvfs_ioc_batch *bt)
{
	struct kmem *km = &f->km[0];

	if (bt->bt_nkeys > MAXK)
		return;
	for (uint32_t i = 0; i < bt->bt_nkeys; i++) {
		struct kvfs_ioc_key k = bt_key(bt, i);

		key_mem(f, bt, &k, km);
		if (!km->errs && !km->foreign)
			for (int s = 0; s < km->n; s++)
				fill_rand(km->sp[s].p, km->sp[s].len, rnd(f));
	}
}

/* --- random ioctls --- */

/* Writes a name into p (room for max); returns its length. */
static size_t pick_name(struct fz *f, char *p, size_t max)
{
	static const char *const bad[] = {
	    "..", ".", "../canary/c0", "a//b", "/abs", "trail/", ".kvfs", ".kvfs/stats", "a/./b",
	};
	size_t n;

	const char *pick;

	switch (below(f, 5)) {
	case 0:
	case 1:
	case 2:
		pick = below(f, 3)
			   ? good_names[below(f, sizeof(good_names) / sizeof(good_names[0]))]
			   : bad[below(f, sizeof(bad) / sizeof(bad[0]))];
		n = strlen(pick) < max ? strlen(pick) : max;
		memcpy(p, pick, n);
		return n;
	case 3: /* long components and paths */
		n = below(f, 1100) + 1;
		n = n < max ? n : max;
		memset(p, 'L', n);
		for (size_t i = 0; i < n; i += below(f, 300) + 1)
			p[i] = '/';
		return n;
	default: /* noise, NUL and '/' included */
		n = below(f, 40);
		n = n < max ? n : max;
		for (size_t i = 0; i < n; i++)
			p[i] = (char)(below(f, 4) ? 'a' + below(f, 26) : rnd(f));
		return n;
	}
}

static bool key_errno_ok(int64_t r)
{
	switch (-r) {
	case EINVAL:
	case ENAMETOOLONG:
	case EBADF:
	case EPERM:
	case EFAULT:
	case ENOENT:
	case ENOTDIR:
	case EISDIR:
	case EIO:
	case ENOSPC:
	case EEXIST:
	case EBUSY:
	case EMSGSIZE:
	case ENOTEMPTY:
	case ENOMEM:
		return true;
	default:
		return false;
	}
}

static bool ioctl_errno_ok(int err)
{
	switch (-err) {
	case ENOTTY:
	case EINVAL:
	case EPROTO:
	case E2BIG:
	case ENOTDIR:
	case EBADF:
	case EPERM:
	case EBUSY:
	case EFAULT:
	case EOPNOTSUPP:
	case EMFILE:
	case ENOENT:
	case ENAMETOOLONG:
	case ESRCH:
	case EACCES:
	case ENOSPC:
	case ENOMEM:
	case ENODEV: /* a device region naming no device of the daemon's */
		return true;
	default:
		return false;
	}
}

static const unsigned long cmds[] = {
    KVFS_IOC_VERSION,
    KVFS_IOC_REGION_REGISTER,
    KVFS_IOC_REGION_UNREGISTER,
    KVFS_IOC_LAYOUT_REGISTER,
    KVFS_IOC_LAYOUT_UNREGISTER,
    KVFS_IOC_LOOKUP,
    KVFS_IOC_PUT,
    KVFS_IOC_GET,
    KVFS_IOC_REMOVE,
};

static bool is_batch(unsigned long cmd)
{
	return cmd == KVFS_IOC_LOOKUP || cmd == KVFS_IOC_PUT || cmd == KVFS_IOC_GET ||
	       cmd == KVFS_IOC_REMOVE;
}

/* A batch whose every field is drawn from valid, boundary and noise values. */
static void gen_batch(struct fz *f, unsigned long cmd, struct kvfs_ioc_batch *bt)
{
	uint32_t nkeys = below(f, 8) ? (uint32_t)below(f, 300) + 1 : (uint32_t)rnd(f);
	uint32_t cap = nkeys <= KVFS_BATCH_MAX_KEYS ? nkeys : 1,
		 heap = cap * sizeof(struct kvfs_ioc_key);

	memset(bt, 0, sizeof(*bt));
	hdr_init(&bt->bt_hdr, sizeof(*bt), rnd(f));
	bt->bt_nkeys = nkeys;
	/* Mostly the flags the command takes (so that batches run), sometimes any. */
	bt->bt_flags = below(f, 10) == 0	? (uint32_t)rnd(f)
		       : cmd == KVFS_IOC_PUT	? (uint32_t)below(f, 4)
		       : cmd == KVFS_IOC_REMOVE ? (uint32_t)below(f, 2)
						: 0;
	if (!below(f, 20))
		bt->bt_hdr.ih_version = (uint32_t)rnd(f);
	for (uint32_t i = 0; i < cap; i++) {
		struct kvfs_ioc_key k = {0};
		size_t room = heap < KVFS_BATCH_DATA_SIZE ? KVFS_BATCH_DATA_SIZE - heap : 0;

		if (below(f, 3)) {
			k.ik_layout = below(f, 2) ? f->layout : pick_id(f);
			k.ik_block = pick64(f, RLEN / 4096);
		} else if (room > 64) {
			uint16_t niov = (uint16_t)(below(f, 6) ? below(f, 4) + 1 : below(f, 400));
			uint32_t off = (heap + 7) & ~7u;

			if (below(f, 10) == 0)
				off += (uint32_t)below(f, 8);
			k.ik_iov_off = (uint16_t)off;
			k.ik_niov = niov;
			for (uint16_t v = 0;
			     v < niov && off + (v + 1) * 24u <= KVFS_BATCH_DATA_SIZE; v++) {
				struct kvfs_ioc_iov iv = {
				    .iv_region = pick_id(f),
				    .iv_pad = below(f, 30) ? 0 : (uint32_t)rnd(f),
				    .iv_offset = pick64(f, RLEN),
				    .iv_length = below(f, 3) ? below(f, 8192) + 1 : pick64(f, RLEN),
				};

				memcpy(bt->bt_data + off + v * 24u, &iv, sizeof(iv));
				heap = off + (v + 1) * 24u;
			}
		}
		room = heap < KVFS_BATCH_DATA_SIZE ? KVFS_BATCH_DATA_SIZE - heap : 0;
		k.ik_name_off = (uint16_t)heap;
		k.ik_name_len = (uint16_t)pick_name(f, (char *)bt->bt_data + heap, room);
		heap += k.ik_name_len;
		if (!below(f, 15)) { /* point the name anywhere, even into the keys */
			k.ik_name_off = (uint16_t)rnd(f);
			k.ik_name_len = (uint16_t)rnd(f);
		}
		memcpy(bt->bt_data + i * sizeof(k), &k, sizeof(k));
	}
}

/*
 * Turns rg into a device registration (CUDA_IPC or CUDA_VMM): a UUID that
 * names no device, is zero or is noise; a handle of noise, zero or all
 * ones; an fd of the fuzzer's (no CUDA handle), none, negative or huge;
 * offsets and lengths drawn like the host kinds'; now and then a host
 * field or the pad set. With or without a device in the daemon each must
 * fail with a documented errno, never succeed: no handle here is real.
 */
static void gen_device_region(struct fz *f, struct kvfs_ioc_region *rg)
{
	uint64_t c = below(f, 8);

	memset((char *)rg + sizeof(rg->rg_hdr), 0, sizeof(*rg) - sizeof(rg->rg_hdr));
	rg->rg_kind = below(f, 2) ? KVFS_REGION_CUDA_IPC : KVFS_REGION_CUDA_VMM;
	rg->rg_offset = pick64(f, RLEN);
	rg->rg_length = pick64(f, RLEN);
	if (c < 5)
		for (int i = 0; i < 16; i++)
			rg->rg_dev_uuid[i] = (uint8_t)rnd(f);
	else if (c == 5)
		memset(rg->rg_dev_uuid, 0xff, 16);
	c = below(f, 6);
	if (rg->rg_kind == KVFS_REGION_CUDA_IPC || c == 5)
		for (int i = 0; i < 64; i++)
			rg->rg_ipc_handle[i] = c < 3 ? (uint8_t)rnd(f) : c == 4 ? 0xff : 0;
	c = below(f, 6);
	if (rg->rg_kind == KVFS_REGION_CUDA_VMM || c == 5)
		rg->rg_fd = c < 2    ? f->dirfd
			    : c == 2 ? -1 - (int32_t)below(f, 3)
			    : c == 3 ? (int32_t)(rnd(f) >> 34)
				     : f->filefd;
	if (!below(f, 12))
		rg->rg_addr = (uintptr_t)f->pmem;
	if (!below(f, 12))
		snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s", f->shm);
	if (!below(f, 12))
		rg->rg_pad = 1;
}

/*
 * A registration. Ranges that could succeed lie inside the middle third of
 * the fuzzer's buffers (so the guards stay unregistered); the others are
 * out of range, overflowing, unmapped or someone else's.
 */
static void gen_region(struct fz *f, struct kvfs_ioc_region *rg)
{
	static const char *const names[] = {"", "/", "noslash", "/a/b", "/..", "/nonexistent"};
	static const uint64_t far[] = {3 * RLEN, 3 * RLEN + 1, 1ull << 63, UINT64_MAX - 4096,
				       UINT64_MAX};
	uint64_t in = below(f, RLEN);

	memset(rg, 0, sizeof(*rg));
	hdr_init(&rg->rg_hdr, sizeof(*rg), rnd(f));
	rg->rg_kind = below(f, 4) ? (uint32_t)below(f, 2) + 1 : (uint32_t)below(f, 8);
	if (below(f, 3)) {
		rg->rg_length = below(f, RLEN - in) + 1;
	} else {
		in = 0;
		/* Past the object's end, or overflowing (a process range must overflow). */
		rg->rg_length = rg->rg_kind == KVFS_REGION_HOST_SHM && below(f, 2)
				    ? 2 * RLEN + 1
				    : UINT64_MAX - below(f, 2);
	}
	if (rg->rg_kind == KVFS_REGION_HOST_SHM) {
		uint64_t c = below(f, 10);

		rg->rg_offset = below(f, 4) ? RLEN + in : far[below(f, 5)];
		if (c < 4)
			snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s", f->shm);
		else if (c < 6)
			snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s", f->shm_other);
		else if (c < 9)
			snprintf(rg->rg_shm_name, sizeof(rg->rg_shm_name), "%s",
				 names[below(f, 6)]);
		else
			memset(rg->rg_shm_name, 'n', sizeof(rg->rg_shm_name));
	} else {
		uint64_t c = below(f, 6);

		rg->rg_addr = c < 3    ? (uintptr_t)f->pmem + RLEN + in
			      : c == 3 ? 0xffffffffff600000ull + below(f, 4096)
			      : c == 4 ? below(f, 1 << 16)
				       : rnd(f) | 1ull << 63;
	}
	if (!below(f, 10))
		rg->rg_pad = (uint32_t)rnd(f);
	if (!below(f, 10))
		rg->rg_ipc_handle[below(f, 64)] = 1;
	if (!below(f, 4))
		gen_device_region(f, rg);
}

static void gen_layout(struct fz *f, struct kvfs_ioc_layout *ly)
{
	memset(ly, 0, sizeof(*ly));
	hdr_init(&ly->ly_hdr, sizeof(*ly), rnd(f));
	ly->ly_nsegs = below(f, 6) ? (uint32_t)below(f, 8) + 1 : (uint32_t)pick64(f, 256);
	for (uint32_t i = 0; i < ly->ly_nsegs && i < KVFS_LAYOUT_MAX_SEGS; i++)
		ly->ly_segs[i] = (struct kvfs_ioc_seg){
		    .sg_region = pick_id(f),
		    .sg_pad = below(f, 20) ? 0 : 1,
		    .sg_base = below(f, 2) ? below(f, RLEN) : pick64(f, RLEN),
		    .sg_stride = below(f, 2) ? 4096 : pick64(f, RLEN),
		    .sg_length = below(f, 2) ? 4096 : pick64(f, RLEN),
		};
	if (!below(f, 10))
		ly->ly_id = 1;
}

static void drop_fresh(struct fz *f, uint32_t id, bool layout)
{
	for (int i = 0; i < f->nfresh; i++)
		if (f->fresh[i].id == id && f->fresh[i].layout == layout) {
			memmove(f->fresh + i, f->fresh + i + 1,
				(size_t)(f->nfresh - i - 1) * sizeof(f->fresh[0]));
			f->nfresh--;
			return;
		}
}

/*
 * Keeps what a random registration made, unregistering the oldest beyond
 * MAXFRESH (a region a layout still uses waits for its turn again).
 */
static void keep_fresh(struct fz *f, uint32_t id, bool layout)
{
	for (int tries = 0; f->nfresh == MAXFRESH && tries < MAXFRESH; tries++) {
		struct fresh o = f->fresh[0];
		int err =
		    unreg(f->dirfd,
			  o.layout ? KVFS_IOC_LAYOUT_UNREGISTER : KVFS_IOC_REGION_UNREGISTER, o.id);

		drop_fresh(f, o.id, o.layout);
		CHECK(!err || (err == -EBUSY && !o.layout), "unregister %s %u: %s",
		      o.layout ? "layout" : "region", o.id, strerror(-err));
		if (err)
			f->fresh[f->nfresh++] = o;
		else if (o.layout)
			lay_del(f, o.id);
		else
			reg_del(f, o.id);
	}
	if (f->nfresh == MAXFRESH) /* every one in use: let the oldest be */
		drop_fresh(f, f->fresh[0].id, f->fresh[0].layout);
	f->fresh[f->nfresh++] = (struct fresh){id, layout};
}

static int pick_fd(struct fz *f, unsigned long cmd)
{
	uint64_t c = below(f, 20);
	bool destructive = cmd == KVFS_IOC_PUT || cmd == KVFS_IOC_REMOVE;

	if (c == 0)
		return f->filefd;
	if (c == 1)
		return f->ctlfd;
	if (c == 2 && !destructive)
		return f->rootfd; /* names there must not escape into the canaries: reads only */
	return f->dirfd;
}

/* A registration that succeeded: into the table, checked against the header. */
static void registered(struct fz *f, unsigned long cmd)
{
	if (cmd == KVFS_IOC_REGION_REGISTER) {
		const struct kvfs_ioc_region *rg = (const struct kvfs_ioc_region *)f->in;
		uint32_t id = ((const struct kvfs_ioc_region *)f->buf)->rg_id;
		uint64_t end;
		char *base = NULL;

		CHECK(rg->rg_kind == KVFS_REGION_HOST_SHM || rg->rg_kind == KVFS_REGION_HOST_PROC,
		      "ioctl %ld: a made-up registration of kind %u succeeded", f->i, rg->rg_kind);
		CHECK(!__builtin_add_overflow(rg->rg_kind == KVFS_REGION_HOST_SHM ? rg->rg_offset
										  : rg->rg_addr,
					      rg->rg_length, &end),
		      "ioctl %ld: an overflowing range was registered", f->i);
		if (rg->rg_kind == KVFS_REGION_HOST_SHM) {
			CHECK(strcmp(rg->rg_shm_name, f->shm_other),
			      "ioctl %ld: another user's object was registered", f->i);
			if (!strcmp(rg->rg_shm_name, f->shm)) {
				CHECK(end <= 3 * RLEN,
				      "ioctl %ld: [%llu, %llu) of a %u-byte object registered",
				      f->i, (unsigned long long)rg->rg_offset,
				      (unsigned long long)end, 3 * RLEN);
				base = f->smem + rg->rg_offset;
			}
		} else if (rg->rg_addr >= (uintptr_t)f->pmem &&
			   end <= (uintptr_t)f->pmem + 3 * RLEN) {
			base = (char *)(uintptr_t)rg->rg_addr;
		}
		reg_add(f, id, base, rg->rg_length, false);
		keep_fresh(f, id, false);
	} else if (cmd == KVFS_IOC_LAYOUT_REGISTER) {
		const struct kvfs_ioc_layout *ly = (const struct kvfs_ioc_layout *)f->in;
		const struct kvfs_ioc_layout *o = (const struct kvfs_ioc_layout *)f->buf;

		lay_add(f, o->ly_id, ly->ly_segs, ly->ly_nsegs, o->ly_block_len, o->ly_nblocks);
		keep_fresh(f, o->ly_id, true);
	} else {
		const struct kvfs_ioc_id *x = (const struct kvfs_ioc_id *)f->in;
		bool layout = cmd == KVFS_IOC_LAYOUT_UNREGISTER;

		CHECK(layout ? lay_find(f, x->id_id) != NULL : reg_find(f, x->id_id) != NULL,
		      "ioctl %ld: unregistered %s %u, which the fuzzer does not hold", f->i,
		      layout ? "layout" : "region", x->id_id);
		if (layout)
			lay_del(f, x->id_id);
		else
			reg_del(f, x->id_id);
		drop_fresh(f, x->id_id, layout);
	}
}

static void one(struct fz *f)
{
	unsigned long cmd = cmds[below(f, sizeof(cmds) / sizeof(cmds[0]))];
	uint64_t how = below(f, 10);
	int fd = pick_fd(f, cmd), err;

	if (how == 0) { /* an unknown number or size in our type, or a known one's neighbour */
		cmd =
		    _IOC(below(f, 4), KVFS_IOC_MAGIC, below(f, 3) ? below(f, 0x20) : below(f, 256),
			 below(f, 2) ? below(f, 16384) : _IOC_SIZE(cmd) + 8 * below(f, 3) - 8);
		for (size_t k = 0; k < 64; k++)
			f->buf[k] = (uint8_t)rnd(f);
	} else if (how == 1) { /* a known command, random bytes */
		for (size_t k = 0; k < _IOC_SIZE(cmd); k++)
			f->buf[k] = (uint8_t)rnd(f);
	} else if (is_batch(cmd)) {
		gen_batch(f, cmd, (struct kvfs_ioc_batch *)f->buf);
	} else if (cmd == KVFS_IOC_REGION_REGISTER) {
		gen_region(f, (struct kvfs_ioc_region *)f->buf);
	} else if (cmd == KVFS_IOC_LAYOUT_REGISTER) {
		gen_layout(f, (struct kvfs_ioc_layout *)f->buf);
	} else {
		struct kvfs_ioc_id *x = (struct kvfs_ioc_id *)f->buf;

		memset(f->buf, 0, 64);
		hdr_init(&x->id_hdr, sizeof(*x), rnd(f));
		x->id_id = pick_id(f);
		/* Never drop the fuzzer's own fixtures. */
		if (fixture(f, x->id_id))
			x->id_id ^= 1u << 31;
		x->id_pad = below(f, 10) ? 0 : 1;
	}
	if (how != 0 && !below(f, 30))
		((struct kvfs_ioc_hdr *)f->buf)->ih_size = (uint32_t)rnd(f);
	if (cmd == KVFS_IOC_GET)
		poison_get(f, (struct kvfs_ioc_batch *)f->buf);
	memcpy(f->in, f->buf, _IOC_SIZE(cmd));
	err = ioc(fd, cmd, f->buf);
	CHECK(err == 0 || ioctl_errno_ok(err), "ioctl %ld (cmd %#lx): unexpected %s", f->i, cmd,
	      strerror(-err));
	if (err || cmd == KVFS_IOC_VERSION)
		return;
	if (is_batch(cmd)) {
		const struct kvfs_ioc_batch *bt = (const struct kvfs_ioc_batch *)f->buf;

		CHECK(fd == f->dirfd || fd == f->rootfd,
		      "ioctl %ld: a batch ran on a non-directory", f->i);
		for (uint32_t k = 0; k < bt->bt_nkeys; k++) {
			int64_t r = bt_key(bt, k).ik_result;

			CHECK(r >= 0 || key_errno_ok(r), "ioctl %ld key %u: unexpected %lld", f->i,
			      k, (long long)r);
		}
		check_batch(f, cmd, fd == f->rootfd, (const struct kvfs_ioc_batch *)f->in, bt, NULL,
			    NULL);
	} else if (_IOC_TYPE(cmd) == KVFS_IOC_MAGIC && _IOC_NR(cmd) <= 0x04 &&
		   _IOC_SIZE(cmd) == _IOC_SIZE(cmds[_IOC_NR(cmd)])) {
		registered(f, cmds[_IOC_NR(cmd)]);
	}
}

/* --- built batches --- */

static void sb_init(struct fz *f, unsigned long cmd, int fd, uint32_t cap, uint32_t flags)
{
	struct sb *s = &f->sb;

	s->cmd = cmd;
	s->fd = fd;
	s->at_root = fd == f->rootfd;
	bt_init(&s->b, (struct kvfs_ioc_batch *)f->buf, cap, ++f->ctr, flags);
	f->bump[0] = f->bump[1] = 0;
	f->bump[2] = f->bump[3] = OLAYOUT;
}

/* Adds a key that must give want; returns its index, or -1 when it does not fit. */
static int sb_add(struct fz *f, const char *name, size_t len, uint32_t layout, uint64_t block,
		  const struct kvfs_ioc_iov *iov, uint16_t niov, int64_t want, const char *fault)
{
	int i = bt_addn(&f->sb.b, name, len, layout, block, iov, niov);

	if (i >= 0) {
		f->sb.want[i] = want;
		f->sb.fault[i] = fault;
	}
	return i;
}

static struct kvfs_ioc_key sb_key(struct fz *f, int i)
{
	return bt_key(f->sb.b.bt, (uint32_t)i);
}

static void sb_set_key(struct fz *f, int i, const struct kvfs_ioc_key *k)
{
	memcpy(f->sb.b.bt->bt_data + (size_t)i * sizeof(*k), k, sizeof(*k));
}

/* Runs the built batch: it must run; each key must give what it was built to. */
static void sb_run(struct fz *f)
{
	struct sb *s = &f->sb;
	int err;

	if (!s->b.bt->bt_nkeys)
		return;
	memcpy(f->in, s->b.bt, sizeof(*s->b.bt));
	err = ioc(s->fd, s->cmd, s->b.bt);
	CHECK(!err, "%s: the %s batch failed as a whole: %s", f->ctx, cmd_name(s->cmd),
	      strerror(-err));
	check_batch(f, s->cmd, s->at_root, (const struct kvfs_ioc_batch *)f->in, s->b.bt, s->want,
		    s->fault);
}

/* The oracle regions: 0 os, 1 op (sources), 2 od, 3 oq (destinations). */
static char *omem(struct fz *f, int w)
{
	char *const m[4] = {f->os, f->op, f->od, f->oq};

	return m[w];
}

static uint32_t oreg(struct fz *f, int w)
{
	const uint32_t r[4] = {f->ros, f->rop, f->rod, f->roq};

	return r[w];
}

/* len bytes of oracle region w for this batch. */
static bool take(struct fz *f, int w, uint64_t len, struct kvfs_ioc_iov *iov)
{
	uint64_t off = below(f, 3) ? (f->bump[w] + 7) & ~7ull : (f->bump[w] + 4095) & ~4095ull;

	if (off + len > OLEN)
		return false;
	f->bump[w] = off + len;
	*iov = (struct kvfs_ioc_iov){.iv_region = oreg(f, w), .iv_offset = off, .iv_length = len};
	return true;
}

/* Memory for a key of size bytes in 1 to 3 pieces: fresh bytes to put, or poison for a get. */
static bool key_iov(struct fz *f, bool put, uint64_t size, struct kvfs_ioc_iov *iov, uint16_t *niov)
{
	uint16_t n = size < 3 ? 1 : (uint16_t)(below(f, 3) + 1);
	uint64_t left = size;

	for (uint16_t i = 0; i < n; i++) {
		uint64_t len = i == n - 1 ? left : below(f, left - (n - 1 - i)) + 1;
		int w = (put ? 0 : 2) + (int)below(f, 2);

		if (!take(f, w, len, &iov[i]))
			return false;
		if (put)
			fill_rand(omem(f, w) + iov[i].iv_offset, len, rnd(f));
		else
			memset(omem(f, w) + iov[i].iv_offset, 0xa5 ^ (int)(f->ctr & 0xff), len);
		left -= len;
	}
	*niov = n;
	return true;
}

static uint64_t pick_size(struct fz *f)
{
	switch (below(f, 20)) {
	case 0:
	case 1:
		return below(f, 1 << 20) + 65536;
	case 2:
		return EXTENT * (below(f, 2) + 1) + below(f, 3) - 1; /* an extent's edge */
	case 3:
		return below(f, 3 * MIB) + MIB;
	default:
		return below(f, 65536) + 1;
	}
}

/* A random key of the model's below DIR, of 1..max bytes, not busy; NULL if none. */
static struct ment *pick_key(struct fz *f, uint64_t max)
{
	for (int t = 0; t < 64 && f->md.nkeys; t++) {
		struct ment *e = f->md.keys[below(f, f->md.nkeys)];

		if (e->len > f->pfxlen && !memcmp(e->name, f->pfx, f->pfxlen) && !e->busy &&
		    e->size && e->size <= max && e->val && e->len - f->pfxlen <= KVFS_PATH_MAX - 2)
			return e;
	}
	return NULL;
}

/* A random directory of the model's below DIR; NULL if none. */
static struct ment *pick_dir(struct fz *f)
{
	struct ment *pick = NULL;
	uint64_t seen = 0;

	for (size_t i = 0; i < f->md.cap; i++)
		for (struct ment *e = f->md.tab[i]; e; e = e->next)
			if (e->dir && e->len > f->pfxlen && !memcmp(e->name, f->pfx, f->pfxlen) &&
			    !below(f, ++seen))
				pick = e;
	return pick;
}

/* A key's name as DIR sees it. */
static const char *rel(struct fz *f, const struct ment *e)
{
	return e->name + f->pfxlen;
}

/* The model's answer for a name below DIR: 0 and its entry, or -errno of its path. */
static int model_of(struct fz *f, const char *name, bool mkdir, struct ment **e)
{
	size_t n = full_name(f, false, name, strlen(name));

	return m_walk(&f->md, f->full, n, mkdir, e);
}

/* One deliberate fault, and the errno the header gives it. */
enum fault {
	F_EMPTY,
	F_DOT,
	F_DOTDOT,
	F_NUL,
	F_LEAD,
	F_TRAIL,
	F_DOUBLE,
	F_LONGCOMP,
	F_LONGPATH,
	F_OUTSIDE,
	F_NOREGION,
	F_NOLAYOUT,
	F_RANGE,
	F_OVERFLOW,
	F_BLOCK,
	F_MISALIGNED,
	F_IOVOUT,
	F_MISSING,
	F_NOPARENT,
	F_PARENTFILE,
	F_ISDIR,
	F_SIZE,
	F_EXISTS,
	F__COUNT,
	F_FIRST_MEM = F_NOREGION,
	F_FIRST_NS = F_MISSING,
};

static const struct {
	const char *what;
	int err;
} faults[F__COUNT] = {
    [F_EMPTY] = {"an empty name", EINVAL},
    [F_DOT] = {"a \".\" component", EINVAL},
    [F_DOTDOT] = {"a \"..\" component", EINVAL},
    [F_NUL] = {"a NUL inside the name", EINVAL},
    [F_LEAD] = {"a leading \"/\"", EINVAL},
    [F_TRAIL] = {"a trailing \"/\"", EINVAL},
    [F_DOUBLE] = {"a double \"/\"", EINVAL},
    [F_LONGCOMP] = {"a component of 256 bytes", ENAMETOOLONG},
    [F_LONGPATH] = {"a name over 1024 bytes", ENAMETOOLONG},
    [F_OUTSIDE] = {"a name outside bt_data", EINVAL},
    [F_NOREGION] = {"a region id not registered", EBADF},
    [F_NOLAYOUT] = {"a layout id not registered", EBADF},
    [F_RANGE] = {"a range past its region's end", EFAULT},
    [F_OVERFLOW] = {"a range whose end overflows", EFAULT},
    [F_BLOCK] = {"a block past the layout's count", EFAULT},
    [F_MISALIGNED] = {"a misaligned iov list", EINVAL},
    [F_IOVOUT] = {"an iov list outside bt_data", EINVAL},
    [F_MISSING] = {"a missing key", ENOENT},
    [F_NOPARENT] = {"a missing parent", ENOENT},
    [F_PARENTFILE] = {"a key as a parent", ENOTDIR},
    [F_ISDIR] = {"a directory", EISDIR},
    [F_SIZE] = {"memory of the wrong size", EMSGSIZE},
    [F_EXISTS] = {"an existing key under NOREPLACE", EEXIST},
};

/* A name for a good put below DIR that the model says succeeds in this batch; NULL if none. */
static const char *put_name(struct fz *f, bool fresh)
{
	uint32_t flags = f->sb.b.bt->bt_flags;
	static char name[96];

	for (int t = 0; t < 8; t++) {
		struct ment *e;

		if (fresh || (flags & KVFS_PUT_NOREPLACE))
			snprintf(name, sizeof(name), "@oracle/%c/n%llu", f->ph,
				 (unsigned long long)++f->ctr);
		else if (below(f, 3))
			snprintf(name, sizeof(name), "@oracle/%c/k%02d", f->ph, (int)below(f, 48));
		else
			snprintf(name, sizeof(name), "@oracle/%c/d%d/k%02d", f->ph,
				 (int)below(f, 4), (int)below(f, 16));
		if (!model_of(f, name, flags & KVFS_PUT_MKDIR, &e) && !(e && e->dir) &&
		    !(e && (flags & KVFS_PUT_NOREPLACE)))
			return name;
	}
	return NULL;
}

/* Adds a good put of fresh bytes; false when it does not fit. */
static bool add_good_put(struct fz *f)
{
	const char *name = put_name(f, false);
	struct kvfs_ioc_iov iov[3];
	uint16_t niov;
	int i;

	if (!name)
		return false;
	if (!below(f, 5)) { /* a block of the fuzzer's layout over its two regions */
		uint64_t b = below(f, RLEN / 4096);

		fill_rand(f->smem + RLEN + b * 4096, 4096, rnd(f));
		fill_rand(f->pmem + RLEN + b * 4096, 4096, rnd(f));
		i = sb_add(f, name, strlen(name), f->layout, b, NULL, 0, WANT_OK, NULL);
	} else {
		if (!key_iov(f, true, pick_size(f), iov, &niov))
			return false;
		i = sb_add(f, name, strlen(name), 0, 0, iov, niov, WANT_OK, NULL);
	}
	if (i >= 0 && f->nlast < 16)
		snprintf(f->last[f->nlast++], sizeof(f->last[0]), "%s", name);
	return i >= 0;
}

/* Adds a good get of a key into fresh memory; false when none fits. */
static bool add_good_get(struct fz *f, const char *name)
{
	struct kvfs_ioc_iov iov[3];
	struct ment *e;
	uint16_t niov;

	if (model_of(f, name, false, &e) || !e || e->dir || e->busy || !e->val || !e->size)
		return false;
	if (e->size == 8192 && !below(f, 4)) { /* the destination layout over od and oq */
		uint64_t b = below(f, f->lod_nblocks);

		memset(f->od + b * 4096, 0x5a, 4096);
		memset(f->oq + b * 4096, 0x5a, 4096);
		return sb_add(f, name, strlen(name), f->lod, b, NULL, 0, WANT_OK, NULL) >= 0;
	}
	if (!key_iov(f, false, e->size, iov, &niov))
		return false;
	return sb_add(f, name, strlen(name), 0, 0, iov, niov, WANT_OK, NULL) >= 0;
}

/* An id the fuzzer does not hold (nor anyone else: no other client runs meanwhile). */
static uint32_t unknown_id(struct fz *f, bool layout)
{
	uint32_t id = below(f, 2) ? (layout ? f->dead_layout : f->dead_region)
				  : 0xfffff000u + (uint32_t)below(f, 4096);

	if (!layout && !below(f, 8))
		id = 0;
	while (layout ? lay_find(f, id) != NULL : reg_find(f, id) != NULL)
		id = 0x7ffff000u + (uint32_t)below(f, 4096);
	return id;
}

/*
 * Adds a key of the batch's command that carries fault ft and nothing
 * else; false when the fault does not apply to this batch now.
 */
static bool add_fault(struct fz *f, enum fault ft)
{
	unsigned long cmd = f->sb.cmd;
	uint32_t flags = f->sb.b.bt->bt_flags;
	bool put = cmd == KVFS_IOC_PUT, get = cmd == KVFS_IOC_GET, mem = put || get;
	struct kvfs_ioc_iov iov[3];
	uint16_t niov = 0;
	uint32_t layout = 0;
	uint64_t block = 0, size = below(f, 8192) + 1;
	char *name = f->nbuf;
	size_t len = 0;
	struct ment *e = NULL;
	int i;

	if (ft >= F_FIRST_MEM && ft < F_FIRST_NS && !mem)
		return false;
	/* The name: bad, or one whose key gives no error of its own. */
	switch (ft) {
	case F_EMPTY:
		len = 0;
		break;
	case F_DOT:
	case F_DOTDOT:
	case F_LEAD:
	case F_TRAIL:
	case F_DOUBLE: {
		static const char *const fmt[] = {"@oracle/./k%02d", "@oracle/%c/../k%02d",
						  "/@oracle/k%02d", "@oracle/k%02d/",
						  "@oracle//k%02d"};
		int k = ft == F_DOT	 ? 0
			: ft == F_DOTDOT ? 1
			: ft == F_LEAD	 ? 2
			: ft == F_TRAIL	 ? 3
					 : 4;

		if (k == 1)
			len = (size_t)snprintf(name, 64, fmt[k], f->ph, (int)below(f, 48));
		else
			len = (size_t)snprintf(name, 64, fmt[k], (int)below(f, 48));
		break;
	}
	case F_NUL:
		len = (size_t)snprintf(name, 64, "@oracle/%c/k%02d", f->ph, (int)below(f, 48));
		name[below(f, len)] = '\0';
		break;
	case F_LONGCOMP:
		len = (size_t)snprintf(name, 64, "@oracle/%c/", f->ph);
		memset(name + len, 'c', KVFS_NAME_MAX + 1);
		len += KVFS_NAME_MAX + 1;
		break;
	case F_LONGPATH:
		len = (size_t)snprintf(name, 64, "@oracle/%c", f->ph);
		while (len <= KVFS_PATH_MAX)
			len += (size_t)snprintf(name + len, 64, "/d%03d", (int)below(f, 1000));
		break;
	case F_MISSING:
		if (put)
			return false;
		len = (size_t)snprintf(name, 64, "@oracle/%c/miss%llu", f->ph,
				       (unsigned long long)++f->ctr);
		break;
	case F_NOPARENT:
		if (put && (flags & KVFS_PUT_MKDIR))
			return false;
		len = (size_t)snprintf(name, 64, "@oracle/%c/nodir%llu/k", f->ph,
				       (unsigned long long)++f->ctr);
		break;
	case F_PARENTFILE:
		/* Not a key this batch removes: those lie below @oracle. */
		e = pick_key(f, UINT64_MAX);
		if (!e || !strncmp(rel(f, e), "@oracle/", 8))
			return false;
		len = (size_t)snprintf(name, KVFS_PATH_MAX + 8, "%s/x", rel(f, e));
		break;
	case F_ISDIR:
		e = pick_dir(f);
		if (!e || (cmd == KVFS_IOC_REMOVE && (flags & KVFS_REMOVE_RECURSIVE)))
			return false;
		len = (size_t)snprintf(name, KVFS_PATH_MAX + 8, "%s", rel(f, e));
		break;
	case F_EXISTS:
		e = put && (flags & KVFS_PUT_NOREPLACE) ? pick_key(f, UINT64_MAX) : NULL;
		if (!e)
			return false;
		len = (size_t)snprintf(name, KVFS_PATH_MAX + 8, "%s", rel(f, e));
		break;
	case F_SIZE:
		e = get ? pick_key(f, OLEN - OLAYOUT) : NULL;
		if (!e)
			return false;
		len = (size_t)snprintf(name, KVFS_PATH_MAX + 8, "%s", rel(f, e));
		size = e->size + (below(f, 2) ? 1 : -1);
		if (!size || size > OLEN - OLAYOUT)
			size = e->size + 1 > OLEN - OLAYOUT ? e->size - 1 : e->size + 1;
		break;
	default: /* a memory fault, or a name outside bt_data: a name that would succeed */
		if (put) {
			const char *n = put_name(f, false);

			if (!n)
				return false;
			len = (size_t)snprintf(name, 96, "%s", n);
		} else if (get) {
			e = pick_key(f, OLEN - OLAYOUT);
			if (!e)
				return false;
			len = (size_t)snprintf(name, KVFS_PATH_MAX + 8, "%s", rel(f, e));
			size = e->size;
		} else {
			len = (size_t)snprintf(name, 64, "@oracle/x");
		}
		break;
	}
	/* The memory: of size bytes, valid unless the fault is in it. */
	if (mem) {
		switch (ft) {
		case F_NOLAYOUT:
			layout = unknown_id(f, true);
			block = below(f, 4);
			break;
		case F_BLOCK:
			layout = put ? f->layout : f->lod;
			block = lay_find(f, layout)->nblocks +
				(below(f, 2) ? below(f, 3) : UINT64_MAX / 2);
			break;
		default:
			if (!key_iov(f, put, size, iov, &niov))
				return false;
			if (ft == F_NOREGION)
				iov[below(f, niov)].iv_region = unknown_id(f, false);
			if (ft == F_RANGE)
				iov[0].iv_offset = OLEN - iov[0].iv_length + 1 + below(f, 4096);
			if (ft == F_OVERFLOW)
				iov[0].iv_offset = UINT64_MAX - below(f, iov[0].iv_length);
			break;
		}
	}
	i = sb_add(f, name, len, layout, block, niov ? iov : NULL, niov, -faults[ft].err,
		   faults[ft].what);
	if (i < 0)
		return false;
	f->fcount[ft]++;
	if (ft == F_OUTSIDE || ft == F_MISALIGNED || ft == F_IOVOUT) {
		struct kvfs_ioc_key k = sb_key(f, i);

		if (ft == F_OUTSIDE && below(f, 2)) { /* into the key array */
			k.ik_name_off = (uint16_t)below(f, (i + 1) * sizeof(k));
			k.ik_name_len = (uint16_t)(below(f, 8) + 1);
		} else if (ft == F_OUTSIDE) { /* past the end */
			k.ik_name_off = (uint16_t)(KVFS_BATCH_DATA_SIZE - below(f, 4));
			k.ik_name_len = (uint16_t)(below(f, 8) + 5);
		} else if (ft == F_IOVOUT) {
			k.ik_iov_off =
			    (uint16_t)((KVFS_BATCH_DATA_SIZE - 8 - 8 * below(f, 2)) & ~7u);
		} else { /* the list, 4 bytes off the 8-byte grid */
			k.ik_iov_off += 4;
		}
		sb_set_key(f, i, &k);
	}
	return true;
}

/* Adds the least used fault that applies to this batch now: every kind gets its turn. */
static void add_rare_fault(struct fz *f)
{
	bool tried[F__COUNT] = {false};

	for (int t = 0; t < F__COUNT; t++) {
		int ft = -1;

		for (int k = 0; k < F__COUNT; k++)
			if (!tried[k] && (ft < 0 || f->fcount[k] < f->fcount[ft]))
				ft = k;
		tried[ft] = true;
		if (add_fault(f, (enum fault)ft))
			return;
	}
}

/*
 * Builds cmd's batch: ngood keys from good(), nfault faults among them
 * (the first the least used so far, the others at random), shuffled.
 */
static void build(struct fz *f, int ngood, int nfault, bool (*good)(struct fz *, int))
{
	int kinds[64], n = 0;

	for (int k = 0; k < ngood && n < 64; k++)
		kinds[n++] = k;
	for (int k = 0; k < nfault && n < 64; k++)
		kinds[n++] = -1;
	for (int k = n - 1; k > 0; k--) {
		int j = (int)below(f, (uint64_t)k + 1), t = kinds[k];

		kinds[k] = kinds[j];
		kinds[j] = t;
	}
	for (int k = 0, first = 1; k < n; k++) {
		if (kinds[k] >= 0) {
			good(f, kinds[k]);
		} else if (first) {
			add_rare_fault(f);
			first = 0;
		} else {
			for (int t = 0; t < 8 && !add_fault(f, (enum fault)below(f, F__COUNT)); t++)
				;
		}
	}
}

static bool good_put(struct fz *f, int k)
{
	/* Now and then the name of the key before it again: the later one wins. */
	if (k && !below(f, 6) && f->nlast && !(f->sb.b.bt->bt_flags & KVFS_PUT_NOREPLACE)) {
		struct kvfs_ioc_iov iov[3];
		uint16_t niov;
		struct ment *e;

		if (!model_of(f, f->last[f->nlast - 1], f->sb.b.bt->bt_flags & KVFS_PUT_MKDIR,
			      &e) &&
		    key_iov(f, true, pick_size(f), iov, &niov))
			return sb_add(f, f->last[f->nlast - 1], strlen(f->last[f->nlast - 1]), 0, 0,
				      iov, niov, WANT_OK, NULL) >= 0;
	}
	return add_good_put(f);
}

static bool good_get(struct fz *f, int k)
{
	struct ment *e;

	if (k < f->nlast)
		return add_good_get(f, f->last[k]);
	e = pick_key(f, OLEN - OLAYOUT);
	return e && add_good_get(f, rel(f, e));
}

static bool good_lookup(struct fz *f, int k)
{
	struct ment *e = below(f, 5) ? pick_key(f, UINT64_MAX) : pick_dir(f);

	return e && sb_add(f, rel(f, e), e->len - f->pfxlen, 0, 0, NULL, 0,
			   e->dir ? -EISDIR : WANT_OK, e->dir ? "a directory" : NULL) >= 0;
}

static bool good_remove(struct fz *f, int k)
{
	for (int t = 0; t < 8; t++) {
		struct ment *e = pick_key(f, UINT64_MAX);

		if (e && !strncmp(rel(f, e), "@oracle/", 8)) {
			/* Not one this batch removes already. */
			for (uint32_t j = 0; j < f->sb.b.bt->bt_nkeys; j++) {
				struct kvfs_ioc_key key = sb_key(f, (int)j);

				if (key.ik_name_len == e->len - f->pfxlen &&
				    !memcmp(f->sb.b.bt->bt_data + key.ik_name_off, rel(f, e),
					    key.ik_name_len))
					e = NULL;
				if (!e)
					break;
			}
		} else {
			e = NULL;
		}
		if (e)
			return sb_add(f, rel(f, e), e->len - f->pfxlen, 0, 0, NULL, 0, WANT_OK,
				      NULL) >= 0;
	}
	return false;
}

/*
 * A tree of keys made by ioctl, which the kernel then caches (each stat
 * looks a name up, one key stays open), removed by one recursive ioctl:
 * the count is the model's, every name is gone from the kernel's view,
 * and the open fd still reads the bytes it had.
 */
static void round_rmtree(struct fz *f)
{
	static const char *const sub[] = {"k0", "a/k1", "a/b/k2", "b/k3", "a/b/c/k4"};
	const int n = sizeof(sub) / sizeof(sub[0]);
	char top[64], name[128], path[4300];
	struct kvfs_ioc_iov iov[3];
	struct ment *e;
	struct stat st;
	uint8_t *old, *got;
	uint64_t size;
	uint16_t niov;
	ssize_t m, k = 0;
	int fd;

	snprintf(top, sizeof(top), "@rt/%c%llu", f->ph, (unsigned long long)++f->ctr);
	ctx(f, "round %d: a cached tree removed by ioctl (%s)", f->round, top);
	sb_init(f, KVFS_IOC_PUT, f->dirfd, (uint32_t)n, KVFS_PUT_MKDIR);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s/%s", top, sub[i]);
		CHECK(key_iov(f, true, below(f, 20000) + 1, iov, &niov) &&
			  sb_add(f, name, strlen(name), 0, 0, iov, niov, WANT_OK, NULL) == i,
		      "rmtree batch");
	}
	sb_run(f);
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", f->dir, top, sub[i]);
		snprintf(name, sizeof(name), "%s/%s", top, sub[i]);
		CHECK(!model_of(f, name, false, &e) && e, "model of %s", name);
		CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
			  (uint64_t)st.st_size == e->size,
		      "%s: stat %s: %s, %lld bytes; the model's %llu", f->ctx, path,
		      strerror(errno), (long long)st.st_size, (unsigned long long)e->size);
	}
	snprintf(name, sizeof(name), "%s/%s", top, sub[2]);
	model_of(f, name, false, &e);
	size = e->size;
	old = malloc(size);
	got = malloc(size + 1);
	CHECK(old && got, "out of memory");
	memcpy(old, e->val, size);
	snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));

	sb_init(f, KVFS_IOC_REMOVE, f->dirfd, 1, KVFS_REMOVE_RECURSIVE);
	sb_add(f, top, strlen(top), 0, 0, NULL, 0, WANT_OK, NULL);
	sb_run(f);
	CHECK(bt_key((struct kvfs_ioc_batch *)f->buf, 0).ik_result == n, "%s: removed %lld keys",
	      f->ctx, (long long)bt_key((struct kvfs_ioc_batch *)f->buf, 0).ik_result);
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", f->dir, top, sub[i]);
		CHECK(stat(path, &st) == -1 && errno == ENOENT, "%s: %s still there after removal",
		      f->ctx, path);
	}
	snprintf(path, sizeof(path), "%s/%s", f->dir, top);
	CHECK(stat(path, &st) == -1 && errno == ENOENT, "%s: %s still there", f->ctx, path);
	while ((m = read(fd, got + k, size + 1 - (size_t)k)) > 0)
		k += m;
	CHECK(m == 0 && (uint64_t)k == size && !memcmp(got, old, size),
	      "%s: an fd open on removed %s read %zd bytes (%s), not its %llu", f->ctx, name, k,
	      m < 0 ? strerror(errno) : "differing", (unsigned long long)size);
	CHECK(close(fd) == 0, "close");
	free(old);
	free(got);
	f->n.rmtrees++;
}

/* Lookups from the mount's root: DIR's keys by their full names, the canaries, ".kvfs". */
static void round_root(struct fz *f)
{
	static const char *const bad[] = {".kvfs", ".kvfs/stats", ".kvfs/ctl"};
	char name[64];

	ctx(f, "round %d: lookups from the mount's root", f->round);
	sb_init(f, KVFS_IOC_LOOKUP, f->rootfd, 16, 0);
	for (int i = 0; i < 6; i++) {
		struct ment *e = pick_key(f, UINT64_MAX);

		if (e && e->len <= KVFS_PATH_MAX)
			sb_add(f, e->name, e->len, 0, 0, NULL, 0, WANT_OK, NULL);
	}
	snprintf(name, sizeof(name), "canary/c%d", (int)below(f, NCANARY));
	sb_add(f, name, strlen(name), 0, 0, NULL, 0, WANT_OK, NULL);
	sb_add(f, f->pfx, f->pfxlen - 1, 0, 0, NULL, 0, -EISDIR, "a directory");
	snprintf(name, sizeof(name), "gone%llu", (unsigned long long)++f->ctr);
	sb_add(f, name, strlen(name), 0, 0, NULL, 0, -ENOENT, "a missing key");
	snprintf(name, sizeof(name), "%s", bad[below(f, 3)]);
	sb_add(f, name, strlen(name), 0, 0, NULL, 0, -EINVAL, "\".kvfs\" at the mount's root");
	sb_run(f);
}

/* One round of built batches, each key of which must give exactly what it was built to. */
static void oracle_round(struct fz *f)
{
	uint32_t flags = f->round % 2 ? 0 : KVFS_PUT_MKDIR;

	if (f->round % 4 == 3)
		flags |= KVFS_PUT_NOREPLACE;
	f->nlast = 0;
	ctx(f, "round %d: put (flags %#x)", f->round, flags);
	sb_init(f, KVFS_IOC_PUT, f->dirfd, 24, flags);
	build(f, (int)below(f, 8) + 3, (int)below(f, 5) + 2, good_put);
	sb_run(f);
	ctx(f, "round %d: get", f->round);
	sb_init(f, KVFS_IOC_GET, f->dirfd, 40, 0);
	build(f, f->nlast + (int)below(f, 8), (int)below(f, 5) + 2, good_get);
	sb_run(f);
	ctx(f, "round %d: lookup", f->round);
	sb_init(f, KVFS_IOC_LOOKUP, f->dirfd, 40, 0);
	build(f, (int)below(f, 16) + 4, (int)below(f, 6) + 2, good_lookup);
	sb_run(f);
	if (f->round % 3 == 2) {
		ctx(f, "round %d: remove", f->round);
		sb_init(f, KVFS_IOC_REMOVE, f->dirfd, 24, 0);
		build(f, (int)below(f, 4) + 1, (int)below(f, 5) + 2, good_remove);
		sb_run(f);
	}
	if (f->round % 3 == 1)
		round_root(f);
	if (f->round % 5 == 4)
		round_rmtree(f);
	f->round++;
	f->n.rounds++;
}

/* --- big values: more than five SSD extents --- */

static const uint64_t big_sizes[] = {
    5 * EXTENT + 1, 6 * EXTENT, 8 * EXTENT + 4097, 10 * EXTENT + 12345, 5 * EXTENT, 4 * EXTENT + 1,
};

/* Puts @big/bK of fresh bytes from the big source region. */
static void put_big(struct fz *f, int k)
{
	char name[32];
	struct kvfs_ioc_iov iov = {.iv_region = f->rbs, .iv_length = big_sizes[k]};

	snprintf(name, sizeof(name), "@big/b%d", k);
	ctx(f, "put %s (%llu bytes)", name, (unsigned long long)big_sizes[k]);
	fill_rand(f->bs, big_sizes[k], rnd(f));
	sb_init(f, KVFS_IOC_PUT, f->dirfd, 1, KVFS_PUT_MKDIR);
	sb_add(f, name, strlen(name), 0, 0, &iov, 1, WANT_OK, NULL);
	sb_run(f);
}

/*
 * A big key got into memory of the wrong size — exactly five extents, one
 * byte short, a page over, four extents — in shared memory (which the daemon
 * may read the SSD straight into) and in the process's own pages: each
 * -EMSGSIZE with the whole size. Then into memory of its size, compared
 * byte for byte. ssd: the first reads since the mount (counted when the
 * SSD served them).
 */
static void check_big(struct fz *f, struct ment *e, bool ssd)
{
	const uint64_t wrong[] = {5 * EXTENT, 5 * EXTENT, e->size - 1, e->size + 4096, 4 * EXTENT};
	const uint32_t where[] = {f->rbp, f->rbd, f->rbd, f->rbp, f->rbd};
	const struct kvfs_ioc_batch *bt = (const struct kvfs_ioc_batch *)f->buf;
	const char *name = rel(f, e);
	int n = 0;

	ctx(f, "%s (%llu bytes) into memory of other sizes%s", name, (unsigned long long)e->size,
	    ssd ? ", first read since the mount" : "");
	sb_init(f, KVFS_IOC_GET, f->dirfd, 5, 0);
	for (int i = 0; i < 5; i++) {
		struct kvfs_ioc_iov iov = {.iv_region = where[i], .iv_length = wrong[i]};

		if (wrong[i] != e->size && wrong[i] <= BIGLEN) {
			sb_add(f, name, strlen(name), 0, 0, &iov, 1, -EMSGSIZE, "the wrong size");
			n++;
		}
	}
	sb_run(f);
	for (int i = 0; i < n; i++) {
		uint32_t fl = bt_key(bt, (uint32_t)i).ik_flags;

		f->n.big_wrong++;
		f->n.big_wrong_ssd += ssd && (fl & KVFS_KEY_SSD) && !(fl & KVFS_KEY_DRAM);
	}
	ctx(f, "%s (%llu bytes) into memory of its size", name, (unsigned long long)e->size);
	sb_init(f, KVFS_IOC_GET, f->dirfd, 1, 0);
	{
		bool shm = below(f, 2);
		struct kvfs_ioc_iov iov = {.iv_region = shm ? f->rbd : f->rbp,
					   .iv_length = e->size};

		memset(shm ? f->bd : f->bp, 0x3c, e->size);
		sb_add(f, name, strlen(name), 0, 0, &iov, 1, WANT_OK, NULL);
	}
	sb_run(f);
}

static bool is_big(struct fz *f, const struct ment *e)
{
	return e->val && e->len > f->pfxlen + 5 && !memcmp(rel(f, e), "@big/", 5);
}

/*
 * Reads every key of the model back: the big ones as check_big does, the
 * others packed into gets over the big destination regions, byte for byte;
 * empty keys and directories by lookup. ssd: the first reads since the
 * mount (each should come from the SSD; counted).
 */
static void verify_all(struct fz *f, bool ssd)
{
	struct ment **keys = malloc((f->md.nkeys + 1) * sizeof(*keys));
	size_t nk = f->md.nkeys, k = 0;
	const struct kvfs_ioc_batch *bt = (const struct kvfs_ioc_batch *)f->buf;

	CHECK(keys, "out of memory");
	memcpy(keys, f->md.keys, nk * sizeof(*keys));
	f->n.verified = f->n.verified_ssd = f->n.verified_empty = 0;
	for (size_t i = 0; i < nk; i++)
		if (is_big(f, keys[i])) {
			check_big(f, keys[i], ssd);
			f->n.verified++;
			f->n.verified_ssd += ssd && (bt_key(bt, 0).ik_flags & KVFS_KEY_SSD) &&
					     !(bt_key(bt, 0).ik_flags & KVFS_KEY_DRAM);
		}
	while (k < nk) {
		bool at_root = false;
		uint64_t used[2] = {0, 0};
		int n = 0;

		ctx(f, "verify every modelled key%s", ssd ? ", first read since the mount" : "");
		sb_init(f, KVFS_IOC_GET, f->dirfd, 64, 0);
		for (; k < nk; k++) {
			struct ment *e = keys[k];
			bool root = e->len <= f->pfxlen || memcmp(e->name, f->pfx, f->pfxlen);
			const char *name = root ? e->name : rel(f, e);
			struct kvfs_ioc_iov iov[2];
			uint16_t niov = 0;

			if (is_big(f, e) || !e->val || !e->size)
				continue;
			if (n && root != at_root)
				break;
			at_root = root;
			f->sb.fd = root ? f->rootfd : f->dirfd;
			f->sb.at_root = root;
			for (int w = 0; w < 2 && !niov; w++)
				if (used[w] + e->size <= BIGLEN) {
					iov[0] = (struct kvfs_ioc_iov){w ? f->rbp : f->rbd, 0,
								       used[w], e->size};
					niov = 1;
				}
			if (!niov && used[0] + used[1] + e->size <= 2 * (uint64_t)BIGLEN && !n) {
				iov[0] = (struct kvfs_ioc_iov){f->rbd, 0, 0, BIGLEN};
				iov[1] = (struct kvfs_ioc_iov){f->rbp, 0, 0, e->size - BIGLEN};
				niov = 2;
			}
			if (!niov)
				break;
			if (sb_add(f, name, e->len - (root ? 0 : f->pfxlen), 0, 0, iov, niov,
				   WANT_OK, NULL) < 0)
				break;
			for (int v = 0; v < niov; v++) {
				int w = iov[v].iv_region == f->rbp;

				memset((w ? f->bp : f->bd) + iov[v].iv_offset, 0xc3,
				       iov[v].iv_length);
				used[w] = iov[v].iv_offset + iov[v].iv_length;
			}
			n++;
		}
		if (!n && k < nk) {
			k++; /* no room for it: larger than both regions */
			continue;
		}
		sb_run(f);
		for (int i = 0; i < n; i++) {
			uint32_t fl = bt_key(bt, (uint32_t)i).ik_flags;

			f->n.verified++;
			f->n.verified_ssd += ssd && (fl & KVFS_KEY_SSD) && !(fl & KVFS_KEY_DRAM);
		}
	}
	/* Empty keys and directories, by lookup. */
	for (int root = 0; root < 2; root++) {
		ctx(f, "look every empty key and directory up");
		sb_init(f, KVFS_IOC_LOOKUP, root ? f->rootfd : f->dirfd, 128, 0);
		for (size_t i = 0; i < f->md.cap; i++)
			for (struct ment *e = f->md.tab[i]; e; e = e->next) {
				bool r = e->len <= f->pfxlen || memcmp(e->name, f->pfx, f->pfxlen);
				const char *name = r ? e->name : rel(f, e);

				if (r != (root == 1) || (!e->dir && e->size) || !e->len)
					continue;
				if (sb_add(f, name, e->len - (r ? 0 : f->pfxlen), 0, 0, NULL, 0,
					   WANT_ANY, NULL) < 0) {
					sb_run(f);
					sb_init(f, KVFS_IOC_LOOKUP, root ? f->rootfd : f->dirfd,
						128, 0);
					CHECK(sb_add(f, name, e->len - (r ? 0 : f->pfxlen), 0, 0,
						     NULL, 0, WANT_ANY, NULL) == 0,
					      "lookup of %s", shown(name, e->len));
				}
				f->n.verified_empty += !e->dir;
			}
		sb_run(f);
	}
	free(keys);
}

/* --- registrations and other descriptors --- */

/* Gets @rc/probe into region id: its bytes (alive, ours), -EPERM (alive, another's), -EBADF. */
static int64_t probe(struct fz *f, uint32_t id)
{
	struct kvfs_ioc_batch *bt = (struct kvfs_ioc_batch *)f->buf;
	struct kvfs_ioc_iov iov = {.iv_region = id, .iv_length = PROBE};
	struct bt_build b;

	bt_init(&b, bt, 1, 77, 0);
	bt_add(&b, "@rc/probe", 0, 0, &iov, 1);
	CHECK(ioc(f->dirfd, KVFS_IOC_GET, bt) == 0, "probe batch");
	return bt_key(bt, 0).ik_result;
}

/*
 * Waits until region id is gone: the release that closing its descriptor
 * (or its process's exit) causes runs in the daemon after close() returns.
 * Another process's regions go when a registration finds it exited.
 */
static void wait_gone(struct fz *f, uint32_t id, bool other, const char *what)
{
	for (int i = 0; i < 5000; i++) {
		int64_t r = probe(f, id);
		uint32_t t;

		if (r == -EBADF)
			return;
		CHECK(r == (other ? -EPERM : (int64_t)PROBE), "%s: region %u answers %s", what, id,
		      res(r));
		if (other) {
			CHECK(reg_shm(f->dirfd, f->shm_rc, 0, 4096, &t) == 0 &&
				  unreg(f->dirfd, KVFS_IOC_REGION_UNREGISTER, t) == 0,
			      "a registration to reap");
		}
		usleep(2000);
	}
	CHECK(0, "%s: region %u still works 10 s later", what, id);
}

/* Each region puts a key from its first RCW bytes and gets it back into the next: exact. */
static void regions_work(struct fz *f, const uint32_t *ids, int n, const char *what)
{
	char name[32];

	ctx(f, "%s: put", what);
	sb_init(f, KVFS_IOC_PUT, f->dirfd, (uint32_t)n, 0);
	for (int i = 0; i < n; i++) {
		struct mreg *r = reg_find(f, ids[i]);
		struct kvfs_ioc_iov iov = {.iv_region = ids[i], .iv_length = RCW};

		fill_rand(r->base, RCW, rnd(f));
		snprintf(name, sizeof(name), "@rc/w%d", i);
		sb_add(f, name, strlen(name), 0, 0, &iov, 1, WANT_OK, NULL);
	}
	sb_run(f);
	ctx(f, "%s: get", what);
	sb_init(f, KVFS_IOC_GET, f->dirfd, (uint32_t)n, 0);
	for (int i = 0; i < n; i++) {
		struct mreg *r = reg_find(f, ids[i]);
		struct kvfs_ioc_iov iov = {.iv_region = ids[i], .iv_offset = RCW, .iv_length = RCW};

		memset(r->base + RCW, 0x77, RCW);
		snprintf(name, sizeof(name), "@rc/w%d", i);
		sb_add(f, name, strlen(name), 0, 0, &iov, 1, WANT_OK, NULL);
	}
	sb_run(f);
}

static const struct other {
	const char *rel;
	int flags;
	const char *what;
} others[] = {
    {"", O_RDONLY | O_DIRECTORY, "DIR"},
    {"/..", O_RDONLY | O_DIRECTORY, "the mount's root"},
    {"/@rc/probe", O_RDONLY, "a key"},
    {"/fuzzfile", O_RDWR, "a file open read-write"},
    {"/../.kvfs/stats", O_RDONLY, ".kvfs/stats"},
    {"/../.kvfs/ctl", O_WRONLY, ".kvfs/ctl (write-only)"},
};
#define NOTHERS (int)(sizeof(others) / sizeof(others[0]))

static int open_other(struct fz *f, int k)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s%s", f->dir, others[k].rel);
	fd = open(path, others[k].flags);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	return fd;
}

/*
 * Opens and closes another descriptor of others[k] twice: once bare, once
 * with a region of its own, which must be gone after the close (so that
 * release has run in the daemon when this returns).
 */
static void close_other(struct fz *f, int k, const char *who)
{
	char what[160];
	uint32_t id;
	int fd = open_other(f, k);

	CHECK(close(fd) == 0, "close");
	fd = open_other(f, k);
	CHECK(reg_proc(fd, f->rcm + 2 * RCLEN, PROBE, &id) == 0, "%s: register on %s", who,
	      others[k].what);
	CHECK(close(fd) == 0, "close");
	snprintf(what, sizeof(what), "%s: a region on a closed descriptor of %s", who,
		 others[k].what);
	wait_gone(f, id, false, what);
}

/* The child: closes descriptors of its own, registers on ours, exits when told. */
static void regcheck_child(struct fz *f, int a1, int a2, int to_parent, int from_parent)
{
	uint64_t t0[TALLY_N], t1[TALLY_N];
	uint32_t ids[2];
	char go;

	f->done = true; /* the parent says what failed */
	tally_read(t0);
	for (int k = 0; k < NOTHERS; k++)
		close_other(f, k, "child");
	/* The parent's open files: these go by the child's exit, not by any close. */
	CHECK(reg_proc(a1, f->rcm + 2 * RCLEN, PROBE, &ids[0]) == 0, "child: register on DIR");
	CHECK(reg_shm(a2, f->shm_rc, 2 * RCLEN, RCLEN, &ids[1]) == 0,
	      "child: register on .kvfs/ctl");
	CHECK(write(to_parent, ids, sizeof(ids)) == sizeof(ids), "to parent");
	CHECK(read(from_parent, &go, 1) == 1, "from parent");
	tally_read(t1);
	for (int i = 0; i < TALLY_N; i++)
		t1[i] -= t0[i];
	CHECK(write(to_parent, t1, sizeof(t1)) == sizeof(t1), "to parent");
	_exit(0);
}

/*
 * Regions registered through a directory fd (a1) and through .kvfs/ctl
 * opened write-only (a2) keep working while other descriptors — of the
 * same files and of others — open and close, in this process and in a
 * child that then exits; the child's regions are another process's
 * (EPERM) until it exits. Closing a2, then a1, ends their own regions.
 */
static void regcheck(struct fz *f)
{
	uint32_t r[4], cids[2];
	uint64_t t[TALLY_N];
	char path[4200], what[200];
	int a1, a2, up[2], down[2], st;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/../.kvfs/ctl", f->dir);
	a1 = open(f->dir, O_RDONLY | O_DIRECTORY);
	a2 = open(path, O_WRONLY);
	CHECK(a1 >= 0 && a2 >= 0, "open DIR and %s: %s", path, strerror(errno));
	CHECK(reg_shm(a1, f->shm_rc, 0, RCLEN, &r[0]) == 0 &&
		  reg_proc(a1, f->rcm, RCLEN, &r[1]) == 0 &&
		  reg_shm(a2, f->shm_rc, RCLEN, RCLEN, &r[2]) == 0 &&
		  reg_proc(a2, f->rcm + RCLEN, RCLEN, &r[3]) == 0,
	      "register on DIR and on .kvfs/ctl");
	reg_add(f, r[0], f->rcs, RCLEN, false);
	reg_add(f, r[1], f->rcm, RCLEN, false);
	reg_add(f, r[2], f->rcs + RCLEN, RCLEN, false);
	reg_add(f, r[3], f->rcm + RCLEN, RCLEN, false);
	ctx(f, "registration checks: the probe key");
	sb_init(f, KVFS_IOC_PUT, f->dirfd, 1, KVFS_PUT_MKDIR);
	{
		struct kvfs_ioc_iov iov = {.iv_region = r[0], .iv_length = PROBE};

		fill_rand(f->rcs, PROBE, rnd(f));
		sb_add(f, "@rc/probe", 9, 0, 0, &iov, 1, WANT_OK, NULL);
	}
	sb_run(f);
	regions_work(f, r, 4, "regions on DIR and .kvfs/ctl, just registered");
	for (int k = 0; k < NOTHERS; k++) {
		snprintf(what, sizeof(what), "regions on DIR and .kvfs/ctl after %s closed",
			 others[k].what);
		ctx(f, "%s", what);
		close_other(f, k, "parent");
		regions_work(f, r, 4, what);
	}

	CHECK(pipe(up) == 0 && pipe(down) == 0, "pipe");
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		regcheck_child(f, a1, a2, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	CHECK(read(up[0], cids, sizeof(cids)) == sizeof(cids), "the child failed");
	reg_add(f, cids[0], NULL, PROBE, true);
	reg_add(f, cids[1], NULL, RCLEN, true);
	ctx(f, "registration checks: another process's regions");
	sb_init(f, KVFS_IOC_PUT, f->dirfd, 1, 0);
	{
		struct kvfs_ioc_iov iov = {.iv_region = cids[0], .iv_length = PROBE};

		sb_add(f, "@rc/eperm", 9, 0, 0, &iov, 1, -EPERM, "another process's region");
	}
	sb_run(f);
	sb_init(f, KVFS_IOC_GET, f->dirfd, 1, 0);
	{
		struct kvfs_ioc_iov iov = {.iv_region = cids[1], .iv_length = PROBE};

		sb_add(f, "@rc/probe", 9, 0, 0, &iov, 1, -EPERM, "another process's region");
	}
	sb_run(f);
	CHECK(unreg(f->dirfd, KVFS_IOC_REGION_UNREGISTER, cids[0]) == -EPERM,
	      "unregister another process's region");
	CHECK(write(down[1], "g", 1) == 1 && read(up[0], t, sizeof(t)) == sizeof(t),
	      "the child failed");
	tally_add(t);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the child failed (%#x)", st);
	close(up[0]);
	close(down[1]);
	wait_gone(f, cids[0], true, "the child's region on DIR, after it exited");
	wait_gone(f, cids[1], true, "the child's region on .kvfs/ctl, after it exited");
	reg_del(f, cids[0]);
	reg_del(f, cids[1]);
	regions_work(f, r, 4,
		     "regions on DIR and .kvfs/ctl after a child closed descriptors of the same "
		     "and other files and exited");

	CHECK(close(a2) == 0, "close");
	wait_gone(f, r[2], false, "a region on .kvfs/ctl after its descriptor closed");
	wait_gone(f, r[3], false, "a region on .kvfs/ctl after its descriptor closed");
	reg_del(f, r[2]);
	reg_del(f, r[3]);
	regions_work(f, r, 2, "regions on DIR after the descriptor of .kvfs/ctl closed");
	CHECK(close(a1) == 0, "close");
	wait_gone(f, r[0], false, "a region on DIR after its descriptor closed");
	wait_gone(f, r[1], false, "a region on DIR after its descriptor closed");
	reg_del(f, r[0]);
	reg_del(f, r[1]);
	f->n.regchecks++;
}

/* --- setup --- */

static void canary_name(char *p, size_t n, const char *dir, int i)
{
	snprintf(p, n, "%s/../canary/c%d", dir, i);
}

/* A shared-memory object of len bytes, mapped, registered whole on fd; unlinked unless keep. */
static char *shm_region(struct fz *f, const char *name, uint64_t len, uint32_t *id, bool keep)
{
	char *p = shm_make(name, len);

	CHECK(reg_shm(f->dirfd, name, 0, len, id) == 0, "register %s", name);
	if (!keep)
		shm_unlink(name);
	reg_add(f, *id, p, len, false);
	return p;
}

static char *proc_region(struct fz *f, uint64_t len, uint32_t *id)
{
	char *p = aligned_alloc(4096, len);

	CHECK(p, "out of memory");
	memset(p, 0, len);
	CHECK(reg_proc(f->dirfd, p, len, id) == 0, "register process memory");
	reg_add(f, *id, p, len, false);
	return p;
}

static void setup_regions(struct fz *f)
{
	struct kvfs_ioc_seg segs[2];
	uint64_t blen, nb;

	snprintf(f->shm_o, sizeof(f->shm_o), "/kvfs-fuzz-o-%d", (int)getpid());
	f->os = shm_region(f, f->shm_o, OLEN, &f->ros, false);
	f->od = shm_region(f, f->shm_o, OLEN, &f->rod, false);
	f->op = proc_region(f, OLEN, &f->rop);
	f->oq = proc_region(f, OLEN, &f->roq);
	segs[0] = (struct kvfs_ioc_seg){.sg_region = f->rod, .sg_stride = 4096, .sg_length = 4096};
	segs[1] = (struct kvfs_ioc_seg){.sg_region = f->roq, .sg_stride = 4096, .sg_length = 4096};
	CHECK(reg_layout(f->dirfd, segs, 2, &f->lod, &blen, &nb) == 0, "destination layout");
	lay_add(f, f->lod, segs, 2, blen, nb);
	f->lod_nblocks = OLAYOUT / 4096;
	snprintf(f->shm_b, sizeof(f->shm_b), "/kvfs-fuzz-b-%d", (int)getpid());
	f->bs = shm_region(f, f->shm_b, BIGLEN, &f->rbs, false);
	f->bd = shm_region(f, f->shm_b, BIGLEN, &f->rbd, false);
	f->bp = proc_region(f, BIGLEN, &f->rbp);
	/* The registration checks' memory; an id known not to name a region or layout. */
	snprintf(f->shm_rc, sizeof(f->shm_rc), "/kvfs-fuzz-rc-%d", (int)getpid());
	f->rcs = shm_make(f->shm_rc, 3 * RCLEN);
	f->rcm = aligned_alloc(4096, 3 * RCLEN);
	CHECK(f->rcm, "out of memory");
	CHECK(reg_shm(f->dirfd, f->shm_rc, 0, 4096, &f->dead_region) == 0 &&
		  unreg(f->dirfd, KVFS_IOC_REGION_UNREGISTER, f->dead_region) == 0,
	      "a region to forget");
	segs[0] = (struct kvfs_ioc_seg){.sg_region = f->rod, .sg_length = 1};
	CHECK(reg_layout(f->dirfd, segs, 1, &f->dead_layout, &blen, &nb) == 0 &&
		  unreg(f->dirfd, KVFS_IOC_LAYOUT_UNREGISTER, f->dead_layout) == 0,
	      "a layout to forget");
}

/* The canary keys beside DIR and DIR's own file, made and modelled. */
static void setup_names(struct fz *f)
{
	char path[4200];
	int fd;

	m_insert(&f->md, f->pfx, f->pfxlen - 1, true);
	snprintf(path, sizeof(path), "%s/../canary", f->dir);
	CHECK(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
	for (int i = 0; i < NCANARY; i++) {
		uint8_t *v = malloc(65536);
		char name[32];

		CHECK(v, "out of memory");
		canary_name(path, sizeof(path), f->dir, i);
		fill_rand(v, 65536, 500 + (uint64_t)i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		/* The kernel reports the last close later, on its own: fsync seals the value now.
		 */
		CHECK(fd >= 0 && write(fd, v, 65536) == 65536 && fsync(fd) == 0 && close(fd) == 0,
		      "canary");
		snprintf(name, sizeof(name), "canary/c%d", i);
		m_set(&f->md, name, strlen(name), v, 65536);
	}
	snprintf(path, sizeof(path), "%sfuzzfile", f->pfx);
	m_set(&f->md, path, strlen(path), malloc(1), 0);
}

/* Nothing written outside the registered ranges; the canaries read as they were written. */
static void check_guards(struct fz *f, const char *guard_s, const char *guard_p)
{
	char path[4200];
	char *canary = malloc(65536), *got = malloc(65537);

	CHECK(canary && got, "out of memory");
	CHECK(!memcmp(guard_s, f->smem, RLEN) &&
		  !memcmp(guard_s + 2 * RLEN, f->smem + 2 * RLEN, RLEN),
	      "a shared-memory guard changed");
	CHECK(!memcmp(guard_p, f->pmem, RLEN) &&
		  !memcmp(guard_p + 2 * RLEN, f->pmem + 2 * RLEN, RLEN),
	      "a process-memory guard changed");
	for (int i = 0; i < NCANARY; i++) {
		ssize_t m, k = 0;
		int fd;

		canary_name(path, sizeof(path), f->dir, i);
		fill_rand(canary, 65536, 500 + (uint64_t)i);
		fd = open(path, O_RDONLY);
		CHECK(fd >= 0, "canary %d gone", i);
		while ((m = read(fd, got + k, 65537 - (size_t)k)) > 0)
			k += m;
		close(fd);
		CHECK(k == 65536 && !memcmp(got, canary, 65536), "canary %d changed", i);
	}
	free(canary);
	free(got);
}

int fuzz_main(const char *dir, long n, unsigned long seed, const char *model, const char *phase)
{
	struct fz *f = calloc(1, sizeof(*f));
	bool load = phase && strcmp(phase, "first"), fuzz = !phase || strcmp(phase, "verify");
	const char *base = strrchr(dir, '/');
	char path[4200], *guard_s, *guard_p;
	uint64_t verified = 0, verified_ssd = 0, verified_empty = 0, modelled_in = 0, big_in = 0;
	int kinds = 0;

	CHECK(f, "out of memory");
	CHECK(!phase || !strcmp(phase, "first") || !strcmp(phase, "next") ||
		  !strcmp(phase, "verify"),
	      "phase %s: first, next or verify", phase);
	the_fz = f;
	atexit(fail_note);
	f->seed = seed;
	f->s = seed * 2654435761u + 88172645463325252ull + (load ? (fuzz ? 1 : 2) : 0);
	f->dir = dir;
	f->phase = phase ? phase : "single";
	f->model_path = model;
	f->ph = !load ? 'a' : fuzz ? 'b' : 'c';
	ctx(f, "setup");
	base = base ? base + 1 : dir;
	f->pfxlen = (size_t)snprintf(f->pfx, sizeof(f->pfx), "%s/", base);
	f->buf = aligned_alloc(4096, 16384);
	f->in = aligned_alloc(4096, 16384);
	f->km = calloc(MAXK, sizeof(*f->km));
	f->kent = calloc(MAXK, sizeof(*f->kent));
	f->sw = calloc((size_t)MAXK * KVFS_LAYOUT_MAX_SEGS, sizeof(*f->sw));
	f->dirty = calloc(MAXK, 1);
	f->nbuf = malloc(NAMEBUF);
	f->full = malloc(NAMEBUF + 512);
	CHECK(f->buf && f->in && f->km && f->kent && f->sw && f->dirty && f->nbuf && f->full,
	      "out of memory");

	f->dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(f->dirfd >= 0, "open %s", dir);
	snprintf(path, sizeof(path), "%s/..", dir);
	f->rootfd = open(path, O_RDONLY | O_DIRECTORY);
	snprintf(path, sizeof(path), "%s/fuzzfile", dir);
	f->filefd = open(path, fuzz ? O_RDWR | O_CREAT : O_RDONLY, 0644);
	snprintf(path, sizeof(path), "%s/../.kvfs/stats", dir);
	f->ctlfd = open(path, O_RDONLY);
	CHECK(f->rootfd >= 0 && f->filefd >= 0 && f->ctlfd >= 0, "fuzz fds");

	/* Two regions, each with a guard of RLEN bytes on either side, and a layout over both. */
	snprintf(f->shm, sizeof(f->shm), "/kvfs-fuzz-%d", (int)getpid());
	snprintf(f->shm_other, sizeof(f->shm_other), "/kvfs-fuzz-other-%d", (int)getpid());
	f->smem = shm_make(f->shm, 3 * RLEN);
	shm_make(f->shm_other, RLEN);
	{
		int fd = shm_open(f->shm_other, O_RDWR, 0);

		CHECK(fd >= 0 && fchown(fd, 65534, 65534) == 0, "chown the other user's object");
		close(fd);
	}
	f->pmem = aligned_alloc(4096, 3 * RLEN);
	CHECK(f->pmem, "out of memory");
	fill_rand(f->smem, 3 * RLEN, 41);
	fill_rand(f->pmem, 3 * RLEN, 42);
	guard_s = malloc(3 * RLEN);
	guard_p = malloc(3 * RLEN);
	CHECK(guard_s && guard_p, "out of memory");
	memcpy(guard_s, f->smem, 3 * RLEN);
	memcpy(guard_p, f->pmem, 3 * RLEN);
	CHECK(reg_shm(f->dirfd, f->shm, RLEN, RLEN, &f->rs) == 0, "reg shm");
	CHECK(reg_proc(f->dirfd, f->pmem + RLEN, RLEN, &f->rp) == 0, "reg proc");
	reg_add(f, f->rs, f->smem + RLEN, RLEN, false);
	reg_add(f, f->rp, f->pmem + RLEN, RLEN, false);
	{
		struct kvfs_ioc_seg segs[2] = {
		    {.sg_region = f->rs, .sg_stride = 4096, .sg_length = 4096},
		    {.sg_region = f->rp, .sg_stride = 4096, .sg_length = 4096},
		};
		uint64_t blen, nb;

		CHECK(reg_layout(f->dirfd, segs, 2, &f->layout, &blen, &nb) == 0, "fuzz layout");
		lay_add(f, f->layout, segs, 2, blen, nb);
	}
	setup_regions(f);

	if (load)
		m_load(f);
	else
		setup_names(f);
	snprintf(path, sizeof(path), "%sfuzzfile", f->pfx);
	CHECK(m_find(&f->md, path, strlen(path)), "the model has no %s", path);
	m_find(&f->md, path, strlen(path))->busy = fuzz;
	if (load) {
		modelled_in = f->md.nkeys;
		verify_all(f, true);
		verified = f->n.verified;
		verified_ssd = f->n.verified_ssd;
		verified_empty = f->n.verified_empty;
		big_in = f->n.big_wrong;
	}
	if (fuzz) {
		for (int k = 0; k < (load ? 2 : 6); k++)
			put_big(f, k);
		for (f->i = 0; f->i < n; f->i++) {
			if (f->i % ROUND_EVERY == ROUND_EVERY / 2)
				oracle_round(f);
			if (f->i == n / 2)
				regcheck(f);
			ctx(f, "random ioctl %ld", f->i);
			one(f);
		}
		ctx(f, "the end of the run");
		check_guards(f, guard_s, guard_p);
		verify_all(f, false);
	}
	for (size_t i = 0; i < f->md.nkeys; i++)
		f->n.big_keys += f->md.keys[i]->size > 5 * EXTENT;
	m_find(&f->md, path, strlen(path))->busy = false;
	if (model && fuzz)
		m_save(f);
	shm_unlink(f->shm);
	shm_unlink(f->shm_other);
	shm_unlink(f->shm_rc);
	close(f->filefd);
	close(f->ctlfd);
	close(f->rootfd);
	close(f->dirfd);
	tally_print();
	printf("seed=%lu\nmodelled_in=%llu\nverified=%llu\nverified_ssd=%llu\n", seed,
	       (unsigned long long)modelled_in, (unsigned long long)verified,
	       (unsigned long long)verified_ssd);
	printf("verified_empty=%llu\nmodelled=%llu\nmodelled_keys=%llu\nfinal_verified=%llu\n",
	       (unsigned long long)verified_empty, (unsigned long long)f->md.n,
	       (unsigned long long)f->md.nkeys,
	       (unsigned long long)(f->n.verified + f->n.verified_empty));
	printf("big_keys=%llu\nbig_wrong_size_in=%llu\nbig_wrong_size_ssd=%llu\n",
	       (unsigned long long)f->n.big_keys, (unsigned long long)big_in,
	       (unsigned long long)f->n.big_wrong_ssd);
	for (int k = 0; k < F__COUNT; k++)
		kinds += f->fcount[k] > 0;
	printf("fault_kinds=%d\nfault_kinds_all=%d\n", kinds, F__COUNT);
	printf("rounds=%llu\nfault_keys=%llu\nchecked_gets=%llu\noverlapped_gets=%llu\n",
	       (unsigned long long)f->n.rounds, (unsigned long long)f->n.fault_keys,
	       (unsigned long long)f->n.checked_gets, (unsigned long long)f->n.overlapped);
	printf("regchecks=%llu\nrmtrees=%llu\nenospc=%llu\nunseen=%llu\n",
	       (unsigned long long)f->n.regchecks, (unsigned long long)f->n.rmtrees,
	       (unsigned long long)f->n.enospc, (unsigned long long)f->n.unseen);
	f->done = true;
	printf("ok\n");
	return 0;
}
