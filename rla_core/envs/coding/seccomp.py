"""The seccomp filter of the program sandbox: a classic-BPF program (x86-64) that bwrap loads with
`--seccomp FD` just before it runs the sandbox's runner.

A stdin/stdout program needs none of the calls refused here; they either widen the kernel's attack
surface (bpf, io_uring, keyrings, perf, userfaultfd, new mount API, modules) or let one process reach
into another or out of its namespaces (ptrace, process_vm_*, pidfd_getfd, setns, unshare, clone with a
namespace flag). SysV IPC objects outlive the processes that made them, so they are refused too: nothing
may carry state or memory from one test to the next. Refused calls fail with EPERM; clone3 fails with
ENOSYS, which makes glibc fall back to clone, whose flags (unlike clone3's) the filter can read. Any
other architecture or ABI (i386, x32) kills the process."""
from __future__ import annotations

import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_NAMESPACE_FLAGS = 0x7E020080  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME

# x86-64 numbers (asm/unistd_64.h)
SYSCALL_CLONE, SYSCALL_CLONE3 = 56, 435
REFUSED = {
    "shmget": 29, "semget": 64, "msgget": 68, "ptrace": 101, "syslog": 103, "uselib": 134,
    "personality": 135, "vhangup": 153, "pivot_root": 155, "_sysctl": 156, "adjtimex": 159,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212,
    "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
    "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "process_madvise": 440,
    "mount_setattr": 442,
}

# classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h)
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
EPERM, ENOSYS = 1, 38
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low 32 bits (little-endian)


def seccomp_filter() -> bytes | None:
    """The compiled filter (struct sock_filter[] as bytes), or None off x86-64, where it is not built."""
    if platform.machine() != "x86_64":
        return None
    # (label, opcode, k, jump-if-true label, jump-if-false label); None: the next instruction. BPF jumps
    # only forward, so every target comes after its jumps.
    program: list[tuple[str | None, int, int, str | None, str | None]] = [
        (None, LD_W_ABS, OFFSET_ARCH, None, None),
        (None, JEQ_K, AUDIT_ARCH_X86_64, None, "kill"),
        (None, LD_W_ABS, OFFSET_NR, None, None),
        (None, JGE_K, X32_SYSCALL_BIT, "kill", None),
        (None, JEQ_K, SYSCALL_CLONE, "clone", None),
        (None, JEQ_K, SYSCALL_CLONE3, "enosys", None),
        *[(None, JEQ_K, number, "eperm", None) for number in sorted(REFUSED.values())],
        ("allow", RET_K, RET_ALLOW, None, None),
        ("clone", LD_W_ABS, OFFSET_ARG0, None, None),
        (None, JSET_K, CLONE_NAMESPACE_FLAGS, "eperm", None),
        (None, RET_K, RET_ALLOW, None, None),
        ("eperm", RET_K, RET_ERRNO | EPERM, None, None),
        ("enosys", RET_K, RET_ERRNO | ENOSYS, None, None),
        ("kill", RET_K, RET_KILL_PROCESS, None, None),
    ]
    where = {label: index for index, (label, *_rest) in enumerate(program) if label}

    def jump(index: int, label: str | None) -> int:
        return 0 if label is None else where[label] - index - 1  # 0 <= offset <= 255, else struct.error

    return b"".join(struct.pack("<HBBI", code, jump(i, true), jump(i, false), k)
                    for i, (_label, code, k, true, false) in enumerate(program))
