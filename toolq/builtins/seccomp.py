"""The sandbox's seccomp filter: a classic-BPF program built here, installed by the supervisor.

What it refuses (``EPERM`` unless said otherwise), for the command and everything it starts:

* **Unix sockets.** ``socket()`` only for ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK``;
  ``socketpair()`` only for ``AF_UNIX`` streams and seqpackets, which connect nothing but the
  pair (a datagram pair could ``sendto`` any datagram socket by path). A filter cannot read
  the path a ``connect`` names, and no mount layout can hide every socket of the host (one
  may live in any directory the command must see), so no socket the command could connect
  to a path or an abstract name is ever made.
* **Other processes.** ``ptrace``, ``process_vm_readv``/``writev``, ``process_madvise``,
  ``pidfd_getfd``.
* **Namespaces, mounts and the kernel.** ``unshare``, ``setns``, ``clone`` with a
  ``CLONE_NEW*`` flag (``clone3``, whose flags a filter cannot see, answers ``ENOSYS``, so
  libc falls back to ``clone``), the mount calls, ``chroot``, ``pivot_root``, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, the keyrings (``keyctl``, ``add_key``,
  ``request_key``), module and ``kexec`` loading, ``io_uring`` (its requests would bypass
  this filter), ``open_by_handle_at``, ``reboot``, ``swapon``/``off``, ``acct``,
  ``quotactl``, ``syslog``, ``vhangup``, ``iopl``/``ioperm``.
* **Other ABIs.** A syscall made with another architecture's convention (``int 0x80`` on
  x86_64, or the x32 numbers) kills the process.

The numbers are those of x86_64 and aarch64; on any other machine no program is built and
the sandbox refuses to run (``ConfigurationError``). The program is plain bytes
(``struct sock_filter`` records), passed to the supervisor, which runs with the standard
library only and installs it with ``prctl(PR_SET_SECCOMP)`` after ``PR_SET_NO_NEW_PRIVS``.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

from toolq.errors import ConfigurationError

AF_UNIX, AF_INET, AF_NETLINK, AF_INET6 = 1, 2, 16, 10
SOCK_STREAM, SOCK_SEQPACKET, SOCK_TYPE_MASK = 1, 5, 0xF
CLONE_NEW_FLAGS = 0x7E020000
"""``CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET``."""
X32_SYSCALL_BIT = 0x40000000

DENIED = (
    # other processes
    *("ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd"),
    # namespaces and mounts
    *("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree"),
    *("move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
    # the kernel's larger surfaces
    *("bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key"),
    *("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"),
    *("io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at"),
    *("reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup"),
)
"""Syscalls refused on every architecture."""


@dataclass(frozen=True)
class Architecture:
    """One machine's ``AUDIT_ARCH_*`` value and the syscall numbers the filter names."""

    audit_arch: int
    numbers: dict[str, int]
    denied_here: tuple[str, ...] = ()
    """Syscalls refused on this architecture only."""
    x32: bool = False
    """Whether x32 numbers (``X32_SYSCALL_BIT``) can reach this ABI's entry point."""


_COMMON = {  # numbered alike on both (the unified table from 403 on)
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "clone3": 435,
    "pidfd_getfd": 438,
    "process_madvise": 440,
}

