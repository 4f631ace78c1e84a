/* SPDX-License-Identifier: MIT */
/*
 * fs/main.c — kvfs [options] DATA_DIR MOUNTPOINT
 *
 * Exit status: 0 after a clean unmount (fusermount3 -u, SIGINT, SIGTERM,
 * SIGHUP), --help or --version; 2 for a bad command line; 1 for anything
 * else that stops it from serving (DATA_DIR in use, mount refused, ...).
 * --fsck exits 0 when the data directory is sound and 1 when it found
 * damage; --salvage 0 when it rebuilt the metadata.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "rados/shared.h"
#include "fs/fs.h"
#include "fs/metrics.h"
#include "fs/metrics_http.h"
#include "fs/options.h"
#include "fs/service.h"
#include "fs/uring.h"
#include "gpu/copy_pool.h"
#include "gpu/dev.h"
#include "gpu/region.h"
#include "ssd/datadir.h"

extern char **environ;

#define MAX_READAHEAD_KB 1024

/* Says so when recovery had to drop keys: their data is not silently gone. */
static void report_recovery(struct kv_store *st)
{
	struct kv_store_usage u;

	kv_store_usage(st, &u);
	if (u.ku_lost_keys)
		fprintf(stderr,
			"kvfs: recovery dropped %llu keys whose records are missing or damaged "
			"(see kvfs --fsck and --salvage)\n",
			(unsigned long long)u.ku_lost_keys);
}

/* Builds libfuse's argv: our program name, -o with our mount options, -d. */
static int fuse_args_build(const struct kv_config *cfg, const char *user_opts,
			   struct fuse_args *args)
{
	char *opts;
	int err = 0;

	/* Permissions: the kernel's for a mount others may use, else ours (fs/fs.h). */
	if (asprintf(&opts, "%sfsname=kvfs,subtype=kvfs%s%s",
		     cfg->kc_allow_other ? "default_permissions," : "", *user_opts ? "," : "",
		     user_opts) < 0)
		return -ENOMEM;
	if (fuse_opt_add_arg(args, "kvfs") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, opts) || (cfg->kc_debug && fuse_opt_add_arg(args, "-d")))
		err = -ENOMEM;
	free(opts);
	return err;
}

/*
 * The device number of the mount at mountpoint (the last one there), from
 * /proc/self/mountinfo, not stat(2), which would wait on this very daemon.
 * Returns 0 or -ENOENT.
 */
static int mount_dev(const char *mountpoint, unsigned *maj, unsigned *min)
{
	char line[4096], mnt[4096];
	unsigned a, b;
	int err = -ENOENT;
	FILE *f = fopen("/proc/self/mountinfo", "r");

	if (!f)
		return -ENOENT;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mnt) != 3 ||
		    strcmp(mnt, mountpoint) != 0)
			continue;
		*maj = a;
		*min = b;
		err = 0;
	}
	fclose(f);
	return err;
}

/*
 * Raises the kernel's readahead for the mount with device maj:min to the
 * largest FUSE request (1 MiB; the kernel caps a new FUSE mount at 128
 * KiB): cold sequential reads through the page cache run about 40% faster
 * (README, "Page cache"). Best effort: needs root.
 */
static void tune_readahead(unsigned maj, unsigned min)
{
	char path[128];
	FILE *ra;

	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
	ra = fopen(path, "w");
	if (ra) {
		fprintf(ra, "%u\n", MAX_READAHEAD_KB);
		fclose(ra);
	}
}

/* The region table and the trace file (opened before libfuse changes to /). Returns 0 or 1. */
static int open_ioctl_path(struct kv_fs *fs)
{
	const char *trace = fs->kf_cfg->kc_trace;
	int err = kv_region_table_create(kv_copy_pool_default_helpers(), &fs->kf_regions);

	if (err) {
		fprintf(stderr, "kvfs: %s\n", strerror(-err));
		return 1;
	}
	if (!trace)
		return 0;
	fs->kf_trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fs->kf_trace_fd < 0) {
		fprintf(stderr, "kvfs: cannot open trace file '%s': %s\n", trace, strerror(errno));
		return 1;
	}
	return 0;
}

