"""Kombu's ``cached_property``: a cached value is read without taking the property's lock."""

from __future__ import annotations

import threading
from typing import Any

from kombu.utils.objects import cached_property

from toolq.broker import patch_kombu


class Counted:
    """One kombu ``cached_property`` with a setter and a deleter, its computations counted."""

    def __init__(self) -> None:
        self.computed = 0
        self.deleted: list[Any] = []

    @cached_property
    def value(self) -> str:
        self.computed += 1
        return f"v{self.computed}"

    @value.setter
    def value(self, new: str) -> str:
        return new.upper()

    @value.deleter
    def value(self, old: str) -> None:
        self.deleted.append(old)


def read_while_locked(thing: Counted) -> tuple[bool, list[str]]:
    """Read ``thing.value`` in a thread while another thread holds the property's lock."""
    lock = Counted.__dict__["value"].lock
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.append(thing.value))
    reader.start()
    reader.join(2)
    finished = not reader.is_alive()
    release.set()
    holder.join(10)
    reader.join(10)
    return finished, seen


def test_a_cached_value_is_read_while_another_thread_holds_the_lock() -> None:
    patch_kombu()
    thing = Counted()
    assert thing.value == "v1"
    finished, seen = read_while_locked(thing)
    assert finished, "the read of a cached value waited for the property's lock"
    assert seen == ["v1"]
    assert thing.computed == 1


def test_computing_setting_and_deleting_still_go_through_kombu() -> None:
    patch_kombu()
    thing = Counted()
    assert Counted.value is Counted.__dict__["value"]  # read on the class: the descriptor
    assert (thing.value, thing.value, thing.computed) == ("v1", "v1", 1)
    thing.value = "set"
    assert thing.value == "SET"  # the setter's value
    del thing.value
    assert thing.deleted == ["SET"]
    assert (thing.value, thing.computed) == ("v2", 2)  # computed again, once
    assert thing.value == "v2"
    # Not yet computed: the first read waits for the lock (one thread computes).
    fresh = Counted()
    finished, seen = read_while_locked(fresh)
    assert not finished and seen == ["v1"]
    assert fresh.value == "v1" and fresh.computed == 1