ARCHITECTURES = {
    "x86_64": Architecture(
        audit_arch=0xC000003E,
        numbers={
            **_COMMON,
            "socket": 41,
            "socketpair": 53,
            "clone": 56,
            "ptrace": 101,
            "syslog": 103,
            "vhangup": 153,
            "pivot_root": 155,
            "chroot": 161,
            "acct": 163,
            "mount": 165,
            "umount2": 166,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "iopl": 172,
            "ioperm": 173,
            "init_module": 175,
            "delete_module": 176,
            "quotactl": 179,
            "kexec_load": 246,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "perf_event_open": 298,
            "open_by_handle_at": 304,
            "setns": 308,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "finit_module": 313,
            "kexec_file_load": 320,
            "bpf": 321,
            "userfaultfd": 323,
        },
        denied_here=("iopl", "ioperm"),
        x32=True,
    ),
    "aarch64": Architecture(
        audit_arch=0xC00000B7,
        numbers={
            **_COMMON,
            "vhangup": 58,
            "umount2": 39,
            "mount": 40,
            "pivot_root": 41,
            "chroot": 51,
            "quotactl": 60,
            "acct": 89,
            "unshare": 97,
            "kexec_load": 104,
            "init_module": 105,
            "delete_module": 106,
            "syslog": 116,
            "ptrace": 117,
            "reboot": 142,
            "socket": 198,
            "socketpair": 199,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "clone": 220,
            "swapon": 224,
            "swapoff": 225,
            "perf_event_open": 241,
            "open_by_handle_at": 265,
            "setns": 268,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "finit_module": 273,
            "bpf": 280,
            "userfaultfd": 282,
            "kexec_file_load": 294,
        },
    ),
}

_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_J* | BPF_K
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    """Offset of the low 32 bits of syscall argument ``index`` (little-endian machines).

    The kernel reads these arguments (a family, a type, clone flags) as 32-bit values, so the
    low word is exactly what it acts on.
    """
    return 16 + 8 * index


class _Program:
    """A tiny assembler: instructions with jumps to named labels, resolved on ``bytes()``."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((_LD_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: int | str = 0, false: int | str = 0) -> None:
        self.code.append((op, true, false, k))

    def mask(self, k: int) -> None:
        self.code.append((_AND, 0, 0, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def __bytes__(self) -> bytes:
        out = bytearray()
        for at, (op, true, false, k) in enumerate(self.code):
            jt, jf = (self._offset(at, t) for t in (true, false))
            out += struct.pack("=HBBI", op, jt, jf, k)
        return bytes(out)

    def _offset(self, at: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - at - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"jump to {target} out of range ({offset})")  # a bug here
        return offset


def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one); ConfigurationError for another."""
    name = machine or platform.machine()
    arch = ARCHITECTURES.get(name)
    if arch is None:
        raise ConfigurationError(
            f"the sandbox's seccomp filter knows {' and '.join(ARCHITECTURES)}, not {name!r}:"
            " sandboxed commands cannot run on this machine"
        )
    nr = arch.numbers
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ, arch.audit_arch, false="kill")
    p.load(_NR)
    if arch.x32:
        p.jump(_JGE, X32_SYSCALL_BIT, true="kill")
    for name in (*DENIED, *arch.denied_here):
        p.jump(_JEQ, nr[name], true="deny")
    p.jump(_JEQ, nr["clone3"], true="nosys")
    p.jump(_JEQ, nr["socket"], true="socket")
    p.jump(_JEQ, nr["socketpair"], true="socketpair")
    p.jump(_JEQ, nr["clone"], true="clone")
    p.ret(_ALLOW)

    p.label("socket")
    p.load(_arg(0))
    for family in (AF_INET, AF_INET6, AF_NETLINK):
        p.jump(_JEQ, family, true="allow")
    p.ret(_ERRNO | errno.EPERM)

    p.label("socketpair")
    p.load(_arg(0))
    p.jump(_JEQ, AF_UNIX, false="deny")
    p.load(_arg(1))
    p.mask(SOCK_TYPE_MASK)  # without SOCK_CLOEXEC and SOCK_NONBLOCK
    for kind in (SOCK_STREAM, SOCK_SEQPACKET):
        p.jump(_JEQ, kind, true="allow")
    p.ret(_ERRNO | errno.EPERM)

    p.label("clone")
    p.load(_arg(0))
    p.jump(_JSET, CLONE_NEW_FLAGS, true="deny")

    p.label("allow")
    p.ret(_ALLOW)
    p.label("deny")
    p.ret(_ERRNO | errno.EPERM)
    p.label("nosys")
    p.ret(_ERRNO | errno.ENOSYS)
    p.label("kill")
    p.ret(_KILL_PROCESS)
    return bytes(p)
