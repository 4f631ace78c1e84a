/* SPDX-License-Identifier: MIT */
/*
 * fs/options.h — the command line.
 *
 *   kvfs [options] DATA_DIR MOUNTPOINT
 *
 * Each setting comes, weakest first, from its default, a KVFS_* variable in
 * the environment, an -o key=value option, or a --long-option=VALUE; the
 * last of equal strength wins. -o options that are not kvfs settings are
 * FUSE mount options and are handed to libfuse (allow_other, ro, ...);
 * fstab-only words (defaults, auto, noauto, user, nouser, users, _netdev,
 * nofail, x-*) are dropped.
 */
#ifndef KVFS_FS_OPTIONS_H
#define KVFS_FS_OPTIONS_H

#include <stddef.h>

#include "core/config.h"

/* What kv_options_parse found to do. */
enum kv_opt_action {
	KV_OPT_RUN,	/* mount */
	KV_OPT_HELP,	/* print kv_options_usage, exit 0 */
	KV_OPT_VERSION, /* print the version, exit 0 */
	KV_OPT_FSCK,	/* check DATA_DIR offline */
	KV_OPT_SALVAGE, /* rebuild DATA_DIR's metadata from its buckets */
	KV_OPT_RADOS_GC, /* remove orphan objects from the shared pool */
};

/*
 * Parses argv and environ into cfg (which must hold the defaults) and
 * fills fuse_opts with the comma-separated FUSE mount options to pass on
 * (malloc'ed, possibly empty). Returns a kv_opt_action, or -EINVAL with a
 * one-line message naming the bad option in err (err_len bytes).
 */
int kv_options_parse(int argc, char **argv, char **environ_, struct kv_config *cfg,
		     char **fuse_opts, char *err, size_t err_len);

/* The --help text. */
extern const char kv_options_usage[];

#endif
