"""``AsyncClient``, ``AsyncBatch``, ``AsyncApprovals``: the clients for asyncio code.

Each method is its blocking twin's, run in a worker thread so the event loop never blocks on
Redis: made from it (``_in_thread``), with the same name, parameters and docstring; so is the
constructor (``_taking``). Event streams are ``async for`` iterators fed by a thread
(``_streamed``); ``dispatch_stream`` is the other way round: the blocking one, in a thread,
reads an async stream through the event loop (``_blocking``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from toolq.approvals.store import ApprovalStore
from toolq.dispatch.client import Batch, Client
from toolq.dispatch.dispatcher import CallRef

T = TypeVar("T")
P = ParamSpec("P")


def _in_thread(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The twin's ``method`` (on ``self.sync``), awaited: run in a worker thread."""
    name = method.__name__

    async def threaded(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        blocking: Callable[P, T] = getattr(self.sync, name)
        return await asyncio.to_thread(blocking, *args, **kwargs)

    functools.update_wrapper(threaded, method)
    return threaded


def _streamed(
    method: Callable[Concatenate[Any, P], Iterator[T]],
) -> Callable[Concatenate[Any, P], AsyncIterator[T]]:
    """The twin's iterator ``method`` (on ``self.sync``) as an ``async for`` iterator."""
    name = method.__name__

    def streamed(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        return _aiter(lambda: getattr(self.sync, name)(*args, **kwargs))

    functools.update_wrapper(streamed, method)
    signature = inspect.signature(method)
    streamed.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=f"Async{signature.return_annotation}"
    )
    return streamed


def _dispatching(
    method: Callable[Concatenate[Client, P], Batch],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, AsyncBatch]]:
    """``Client.dispatch`` (or ``submit``) awaited, its ``Batch`` as an ``AsyncBatch``."""
    name = method.__name__

    async def dispatch(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncBatch:
        blocking = cast(Callable[P, Batch], getattr(self.sync, name))
        return AsyncBatch(await asyncio.to_thread(blocking, *args, **kwargs))

    functools.update_wrapper(dispatch, method)
    return dispatch


def _taking(
    init: Callable[Concatenate[Client, P], None],
) -> Callable[[Callable[[AsyncClient, Client], None]], Callable[Concatenate[AsyncClient, P], None]]:
    """``AsyncClient.__init__`` with ``Client.__init__``'s parameters, over the ``Client`` built."""
    make = cast(Callable[P, Client], Client)

    def constructor(
        build: Callable[[AsyncClient, Client], None],
    ) -> Callable[Concatenate[AsyncClient, P], None]:
        def __init__(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> None:
            build(self, make(*args, **kwargs))

        functools.update_wrapper(__init__, init)
        return __init__

    return constructor


def _dispatching_stream(
    method: Callable[Concatenate[Client, Any, P], list[Batch]],
) -> Callable[Concatenate[AsyncClient, Any, P], Coroutine[Any, Any, list[AsyncBatch]]]:
    """``Client.dispatch_stream`` awaited, over a plain or an async iterable of events."""
    name = method.__name__

    async def dispatch_stream(
        self: AsyncClient, stream: Any, /, *args: P.args, **kwargs: P.kwargs
    ) -> list[AsyncBatch]:
        blocking = cast(Callable[..., list[Batch]], getattr(self.sync, name))
        stop = threading.Event()
        events = _blocking(stream, asyncio.get_running_loop(), stop)
        try:
            batches = await asyncio.to_thread(blocking, events, *args, **kwargs)
        finally:
            stop.set()  # cancelled: no further call is dispatched
        return [AsyncBatch(batch) for batch in batches]

    functools.update_wrapper(dispatch_stream, method)
    dispatch_stream.__doc__ = (
        f"{inspect.getdoc(method)}\n\n``stream`` may also be an async iterable (an SDK's "
        "``AsyncStream``): the blocking method reads it in its thread, each event awaited on "
        "the caller's event loop."
    )
    return dispatch_stream


class AsyncClient:
    """Dispatches tool calls to workers and collects their results and events, awaited.

    ``AsyncClient(registry, settings=None, *, redis_client=None, backend=None)`` takes the
    arguments of ``Client`` and builds the ``Client`` (with ``TOOLQ_SHARDS``, the
    ``CellRouter``) its methods run on: each is the ``Client`` method of the same name and
    parameters, awaited; ``dispatch_stream`` also reads an async stream (an SDK's
    ``AsyncStream``), and ``events`` is an ``async for`` iterator.
    """

    @_taking(Client.__init__)
    def __init__(self, sync: Client) -> None:
        self.sync = sync
        """The blocking ``Client`` every method runs in a thread."""
        self.approvals = AsyncApprovals(sync.approvals)

    dispatch = _dispatching(Client.dispatch)

    submit = _dispatching(Client.submit)

    dispatch_stream = _dispatching_stream(Client.dispatch_stream)

    call = _in_thread(Client.call)
    wait = _in_thread(Client.wait)
    cell_for_run = _in_thread(Client.cell_for_run)
    cell_for_call = _in_thread(Client.cell_for_call)
    reachable = _in_thread(Client.reachable)
    cell_states = _in_thread(Client.cell_states)
    each_cell = _in_thread(Client.each_cell)
    result = _in_thread(Client.result)
    results = _in_thread(Client.results)
    events = _streamed(Client.events)
    to_messages = _in_thread(Client.to_messages)
    calls_page = _in_thread(Client.calls_page)
    runs = _in_thread(Client.runs)
    run = _in_thread(Client.run)
    retry = _in_thread(Client.retry)
    cancel = _in_thread(Client.cancel)
    resolve_unknown = _in_thread(Client.resolve_unknown)
    undo = _in_thread(Client.undo)
    undo_gate = _in_thread(Client.undo_gate)
    undo_data = _in_thread(Client.undo_data)
    close = _in_thread(Client.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncBatch:
    """The calls of one ``AsyncClient.dispatch``, in call order."""

    def __init__(self, batch: Batch) -> None:
        self.sync = batch
        """The blocking ``Batch`` every method runs in a thread."""
        self.run_id = batch.run_id
        self.calls: list[CallRef] = batch.calls
        self.format = batch.format

    @property
    def call_ids(self) -> list[str]:
        """Call ids in call order."""
        return self.sync.call_ids

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self) -> Iterator[CallRef]:
        return iter(self.calls)

    wait = _in_thread(Batch.wait)
    results = _in_thread(Batch.results)
    events = _streamed(Batch.events)
    to_messages = _in_thread(Batch.to_messages)


class AsyncApprovals:
    """``AsyncClient.approvals``: list, decide and set rules for parked calls, awaited."""

    def __init__(self, approvals: ApprovalStore) -> None:
        self.sync = approvals
        """The blocking ``ApprovalStore`` every method runs in a thread."""

    pending = _in_thread(ApprovalStore.pending)
    page = _in_thread(ApprovalStore.page)
    get = _in_thread(ApprovalStore.get)
    audit = _in_thread(ApprovalStore.audit)
    approve = _in_thread(ApprovalStore.approve)
    deny = _in_thread(ApprovalStore.deny)
    refused = _in_thread(ApprovalStore.refused)
    unknown = _in_thread(ApprovalStore.unknown)
    decide_run = _in_thread(ApprovalStore.decide_run)
    approve_run = _in_thread(ApprovalStore.approve_run)
    rules = _in_thread(ApprovalStore.rules)
    set_rules = _in_thread(ApprovalStore.set_rules)
    export_state = _in_thread(ApprovalStore.export_state)
    restore_state = _in_thread(ApprovalStore.restore_state)


def _blocking(stream: Any, loop: asyncio.AbstractEventLoop, stop: threading.Event) -> Iterator[Any]:
    """``stream``'s items for a worker thread until ``stop``; an async one's awaited on ``loop``."""
    if not hasattr(stream, "__aiter__"):
        for item in stream:
            if stop.is_set():
                return
            yield item
        return
    items: AsyncIterator[Any] = aiter(stream)

    async def following() -> Any:
        return await anext(items)

    while True:
        try:
            item = asyncio.run_coroutine_threadsafe(following(), loop).result()
        except StopAsyncIteration:
            return
        if stop.is_set():
            return
        yield item


async def _aiter(make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """Drive a blocking iterator in a thread and hand its items to the event loop."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    stop = threading.Event()

    def pump() -> None:
        try:
            for item in make():
                if stop.is_set():
                    return
                loop.call_soon_threadsafe(queue.put_nowait, ("item", item))
            loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
        except BaseException as exc:
            loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

    thread = threading.Thread(target=pump, daemon=True, name="toolq-events")
    thread.start()
    try:
        while True:
            kind, value = await queue.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
