/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_dircache.c — listings of directories read from the cluster,
 * kept for --rados-cache-ttl (sh_dc, under sh_dc_lock, a leaf), the
 * directories known to be too large to list, and a key's entry looked up
 * through them (kv_sh_entry_lookup). Calls rados/shared_cluster.c.
 */
#include "rados/shared_int.h"

void kv_sh_dlist_put(struct dlist *dl)
{
	if (!dl || atomic_fetch_sub(&dl->dl_refs, 1) != 1)
		return;
	for (size_t i = 0; i < dl->dl_n; i++) {
		free(dl->dl_ent[i].de_name);
		free(dl->dl_ent[i].de_e);
	}
	free(dl->dl_ent);
	free(dl);
}

struct dl_fill {
	struct kv_shared *sh;
	struct dlist *dl;
	unsigned max; /* 0: all */
};

static int dl_add(void *arg, const char *key, size_t klen, const void *val, size_t vlen)
{
	struct dl_fill *f = arg;
	struct dlist *dl = f->dl;
	struct dl_ent *d;

	if (f->max && dl->dl_n >= f->max)
		return -E2BIG;
	if (!kv_sh_entry_ok(f->sh, dl->dl_oid, "(listed)", val, vlen))
		return 0;
	if (dl->dl_n == dl->dl_cap) {
		size_t cap = dl->dl_cap ? dl->dl_cap * 2 : 64;

		d = realloc(dl->dl_ent, cap * sizeof(*d));
		if (!d)
			return -ENOMEM;
		dl->dl_ent = d;
		dl->dl_cap = cap;
	}
	d = &dl->dl_ent[dl->dl_n];
	d->de_name = strndup(key, klen);
	d->de_e = malloc(vlen);
	if (!d->de_name || !d->de_e) {
		free(d->de_name);
		free(d->de_e);
		return -ENOMEM;
	}
	memcpy(d->de_e, val, vlen);
	d->de_len = vlen;
	dl->dl_n++;
	return 0;
}

static int dl_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dl_ent *)a)->de_name, ((const struct dl_ent *)b)->de_name);
}

/* Reads directory doid's listing (at most max entries, 0: all; -E2BIG past it). */
int kv_sh_dlist_fetch(struct kv_shared *sh, struct kv_rados *r, const char *doid, unsigned max,
		      struct dlist **out)
{
	struct dl_fill f = {.sh = sh, .dl = calloc(1, sizeof(struct dlist)), .max = max};
	uint64_t t0 = kv_now_ns();
	int err;

	if (!f.dl)
		return -ENOMEM;
	atomic_init(&f.dl->dl_refs, 1);
	snprintf(f.dl->dl_oid, sizeof(f.dl->dl_oid), "%s", doid);
	f.dl->dl_fetched_ns = mono_ns();
	err = kv_rados_omap_each(r, doid, dl_add, &f);
	if (err != -E2BIG && err != -ENOMEM)
		err = kv_sh_counted(sh, t0, err, "list directory");
	if (err) {
		kv_sh_dlist_put(f.dl);
		return err;
	}
	/* omap order is bytewise already; sorting again costs little and makes bsearch safe */
	qsort(f.dl->dl_ent, f.dl->dl_n, sizeof(*f.dl->dl_ent), dl_cmp);
	*out = f.dl;
	return 0;
}

/* The entry of name in dl, or NULL. */
const struct dl_ent *kv_sh_dlist_find(const struct dlist *dl, const char *name)
{
	const struct dl_ent key = {.de_name = (char *)name};

	return bsearch(&key, dl->dl_ent, dl->dl_n, sizeof(key), dl_cmp);
}

/* A cached listing of doid read after not_before and within the TTL, referenced; or NULL. */
struct dlist *kv_sh_dlist_cached(struct kv_shared *sh, const char *doid, uint64_t not_before)
{
	uint64_t now = mono_ns();
	struct dlist *dl = NULL;

