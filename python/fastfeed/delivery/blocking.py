"""`blocking`: the synchronous twin of a coroutine function, for callers without an event loop
(`push` of `push_async`), made once so that each twin keeps its coroutine's signature."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def blocking(coroutine: Callable[P, Coroutine[Any, Any, R]], doc: str) -> Callable[P, R]:
    """`coroutine` run to its end in an event loop of its own (`asyncio.run`), under the name
    of `coroutine` without `_async`, described by `doc`. It cannot be called from a running
    event loop: await the coroutine there."""

    @functools.wraps(coroutine)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return asyncio.run(coroutine(*args, **kwargs))

    name = coroutine.__name__.removesuffix("_async")
    run.__name__, run.__qualname__, run.__doc__ = name, name, doc
    return run