static void close_ioctl_path(struct kv_fs *fs)
{
	if (fs->kf_regions)
		kv_region_table_destroy(fs->kf_regions);
	fs->kf_regions = NULL;
	if (fs->kf_trace_fd >= 0)
		close(fs->kf_trace_fd);
	fs->kf_trace_fd = -1;
}

/*
 * Without -f kvfs goes to the background, as a mount helper (fstab) must.
 * It forks before it opens anything or starts a thread (a child keeps only
 * the thread that forked, and the data directory's lock holds the
 * daemon's pid); the parent waits for the child to say it serves the mount
 * or why it stopped, and exits with that status. Errors until then still
 * go to the caller's stderr. Returns 0 in the child (*ready_fd set); the
 * parent never returns.
 */
static int go_background(int *ready_fd)
{
	unsigned char status = 1;
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		close(p[0]);
		close(p[1]);
		return err;
	}
	if (pid > 0) {
		close(p[1]);
		/* Nothing read: the child died before it could say. */
		if (read(p[0], &status, 1) != 1)
			status = 1;
		_exit(status);
	}
	close(p[0]);
	setsid();
	*ready_fd = p[1];
	return 0;
}

/*
 * Tells the waiting parent the exit status to report (0: mounted and
 * serving), once. Serving, the daemon lets go of the caller's terminal and
 * working directory.
 */
static void tell_parent(int *ready_fd, int status)
{
	unsigned char st = (unsigned char)status;
	int null;

	if (*ready_fd < 0)
		return;
	/* Failing to let go of the directory or the terminal harms nobody. */
	if (status == 0 && chdir("/") == 0) {
		null = open("/dev/null", O_RDWR);
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
			if (null > STDERR_FILENO)
				close(null);
		}
	}
	if (write(*ready_fd, &st, 1) != 1) {
		/* the parent is gone: nobody to tell */
	}
	close(*ready_fd);
	*ready_fd = -1;
}

/* libfuse's complaint about the mount options, kept to report it as one line. */
static char fuse_complaint[256];

static void keep_complaint(enum fuse_log_level level, const char *fmt, va_list ap)
{
	size_t n = strlen(fuse_complaint);

	vsnprintf(fuse_complaint + n, sizeof(fuse_complaint) - n, fmt, ap);
	fuse_complaint[strcspn(fuse_complaint, "\n")] = '\0';
}