	pthread_mutex_lock(&sh->sh_dc_lock);
	for (unsigned i = 0; i < sh->sh_ndc; i++)
		if (!strcmp(sh->sh_dc[i]->dl_oid, doid)) {
			struct dlist *c = sh->sh_dc[i];

			if (now - c->dl_fetched_ns < sh->sh_ttl_ns &&
			    c->dl_fetched_ns >= not_before) {
				atomic_fetch_add(&c->dl_refs, 1);
				dl = c;
			}
			break;
		}
	pthread_mutex_unlock(&sh->sh_dc_lock);
	return dl;
}

/* Forgets the cached listing of doid (dl NULL), or puts dl in its place (taking a reference). */
void kv_sh_dlist_set(struct kv_shared *sh, const char *doid, struct dlist *dl)
{
	struct dlist *gone[DC_DIRS + 1];
	unsigned ngone = 0, keep = 0;
	uint64_t now = mono_ns();

	pthread_mutex_lock(&sh->sh_dc_lock);
	for (unsigned i = 0; i < sh->sh_ndc; i++) {
		struct dlist *c = sh->sh_dc[i];

		/* this directory's, and every one past its TTL, go */
		if (!strcmp(c->dl_oid, doid) || now - c->dl_fetched_ns >= sh->sh_ttl_ns)
			gone[ngone++] = c;
		else
			sh->sh_dc[keep++] = c;
	}
	sh->sh_ndc = keep;
	if (dl && keep == DC_DIRS)
		gone[ngone++] = sh->sh_dc[--sh->sh_ndc]; /* full of fresh ones: one goes */
	if (dl) {
		atomic_fetch_add(&dl->dl_refs, 1);
		sh->sh_dc[sh->sh_ndc++] = dl;
	}
	pthread_mutex_unlock(&sh->sh_dc_lock);
	for (unsigned i = 0; i < ngone; i++)
		kv_sh_dlist_put(gone[i]);
}

/*
 * The entry of name in directory doid, as a lookup wants it: from a fresh
 * listing (read after not_before), else by reading the listing (cached
 * when small), else by reading the one entry. *ent malloc'ed; -ENOENT.
 */
/*
 * Directories whose listing was too large to keep (DC_MAX), remembered for
 * 10 s: their names are then asked one by one, not listed again.
 */
bool kv_sh_big_dir(struct kv_shared *sh, const char *doid, bool mark)
{
	uint64_t h = XXH3_64bits(doid, strlen(doid)), now = mono_ns();
	bool found = false;
	unsigned i;

	pthread_mutex_lock(&sh->sh_dc_lock);
	for (i = 0; i < BIG_DIRS && !found; i++)
		found = sh->sh_big[i] == h && now - sh->sh_big_ns[i] < 10000000000ull;
	if (!found && mark) {
		i = sh->sh_nbig++ % BIG_DIRS;
		sh->sh_big[i] = h;
		sh->sh_big_ns[i] = now;
	}
	pthread_mutex_unlock(&sh->sh_dc_lock);
	return found;
}

int kv_sh_entry_lookup(struct kv_shared *sh, struct kv_rados *r, const char *doid, const char *name,
		       uint64_t not_before, struct kv_rdent **ent, size_t *len)
{
	struct dlist *dl = kv_sh_dlist_cached(sh, doid, not_before);
	const struct dl_ent *d;
	int err = 0;

	if (!dl && kv_sh_big_dir(sh, doid, false))
		return kv_sh_entry_get(sh, r, doid, name, ent,
				       len); /* not listed again and again */
	if (!dl) {
		err = kv_sh_dlist_fetch(sh, r, doid, DC_MAX, &dl);
		if (err == -E2BIG) {
			kv_sh_big_dir(sh, doid, true);
			return kv_sh_entry_get(sh, r, doid, name, ent, len);
		}
		if (err)
			return err;
		kv_sh_dlist_set(sh, doid, dl);
	}
	d = kv_sh_dlist_find(dl, name);
	if (!d)
		err = -ENOENT;
	else if (!(*ent = malloc(d->de_len)))
		err = -ENOMEM;
	else {
		memcpy(*ent, d->de_e, d->de_len);
		*len = d->de_len;
	}
	kv_sh_dlist_put(dl);
	return err;
}
