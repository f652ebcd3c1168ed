"""How ``map`` / ``filter`` call a function: ``async def`` functions on an event loop the iteration
owns (:class:`AsyncRunner`), and several calls made at once (:class:`CallsAhead`): coroutines
gathered on that loop, or calls of a plain function on a pool of threads (``decode(num_threads=)``),
started together and waited for together. What a node keeps in its state about the calls in
flight is the node's business (``map.py``: their inputs).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable


def is_async_function(function: Any) -> bool:
    """``async def`` function (or a callable object whose ``__call__`` is one), as HF detects them."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(getattr(function, "__call__", None))


class AsyncRunner:
    """Runs coroutines to completion on an event loop of its own.

    When the calling thread already runs an event loop (a notebook, an async training loop), a
    second loop cannot run there, so the loop runs on a helper thread and the caller waits."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                self._thread = threading.Thread(target=loop.run_forever, name="resumable_iterable-async",
                                                daemon=True)
                self._thread.start()
        return loop

    def run(self, coro: Any) -> Any:
        loop = self._get_loop()
        if self._thread is None:
            return loop.run_until_complete(coro)
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join()
            self._thread = None
        else:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:  # calls started ahead and never waited for (the iteration stopped)
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


class CallsAhead:
    """Calls of ``call(*args)`` made together: :meth:`run` starts them all at once and waits for
    them all; it returns ``(result, None)`` or ``(None, exception)`` for each, in order.

    ``call`` returns a coroutine (an ``async def`` function: run on ``runner``'s loop, all in one
    ``gather``) or a value (run on a pool of ``threads`` threads)."""

    def __init__(self, call: Callable[..., Any], threads: int, runner: AsyncRunner | None):
        self.call = call
        self.runner = runner
        self.pool = None if runner is not None else ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="resumable_iterable-map")

    def run(self, args: list[tuple]) -> list[tuple]:
        if self.pool is None:
            done = self.runner.run(_gather([self.call(*a) for a in args]))
            return [(None, r) if isinstance(r, BaseException) else (r, None) for r in done]
        futures = [self.pool.submit(self.call, *a) for a in args]
        out = []
        for f in futures:
            try:
                out.append((f.result(), None))
            except BaseException as e:  # noqa: BLE001 - handed back, raised by the caller in order
                out.append((None, e))
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


async def _gather(coros: list) -> list:
    # made inside the loop that runs it (a gather made outside would take another loop)
    return await asyncio.gather(*coros, return_exceptions=True)
