/* SPDX-License-Identifier: MIT */
/* core/resv.c — reserved extents (core/resv.h). */
#include "core/resv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The first range that ends after k (rv_n when none). */
static uint32_t first_after(const struct kv_resv *rv, uint32_t k)
{
	uint32_t lo = 0, hi = rv->rv_n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (rv->rv_r[mid].xr_end <= k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Room for `more` ranges. Returns 0 or -ENOMEM. */
static int grow(struct kv_resv *rv, uint32_t more)
{
	struct kv_xrange *r;
	uint32_t max;

	if (rv->rv_n + more <= rv->rv_max)
		return 0;
	max = rv->rv_max ? rv->rv_max * 2 : 2;
	while (max < rv->rv_n + more)
		max *= 2;
	r = realloc(rv->rv_r, max * sizeof(*r));
	if (!r)
		return -ENOMEM;
	rv->rv_r = r;
	rv->rv_max = max;
	return 0;
}

int kv_resv_add(struct kv_resv **rvp, uint32_t first, uint32_t end)
{
	struct kv_resv *rv = *rvp;
	struct kv_xrange *r;
	uint32_t i;

	if (first >= end)
		return 0;
	if (!rv) {
		rv = calloc(1, sizeof(*rv));
		if (!rv)
			return -ENOMEM;
		*rvp = rv;
	}
	/* Ranges never overlap what is added: join the neighbours it touches. */
	i = first_after(rv, first ? first - 1 : 0);
	r = rv->rv_r;
	if (i < rv->rv_n && r[i].xr_end == first) {
		r[i].xr_end = end;
		if (i + 1 < rv->rv_n && r[i + 1].xr_first == end) {
			r[i].xr_end = r[i + 1].xr_end;
			memmove(&r[i + 1], &r[i + 2], (rv->rv_n - i - 2) * sizeof(*r));
			rv->rv_n--;
		}
	} else if (i < rv->rv_n && r[i].xr_first == end) {
		r[i].xr_first = first;
	} else {
		if (grow(rv, 1))
			return -ENOMEM;
		r = rv->rv_r;
		memmove(&r[i + 1], &r[i], (rv->rv_n - i) * sizeof(*r));
		r[i] = (struct kv_xrange){first, end};
		rv->rv_n++;
	}
	rv->rv_count += end - first;
	return 0;
}

int64_t kv_resv_cut(struct kv_resv **rvp, uint32_t first, uint32_t end)
{
	struct kv_resv *rv = *rvp;
	uint32_t i, j, n = 0;
	struct kv_xrange *r;
	int64_t gone = 0;

	if (!rv || first >= end)
		return 0;
	i = first_after(rv, first);
	r = rv->rv_r;
	if (i < rv->rv_n && r[i].xr_first < first && r[i].xr_end > end) { /* a split */
		if (grow(rv, 1))
			return -ENOMEM;
		r = rv->rv_r;
		memmove(&r[i + 1], &r[i], (rv->rv_n - i) * sizeof(*r));
		rv->rv_n++;
		r[i].xr_end = first;
		r[i + 1].xr_first = end;
		rv->rv_count -= end - first;
		return end - first;
	}
	/* Ranges i.. that start before end: trim the ends, drop the ones inside. */
	for (j = i; j < rv->rv_n && r[j].xr_first < end; j++) {
		uint32_t lo = r[j].xr_first > first ? r[j].xr_first : first;
		uint32_t hi = r[j].xr_end < end ? r[j].xr_end : end;

		gone += hi - lo;
		if (r[j].xr_first < first)
			r[j].xr_end = first;
		else if (r[j].xr_end > end)
			r[j].xr_first = end;
		else
			continue; /* inside: dropped */
		r[i + n++] = r[j];
	}
	memmove(&r[i + n], &r[j], (rv->rv_n - j) * sizeof(*r));
	rv->rv_n -= j - i - n;
	rv->rv_count -= (uint64_t)gone;
	if (!rv->rv_n) {
		kv_resv_free(rv);
		*rvp = NULL;
	}
	return gone;
}

bool kv_resv_has(const struct kv_resv *rv, uint32_t k)
{
	uint32_t i;

	if (!rv)
		return false;
	i = first_after(rv, k);
	return i < rv->rv_n && rv->rv_r[i].xr_first <= k;
}

void kv_resv_free(struct kv_resv *rv)
{
	if (rv)
		free(rv->rv_r);
	free(rv);
}
