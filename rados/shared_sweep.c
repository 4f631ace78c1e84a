/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_sweep.c — the pool sweep: the data objects no directory
 * entry refers to and older than the grace are removed, by kvfs
 * --rados-gc (kv_shared_gc) and by the thread every --rados-gc-interval
 * while nothing is queued. Calls rados/shared_cluster.c.
 */
#include "rados/shared_int.h"

struct gc_state {
	struct kv_rados *r;
	char **dirs; /* d.* objects */
	size_t ndirs, cap_dirs;
	char **data; /* x.* objects */
	size_t ndata, cap_data;
	uint64_t (*refs)[2]; /* referenced (node, seq), sorted */
	size_t nrefs, cap_refs;
	int err;
};

static int push(char ***v, size_t *n, size_t *cap, const char *s)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 256;
		char **nv = realloc(*v, c * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = c;
	}
	(*v)[*n] = strdup(s);
	return (*v)[(*n)++] ? 0 : -ENOMEM;
}

static int gc_list(void *arg, const char *oid)
{
	struct gc_state *g = arg;

	if (!strncmp(oid, "d.", 2))
		return push(&g->dirs, &g->ndirs, &g->cap_dirs, oid);
	if (!strncmp(oid, "x.", 2))
		return push(&g->data, &g->ndata, &g->cap_data, oid);
	return 0;
}

static int gc_ref(void *arg, const char *key, size_t klen, const void *val, size_t vlen)
{
	struct gc_state *g = arg;
	const struct kv_rdent *e = val;

	if (vlen < sizeof(*e) || e->re_magic != KV_RDENT_MAGIC || e->re_type != KV_RDENT_FILE)
		return 0;
	if (g->nrefs == g->cap_refs) {
		size_t c = g->cap_refs ? g->cap_refs * 2 : 256;
		uint64_t(*nr)[2] = realloc(g->refs, c * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		g->refs = nr;
		g->cap_refs = c;
	}
	g->refs[g->nrefs][0] = e->re_node;
	g->refs[g->nrefs++][1] = e->re_seq;
	return 0;
}

static int ref_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* What one sweep found. */
struct gc_counts {
	size_t gc_dirs, gc_refs;
	uint64_t gc_kept, gc_removed, gc_young;
};

/*
 * One sweep of the namespace: lists every object, reads every directory's
 * entries, and removes the data objects no entry refers to that are older
 * than grace_ns (a put in flight writes its objects before its entry).
 */
static int gc_sweep(struct kv_rados *r, uint64_t grace_ns, struct gc_counts *c)
{
	const uint64_t sec = 1000ull * 1000 * 1000;
	struct gc_state g = {.r = r};
	time_t now = time(NULL);
	int err;

	memset(c, 0, sizeof(*c));
	err = kv_rados_list(r, gc_list, &g);
	for (size_t i = 0; !err && i < g.ndirs; i++)
		err = kv_rados_omap_each(r, g.dirs[i], gc_ref, &g);
	if (!err)
		qsort(g.refs, g.nrefs, sizeof(*g.refs), ref_cmp);
	for (size_t i = 0; !err && i < g.ndata; i++) {
		uint64_t key[2];
		uint32_t idx;
		time_t mtime;

		if (!kv_rados_parse_data_oid(g.data[i], &key[0], &key[1], &idx))
			continue;
		if (bsearch(key, g.refs, g.nrefs, sizeof(*g.refs), ref_cmp)) {
			c->gc_kept++;
			continue;
		}
		if (kv_rados_mtime(r, g.data[i], &mtime))
			continue; /* gone meanwhile */
		if ((uint64_t)(now > mtime ? now - mtime : 0) * sec < grace_ns) {
			c->gc_young++; /* maybe a put in flight */
			continue;
		}
		if (!kv_rados_remove(r, g.data[i]))
			c->gc_removed++;
	}
	c->gc_dirs = g.ndirs;
	c->gc_refs = g.nrefs;
	for (size_t i = 0; i < g.ndirs; i++)
		free(g.dirs[i]);
	for (size_t i = 0; i < g.ndata; i++)
		free(g.data[i]);
	free(g.dirs);
	free(g.data);
	free(g.refs);
	return err;
}

/* A sweep from the thread (--rados-gc-interval), counted in the stats. */
void kv_sh_background_sweep(struct kv_shared *sh)
{
	struct gc_counts c;
	uint64_t t0 = kv_now_ns();
	int err =
	    kv_sh_counted(sh, t0, gc_sweep(sh->sh_conn->c_r, sh->sh_gc_grace_ns, &c), "sweep");

	if (err)
		return;
	atomic_fetch_add(&sh->sh_gc_sweeps, 1);
	atomic_fetch_add(&sh->sh_gc_removed, c.gc_removed);
}

int kv_shared_gc(const struct kv_config *cfg, uint64_t grace_ns, FILE *out)
{
	const uint64_t sec = 1000ull * 1000 * 1000;
	const struct kv_rados_params p = {
	    .rp_conf = cfg->kc_rados_conf ? cfg->kc_rados_conf : KV_RADOS_CONF_DEFAULT,
	    .rp_id = cfg->kc_rados_id ? cfg->kc_rados_id : KV_RADOS_ID_DEFAULT,
	    .rp_pool = cfg->kc_rados_pool,
	    .rp_namespace = cfg->kc_rados_namespace ? cfg->kc_rados_namespace : "",
	    .rp_timeout_s = (unsigned)((cfg->kc_rados_timeout_ns + sec - 1) / sec)};
	struct kv_rados *r = NULL;
	struct gc_counts c;
	const char *step = "";
	int err;

	if (!kv_shared_built())
		return -ENOTSUP;
	err = kv_rados_open(&p, &r, &step);
	if (err) {
		fprintf(out, "rados-gc: cannot connect to pool '%s' (%s): %s\n", p.rp_pool, step,
			strerror(-err));
		return err;
	}
	err = gc_sweep(r, grace_ns, &c);
	if (err)
		fprintf(out, "rados-gc: pool '%s': %s\n", p.rp_pool, strerror(-err));
	else
		fprintf(out,
			"rados-gc: pool '%s' namespace '%s': %zu directories, %zu referenced "
			"versions; data objects: %" PRIu64 " in use, %" PRIu64
			" orphans removed, %" PRIu64 " orphans younger than the grace period "
			"kept\n",
			p.rp_pool, p.rp_namespace, c.gc_dirs, c.gc_refs, c.gc_kept, c.gc_removed,
			c.gc_young);
	kv_rados_close(r);
	return err;
}
