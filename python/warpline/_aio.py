"""The asyncio end of the bridge: the engine's runtime resolves an asyncio
future through ``loop.call_soon_threadsafe(resolve, future, ok, value)``,
so the future is only ever touched on its loop's thread."""

from __future__ import annotations

import asyncio
from typing import Any

from ._errors import RunError


def resolve(future: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    """Sets ``future``'s result (``ok``) or a :class:`RunError` with the
    message ``value``, unless it was cancelled meanwhile."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(RunError(str(value)))
