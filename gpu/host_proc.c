/* SPDX-License-Identifier: MIT */
/*
 * gpu/host_proc.c — regions in the client's own address space
 * (KVFS_REGION_HOST_PROC), copied with process_vm_readv/process_vm_writev.
 *
 * The kernel allows those calls when the daemon may ptrace the client
 * (PTRACE_MODE_ATTACH_REALCREDS): the daemon has CAP_SYS_PTRACE (runs as
 * root), or it runs as the client's user and Yama's ptrace_scope lets it —
 * scope 0, or scope 1 with the client having named the daemon through
 * prctl(PR_SET_PTRACER, ...), which libkvfs does. Registration probes the
 * first and last byte of the range, so a daemon that may not reach the
 * client fails there with -EPERM (and a range that is not mapped with
 * -EFAULT) rather than on the first put.
 *
 * The client is blocked in the ioctl while the daemon copies, so the pid
 * names the same process throughout a copy. A range the client unmaps
 * after registering fails the key with -EIO.
 */
#include <errno.h>
#include <sys/uio.h>

#include "gpu/region.h"

static int vm_copy(pid_t pid, bool to_remote, const struct iovec *local, int n, uint64_t addr,
		   uint64_t len)
{
	struct iovec loc[64], rem;
	int first = 0;
	uint64_t skip = 0;

	while (len) {
		int k = 0;
		ssize_t done;

		for (int i = first; i < n && k < 64; i++, k++) {
			loc[k] = local[i];
			if (i == first) {
				loc[k].iov_base = (char *)loc[k].iov_base + skip;
				loc[k].iov_len -= skip;
			}
		}
		rem = (struct iovec){(void *)(uintptr_t)addr, len};
		done = to_remote ? process_vm_writev(pid, loc, (unsigned long)k, &rem, 1, 0)
				 : process_vm_readv(pid, loc, (unsigned long)k, &rem, 1, 0);
		if (done < 0)
			return -errno;
		if (done == 0)
			return -EFAULT;
		addr += (uint64_t)done;
		len -= (uint64_t)done;
		/* Partial: skip what was done in the local list. */
		while (done > 0) {
			uint64_t left = local[first].iov_len - skip;

			if ((uint64_t)done < left) {
				skip += (uint64_t)done;
				break;
			}
			done -= (ssize_t)left;
			first++;
			skip = 0;
		}
	}
	return 0;
}

static int proc_open(struct kv_region *r, const struct kv_region_desc *d, const struct kv_caller *c)
{
	uint64_t end;
	char b;
	struct iovec loc = {&b, 1};
	int err;

	if (__builtin_add_overflow(d->rd_addr, d->rd_length, &end) || (uintptr_t)end != end)
		return -EFAULT;
	r->rg_pid = c->kc_tgid;
	r->rg_addr = d->rd_addr;
	err = vm_copy(r->rg_pid, false, &loc, 1, d->rd_addr, 1);
	if (!err)
		err = vm_copy(r->rg_pid, false, &loc, 1, end - 1, 1);
	return err == -ESRCH ? -ESRCH : err == -EPERM ? -EPERM : err ? -EFAULT : 0;
}

static void proc_close(struct kv_region *r)
{
}

static int proc_copy(struct kv_region *r, bool to_region, uint64_t off, const struct iovec *iov,
		     int n)
{
	uint64_t len = 0;
	int err;

	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	err = vm_copy(r->rg_pid, to_region, iov, n, r->rg_addr + off, len);
	return err == -EFAULT || err == -ESRCH ? -EIO : err;
}

const struct kv_region_ops kv_host_proc_ops = {
    .ro_name = "host_proc",
    .ro_open = proc_open,
    .ro_close = proc_close,
    .ro_copy = proc_copy,
};
