/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_stats.c — the tier's counters as a snapshot
 * (kv_shared_stats) and as the "rados" member of MNT/.kvfs/stats
 * (kv_shared_render).
 */
#include "rados/shared_int.h"

const char *kv_shared_state_name(enum kv_shared_state st)
{
	switch (st) {
	case KV_SHARED_CONNECTING:
		return "connecting";
	case KV_SHARED_CONNECTED:
		return "connected";
	case KV_SHARED_UNREACHABLE:
		return "unreachable";
	}
	return "?";
}

void kv_shared_stats(struct kv_shared *sh, struct kv_shared_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&sh->sh_lock);
	out->ss_state = sh->sh_state;
	out->ss_last_err = sh->sh_last_err;
	memcpy(out->ss_last_error_text, sh->sh_last_text, sizeof(out->ss_last_error_text));
	out->ss_backlog = sh->sh_q_n;
	out->ss_backlog_bytes = sh->sh_q_bytes;
	pthread_mutex_unlock(&sh->sh_lock);
	out->ss_healthy = atomic_load(&sh->sh_healthy);
	out->ss_connect_attempts = atomic_load(&sh->sh_attempts);
	out->ss_connect_failures = atomic_load(&sh->sh_failures);
	out->ss_objects_read = atomic_load(&sh->sh_objects_read);
	out->ss_objects_written = atomic_load(&sh->sh_objects_written);
	out->ss_bytes_read = atomic_load(&sh->sh_bytes_read);
	out->ss_bytes_written = atomic_load(&sh->sh_bytes_written);
	out->ss_errors = atomic_load(&sh->sh_errors);
	out->ss_timeouts = atomic_load(&sh->sh_timeouts);
	out->ss_hits = atomic_load(&sh->sh_hits);
	out->ss_puts = atomic_load(&sh->sh_puts);
	out->ss_deletes = atomic_load(&sh->sh_deletes);
	out->ss_gc_sweeps = atomic_load(&sh->sh_gc_sweeps);
	out->ss_gc_removed = atomic_load(&sh->sh_gc_removed);
	out->ss_replayed = sh->sh_replayed;
	out->ss_prefetched = atomic_load(&sh->sh_prefetched);
	out->ss_lat_p50 = kv_hist_percentile(&sh->sh_lat, 50);
	out->ss_lat_p90 = kv_hist_percentile(&sh->sh_lat, 90);
	out->ss_lat_p99 = kv_hist_percentile(&sh->sh_lat, 99);
}

/* Writes s as a JSON string literal, quotes included. */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	kv_json_str(f, s, strlen(s));
	fputc('"', f);
}

int kv_shared_render(const char *pool, const char *ns, const struct kv_shared_stats *s, char **out)
{
	const char *ename = s->ss_last_err ? strerrorname_np(-s->ss_last_err) : "";
	size_t len;
	FILE *f = open_memstream(out, &len);

	if (!f)
		return -ENOMEM;
	fprintf(f, "\"rados\": {\"state\": \"%s\", \"pool\": ", kv_shared_state_name(s->ss_state));
	json_string(f, pool);
	fputs(", \"namespace\": ", f);
	json_string(f, ns);
	fprintf(f,
		", \"connect_attempts\": %" PRIu64 ", \"connect_failures\": %" PRIu64
		", \"last_error\": ",
		s->ss_connect_attempts, s->ss_connect_failures);
	json_string(f, ename ? ename : "other");
	fputs(", \"last_error_text\": ", f);
	json_string(f, s->ss_last_error_text);
	fprintf(
	    f,
	    ", \"healthy\": %s, \"objects_read\": %" PRIu64 ", \"objects_written\": %" PRIu64
	    ", \"bytes_read\": %" PRIu64 ", \"bytes_written\": %" PRIu64 ", \"hits\": %" PRIu64
	    ", \"prefetched\": %" PRIu64 ", \"puts\": %" PRIu64 ", \"deletes\": %" PRIu64 ", \"backlog\": %" PRIu64
	    ", \"backlog_bytes\": %" PRIu64 ", \"replayed\": %" PRIu64 ", \"gc_sweeps\": %" PRIu64
	    ", \"gc_removed\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"timeouts\": %" PRIu64
	    ", \"lat_ns\": {\"p50\": %" PRIu64 ", \"p90\": %" PRIu64 ", \"p99\": %" PRIu64 "}}",
	    s->ss_healthy ? "true" : "false", s->ss_objects_read, s->ss_objects_written,
	    s->ss_bytes_read, s->ss_bytes_written, s->ss_hits, s->ss_prefetched, s->ss_puts,
	    s->ss_deletes,
	    s->ss_backlog, s->ss_backlog_bytes, s->ss_replayed, s->ss_gc_sweeps, s->ss_gc_removed,
	    s->ss_errors, s->ss_timeouts, s->ss_lat_p50, s->ss_lat_p90, s->ss_lat_p99);
	if (fclose(f) != 0)
		return -ENOMEM;
	return 0;
}
