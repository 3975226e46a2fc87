"""The seccomp program itself, for both architectures, run on a small classic-BPF interpreter;
its syscall numbers against the kernel headers of this machine."""

from __future__ import annotations

import errno
import platform
import re
import struct
from pathlib import Path

import pytest

from toolq import CallStatus, ToolRegistry
from toolq.builtins import shell
from toolq.builtins.seccomp import (
    AF_INET,
    AF_INET6,
    AF_NETLINK,
    AF_UNIX,
    ARCHITECTURES,
    DENIED,
    X32_SYSCALL_BIT,
    program,
)
from toolq.errors import ConfigurationError

ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM, ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
AUDIT_ARCH_I386 = 0x40000003
EVERYDAY = {
    "x86_64": {"read": 0, "write": 1, "openat": 257, "execve": 59, "wait4": 61},
    "aarch64": {"read": 63, "write": 64, "openat": 56, "execve": 221, "wait4": 260},
}


def decide(code: bytes, arch: int, nr: int, *args: int) -> int:
    """What the kernel would do: run the program over one ``struct seccomp_data``."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    insns = [struct.unpack_from("=HBBI", code, i) for i in range(0, len(code), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        pc += 1
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif op == 0x54:  # and #k
            acc &= k
        elif op == 0x06:  # ret #k
            return k
        elif op in (0x15, 0x35, 0x45):  # jeq, jge, jset
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")


@pytest.mark.parametrize("machine", list(ARCHITECTURES))
def test_each_architecture_gets_its_own_refusals(machine: str) -> None:
    arch = ARCHITECTURES[machine]
    code, nr, own = program(machine), arch.numbers, arch.audit_arch
    for name in (*DENIED, *arch.denied_here):
        assert decide(code, own, nr[name]) == EPERM, name
    assert decide(code, own, nr["clone3"]) == ENOSYS
    assert decide(code, own, nr["clone"], 0x11) == ALLOW  # fork
    assert decide(code, own, nr["clone"], 0x10000011) == EPERM  # CLONE_NEWUSER
    assert decide(code, own, nr["clone"], 0x40000000 | 0x11) == EPERM  # CLONE_NEWNET
    assert decide(code, own, nr["socket"], AF_UNIX, 1) == EPERM
    assert decide(code, own, nr["socket"], (1 << 32) | AF_UNIX, 1) == EPERM  # the int is 1
    for family in (AF_INET, AF_INET6, AF_NETLINK):
        assert decide(code, own, nr["socket"], family, 1) == ALLOW
    assert decide(code, own, nr["socket"], 40, 1) == EPERM  # AF_VSOCK: to the VM's host
    assert decide(code, own, nr["socketpair"], AF_UNIX, 1 | 0x80000) == ALLOW  # CLOEXEC
    assert decide(code, own, nr["socketpair"], AF_UNIX, 5) == ALLOW  # seqpacket
    assert decide(code, own, nr["socketpair"], AF_UNIX, 2) == EPERM  # datagram: sendto
    assert decide(code, own, nr["socketpair"], AF_INET, 1) == EPERM
    for name, number in EVERYDAY[machine].items():
        assert decide(code, own, number) == ALLOW, name
    # Another ABI's numbers mean other syscalls: the process is killed.
    others = [a.audit_arch for m, a in ARCHITECTURES.items() if m != machine]
    for foreign in (AUDIT_ARCH_I386, *others):
        assert decide(code, foreign, 0) == KILL
    if arch.x32:
        assert decide(code, own, X32_SYSCALL_BIT | 39) == KILL


def test_other_machines_are_refused(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="knows x86_64 and aarch64, not 'riscv64'"):
        program("riscv64")
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    registry = ToolRegistry()
    registry.include(shell(root=workspace, isolation="none"))
    with pytest.raises(ConfigurationError, match="not 'riscv64'"):
        registry.require("run_shell").check_runtime()  # the worker refuses to start
    marker = workspace / "ran"
    result = registry.invoke("run_shell", {"argv": ["touch", str(marker)]})
    assert result.status is CallStatus.FAILED and result.error_type == "configuration_error"
    assert not marker.exists()


HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),  # aarch64 uses the generic table
}


@pytest.mark.parametrize("machine", list(ARCHITECTURES))
def test_numbers_match_the_kernel_headers(machine: str) -> None:
    header = HEADERS[machine]
    if not header.exists():
        pytest.skip(f"no {header} here")
    defined = {
        name: int(number)
        for name, number in re.findall(r"#define __NR_(\w+)\s+(\d+)", header.read_text())
    }
    numbers = ARCHITECTURES[machine].numbers
    known = {name: nr for name, nr in numbers.items() if name in defined}
    assert known == {name: defined[name] for name in known}
    assert len(known) == len(numbers), set(numbers) - set(known)