static int serve(struct kv_fs *fs, struct fuse_args *args)
{
	struct kv_config *cfg = fs->kf_cfg;
	struct fuse_loop_config *loop;
	struct fuse_session *se;
	struct kv_fs_metrics *metrics = NULL;
	char why[320];
	unsigned maj = 0, min = 0;
	bool stuck = false;
	int ret = 1, rc;

	fuse_set_log_func(keep_complaint);
	se = fuse_session_new(args, &kv_fs_ops, sizeof(kv_fs_ops), fs);
	fuse_set_log_func(NULL);
	if (!se) {
		fprintf(stderr, "kvfs: bad mount option: %s\n",
			fuse_complaint[0] ? fuse_complaint : "refused by libfuse");
		return 2;
	}
	fs->kf_se = se;
	if (fuse_set_signal_handlers(se))
		goto out_session;
	if (cfg->kc_uring == KV_URING_ON && kv_uring_available(why, sizeof(why))) {
		fprintf(stderr, "kvfs: --uring=on: %s\n", why);
		goto out_signals;
	}
	if (fuse_session_mount(se, cfg->kc_mountpoint)) {
		fprintf(stderr, "kvfs: cannot mount at '%s'\n", cfg->kc_mountpoint);
		goto out_signals;
	}
	rc = kv_uring_setup(se, (enum kv_uring_mode)cfg->kc_uring, cfg->kc_threads,
			    &fs->kf_uring);
	if (rc) {
		fprintf(stderr, "kvfs: cannot set up FUSE over io_uring: %s\n", strerror(-rc));
		goto out_unmount;
	}
	if (mount_dev(cfg->kc_mountpoint, &maj, &min) == 0)
		tune_readahead(maj, min);
	/* the kernel's dev_t, as fusectl names the connection */
	rc = kv_fs_notify_start(fs, se, (unsigned long)maj << 20 | min, &fs->kf_notify);
	if (rc) {
		fprintf(stderr, "kvfs: cannot start the invalidation thread: %s\n", strerror(-rc));
		goto out_unmount;
	}
	kv_store_set_evicted(fs->kf_store, kv_fs_notify_evicted, fs->kf_notify);
	/* --metrics: after the notifier, whose counts it reads; stopped before it goes */
	if (kv_fs_metrics_start(fs, kv_fs_metrics_render, cfg->kc_metrics, &metrics, why,
				sizeof(why))) {
		fprintf(stderr, "kvfs: %s\n", why);
		goto out_notify;
	}
	fprintf(stderr,
		"kvfs: mounted at %s (data %s, pool %llu MiB); stop with fusermount3 -u %s or "
		"Ctrl-C\n",
		cfg->kc_mountpoint, cfg->kc_data_dir,
		(unsigned long long)(kv_pool_size(kv_store_pool(fs->kf_store)) >> 20),
		cfg->kc_mountpoint);
	tell_parent(&fs->kf_ready_fd, 0);
	kv_service_ready(fs->kf_store, cfg->kc_mountpoint);
	/* Only now: on a few cores it would slow recovery and the mount down. */
	kv_pool_fill(kv_store_pool(fs->kf_store));
	loop = fuse_loop_cfg_create();
	if (!loop)
		goto out_notify;
	fuse_loop_cfg_set_clone_fd(loop, 1);
	fuse_loop_cfg_set_max_threads(loop, cfg->kc_threads);
	rc = fuse_session_loop_mt(se, loop);
	kv_service_stopping();
	fuse_loop_cfg_destroy(loop);
	/* A signal ends the loop with its number: that is a clean stop. */
	ret = (rc == 0 || rc == SIGINT || rc == SIGTERM || rc == SIGHUP) ? 0 : 1;
	if (kv_uring_failed(fs->kf_uring))
		ret = 1; /* --uring=on could not be honoured: said so in one line */
out_notify:
	kv_fs_metrics_stop(metrics);
	/* no hook call runs once this returns: nothing is queued after the stop */
	kv_store_set_evicted(fs->kf_store, NULL, NULL);
	stuck = !kv_fs_notify_stop(fs->kf_notify);
	fs->kf_notify = NULL;
out_unmount:
	/*
	 * The queues' threads end before the unmount closes /dev/fuse, which a
	 * request they still serve may write a notification to; requests the
	 * kernel queues on the ring meanwhile end with the connection, as those
	 * on /dev/fuse do once the loop has stopped reading. Joined, they were the
	 * last users of the hooks' state (libfuse's loop and the notifier are
	 * done): it goes, and the hooks pass through.
	 */
	kv_uring_stop(fs->kf_uring);
	fs->kf_uring = NULL;
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fs->kf_se = NULL;
	/* A thread still inside an invalidation keeps using se: leave it to it. */
	if (stuck)
		fprintf(stderr, "kvfs: an entry invalidation is stuck in the kernel: left there\n");
	else
		fuse_session_destroy(se);
	kv_fs_close_all(fs);
	return ret;
}

