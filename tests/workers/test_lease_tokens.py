"""Lease tokens: unique in a process, and a forked child never repeats its parent's."""

from __future__ import annotations

import os

from toolq.workers.runtime import lease_token


def test_tokens_of_a_process_are_all_different() -> None:
    tokens = {lease_token() for _ in range(10_000)}
    assert len(tokens) == 10_000


def test_a_forked_child_makes_tokens_its_parent_never_will() -> None:
    """Prefork children are forked from one parent: with the parent's prefix and count,
    two children would hand the same token to two executions."""
    lease_token()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.write(write, "\n".join(lease_token() for _ in range(100)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split("\n"))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent = {lease_token() for _ in range(100)}
    assert len(child) == 100
    assert not child & parent
    assert {t[:24] for t in child}.isdisjoint({t[:24] for t in parent})
