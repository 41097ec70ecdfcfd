"""One large object decoded on several cores: its bytes are decompressed and cut into blocks in a thread of their
own while the blocks decode in a pool, their results taken in input order, so that the rows, their order and the
bad records' line numbers are what the serial decoder gives (docs/design.md, "One large object on every core").

zlib, pyarrow's JSON reader and its compute kernels release the GIL, so these threads do run side by side.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

_END = object()
_POLL_SECONDS = 0.1  # how soon a producer notices that its consumer stopped


def prefetched(items: Iterator[Item], depth: int) -> Generator[Item, None, None]:
    """The items, produced by a thread of their own at most `depth` ahead of the consumer.

    An exception raised producing them is raised here, in order; closing this generator stops the thread
    before it returns, so the caller may close what the items are read from."""
    ready: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def offer(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                ready.put(entry, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((True, item)):
                    return
            offer((True, _END))
        except BaseException as exc:  # handed to the consumer, which raises it
            offer((False, exc))

    producer = threading.Thread(target=produce, daemon=True, name="siltlake-read-ahead")
    producer.start()
    try:
        while True:
            ok, item = ready.get()
            if not ok:
                raise item
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        producer.join()


def ordered_map(function: Callable[[Item], Result], items: Iterable[Item], workers: int) -> Iterator[Result]:
    """function over the items on `workers` threads, results in input order; at most workers + 1 items are in
    flight, so memory stays that of a few items whatever their number."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="siltlake-decode") as pool:
        pending: deque[Future] = deque()
        try:
            for item in items:
                pending.append(pool.submit(function, item))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
