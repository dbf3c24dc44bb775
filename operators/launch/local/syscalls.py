"""The system calls local user code may not make: a seccomp filter with the effect of Docker's default profile for a
container without capabilities, built with libseccomp (PyPI pyseccomp, ctypes bindings to the system's
libseccomp.so.2) and handed to bubblewrap (--seccomp FD), which loads it just before it runs the job's command.

Docker's profile allows a list of calls and refuses the rest; the calls it refuses to a process without
CAP_SYS_ADMIN and friends are the kernel's administration surface: mounting, namespaces (the `unshare` / `setns`
calls and clone's CLONE_NEW* flags), modules, kexec, reboot, swap, clocks, accounting, the kernel keyring, BPF,
perf events, handles that open files by inode (open_by_handle_at: the "shocker" escape), userfaultfd and io_uring.
Here the same calls are refused (EPERM; clone3 ENOSYS, so libc falls back to clone, whose flags can be inspected),
everything else is allowed: what a training needs (threads, CUDA's ioctls, NCCL's sockets, ptrace for debuggers on
its own processes) keeps working. Calls of another ABI than the worker's (32-bit int 0x80, x32) kill the process
(libseccomp's bad-architecture action), so they cannot go round the list.
"""

from __future__ import annotations

import errno
import os

REFUSED = (
    # file systems and namespaces
    "mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns", "fsopen", "fsconfig", "fsmount",
    "fspick", "move_mount", "open_tree", "mount_setattr",
    # the kernel itself
    "init_module", "finit_module", "delete_module", "create_module", "query_module", "get_kernel_syms",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd",
    "lookup_dcookie", "nfsservctl", "_sysctl", "sysfs", "ustat", "uselib", "vhangup",
    # clocks, I/O ports, keys, BPF, perf, handles, userfaultfd, io_uring
    "settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm", "add_key", "request_key",
    "keyctl", "bpf", "perf_event_open", "name_to_handle_at", "open_by_handle_at", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)
# clone(2) flags that make a namespace (sched.h): refused like unshare.
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
                         0x00000080)  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME


def _filter():
    import pyseccomp as seccomp  # lazy: pyseccomp is optional: available() reports it missing

    flt = seccomp.SyscallFilter(defaction=seccomp.ALLOW)  # bad architecture: killed (libseccomp's default)
    for name in REFUSED:
        try:
            flt.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (ValueError, RuntimeError, OSError):
            pass  # not a call of this architecture
    for flag in CLONE_NAMESPACE_FLAGS:
        flt.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return flt


def write_filter(path: str) -> str:
    """Compile the filter to BPF in `path` (0600, the worker's): bubblewrap reads it from a descriptor."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        _filter().export_bpf(f)
    return path


def available() -> str | None:
    """None when the filter can be built here, else why not (one line)."""
    try:
        _filter()
    except (ImportError, OSError, RuntimeError) as err:
        return f"libseccomp is not usable ({err}); install pyseccomp and Debian's libseccomp2"
    return None