/*
 * Recovery puts a few hundred bytes of heap per key (1M keys: ~420 MB), and
 * first-touch faults of its 4 KiB pages were a third of a clean restart.
 * glibc madvises its heap for transparent huge pages with the tunable
 * glibc.malloc.hugetlb=1 (glibc 2.35; older ones ignore it), which it
 * reads only at exec: so the daemon executes itself once more with it added
 * to GLIBC_TUNABLES — unless GLIBC_TUNABLES names it already (the user's
 * choice: glibc.malloc.hugetlb=0 keeps 4 KiB pages, and the second start
 * sees it there) or the process runs set-id (glibc drops the variable).
 * Measured on 2 cores: a clean restart of 1M keys about twice as quick,
 * about one byte more DRAM per key. A failed exec goes on as it is.
 */
static void exec_with_huge_heap(char **argv)
{
	const char *old = getenv("GLIBC_TUNABLES");
	char *val;

	if ((old && strstr(old, "glibc.malloc.hugetlb")) || getauxval(AT_SECURE))
		return;
	if (asprintf(&val, "%s%sglibc.malloc.hugetlb=1", old ? old : "", old && *old ? ":" : "") <
	    0)
		return;
	if (setenv("GLIBC_TUNABLES", val, 1) == 0) {
		execv("/proc/self/exe", argv);
		if (old)
			setenv("GLIBC_TUNABLES", old, 1);
		else
			unsetenv("GLIBC_TUNABLES");
	}
	free(val);
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct kv_config cfg;
	struct kv_datadir dd;
	struct kv_fs fs = {.kf_cfg = &cfg,
			   .kf_trace_fd = -1,
			   .kf_ready_fd = -1,
			   .kf_open_lock = PTHREAD_MUTEX_INITIALIZER};
	char *fuse_opts = NULL, err[512];
	char *abs_mnt;
	uint64_t lost;
	pid_t holder;
	int rc, mode, ret = 1;

	exec_with_huge_heap(argv);
	kv_config_defaults(&cfg);
	rc = kv_options_parse(argc, argv, environ, &cfg, &fuse_opts, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "%s\n", rc == -EINVAL ? err : strerror(-rc));
		ret = 2;
		goto out_cfg;
	}
	if (rc == KV_OPT_HELP || rc == KV_OPT_VERSION) {
		if (rc == KV_OPT_HELP)
			fputs(kv_options_usage, stdout);
		else
			printf("kvfs %s (libfuse %s, gpu backend %s, rados %s, systemd %s)\n",
			       KVFS_VERSION, fuse_pkgversion(), kv_dev_built(),
			       kv_shared_built() ? "librados" : "none",
			       kv_service_built() ? "sd_notify" : "none");
		ret = 0;
		goto out_cfg;
	}
	mode = rc;
	if (mode == KV_OPT_RADOS_GC) {
		rc = kv_shared_gc(&cfg, cfg.kc_rados_gc_grace_ns, stdout);
		if (rc == -ENOTSUP)
			fprintf(stderr, "kvfs: --rados-gc: this kvfs was built without librados\n");
		ret = rc ? 1 : 0;
		goto out_cfg;
	}
	if (mode == KV_OPT_RUN && cfg.kc_rados_pool && !kv_shared_built()) {
		fprintf(stderr, "kvfs: --rados-pool: this kvfs was built without librados "
				"(rebuild with librados-dev installed, -DKVFS_RADOS=ON)\n");
		goto out_cfg;
	}
	/* libfuse changes to / when it starts serving: keep absolute paths. */
	abs_mnt = mode == KV_OPT_RUN ? realpath(cfg.kc_mountpoint, NULL) : NULL;
	if (mode == KV_OPT_RUN && !abs_mnt) {
		fprintf(stderr, "kvfs: mountpoint '%s': %s\n", cfg.kc_mountpoint, strerror(errno));
		goto out_cfg;
	}
	if (abs_mnt) {
		free(cfg.kc_mountpoint);
		cfg.kc_mountpoint = abs_mnt;
	}
	if (mode == KV_OPT_RUN && !cfg.kc_foreground && (rc = go_background(&fs.kf_ready_fd))) {
		fprintf(stderr, "kvfs: cannot go to the background: %s\n", strerror(-rc));
		goto out_cfg;
	}
	rc = kv_datadir_open(&dd, cfg.kc_data_dir, &holder);
	if (rc == -EBUSY) {
		fprintf(stderr, "kvfs: data directory '%s' is in use by another kvfs (pid %d)\n",
			cfg.kc_data_dir, (int)holder);
		goto out_cfg;
	}
	if (rc) {
		fprintf(stderr, "kvfs: cannot open data directory '%s': %s\n", cfg.kc_data_dir,
			strerror(-rc));
		goto out_cfg;
	}
	if (cfg.kc_ssd_size_auto && kv_datadir_default_quota(&dd, &cfg.kc_ssd_size))
		cfg.kc_ssd_size = 0;
	if (mode != KV_OPT_RUN) {
		ret = mode == KV_OPT_FSCK ? kv_store_fsck(&cfg, dd.kd_dirfd, stdout)
					  : kv_store_salvage(&cfg, dd.kd_dirfd, stdout);
		ret = ret < 0 ? 1 : ret;
		goto out_datadir;
	}
	/*
	 * After the fork: the CUDA runtime starts threads. With --gpu=auto and
	 * no usable device the reason goes to the stats, not to stderr.
	 */
	rc = kv_dev_start((enum kv_dev_mode)cfg.kc_gpu, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "kvfs: --gpu=cuda: %s\n", err);
		goto out_datadir;
	}
	kv_service_recovering(cfg.kc_data_dir);
	rc = kv_store_create(&fs.kf_store, &cfg, dd.kd_dirfd);
	if (rc) {
		fprintf(stderr, "kvfs: cannot start on '%s' (pool %llu bytes): %s\n",
			cfg.kc_data_dir, (unsigned long long)cfg.kc_mem_size, strerror(-rc));
		goto out_datadir;
	}
	report_recovery(fs.kf_store);
	kv_dev_pin(kv_pool_base(kv_store_pool(fs.kf_store)),
		   kv_pool_size(kv_store_pool(fs.kf_store)));
	if (open_ioctl_path(&fs))
		goto out_store;
	/* in the background: the mount never waits for the cluster */
	if (cfg.kc_rados_pool) {
		uint64_t node;

		rc = kv_datadir_node(&dd, &node);
		if (!rc)
			rc = kv_shared_start(&cfg, fs.kf_store, node, dd.kd_dirfd, &fs.kf_shared);
		if (rc) {
			fprintf(stderr, "kvfs: cannot start the RADOS tier: %s\n", strerror(-rc));
			goto out_store;
		}
	}
	kv_stats_init(&fs.kf_stats);
	clock_gettime(CLOCK_REALTIME, &fs.kf_mounted);
	fs.kf_own_perms = !cfg.kc_allow_other;
	if (fuse_args_build(&cfg, fuse_opts, &args)) {
		fprintf(stderr, "kvfs: out of memory\n");
		goto out_store;
	}
	ret = serve(&fs, &args);
	fuse_opt_free_args(&args);
out_store:
	kv_service_stopping();
	kv_shared_stop(fs.kf_shared);
	fs.kf_shared = NULL;
	close_ioctl_path(&fs);
	kv_dev_stop(); /* unpins the pool before it goes */
	lost = kv_store_destroy(fs.kf_store);
	if (lost) {
		fprintf(stderr,
			"kvfs: %llu keys could not be written to the SSD (full, or I/O "
			"errors): their newest values are lost\n",
			(unsigned long long)lost);
		ret = ret ? ret : 1;
	}
out_datadir:
	kv_service_stopping(); /* a recovery that failed: its STATUS= lines end */
	kv_datadir_close(&dd);
out_cfg:
	free(fuse_opts);
	kv_config_free(&cfg);
	tell_parent(&fs.kf_ready_fd, ret > 0 && ret < 256 ? ret : 1);
	return ret;
}
