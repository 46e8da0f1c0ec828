"""Stages written in Python: the :func:`stage` decorator, and the check of a
pipeline's settings against the function's signature (made when the
pipeline compiles, so a misspelt setting is a problem with its key path,
not a failure of every item)."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

from . import _warpline

F = TypeVar("F", bound=Callable[..., Any])

Memory = Union[int, Callable[[int, int, int], int], None]


def stage(
    kind: str,
    *,
    takes: str = "raster",
    hands_on: str = "raster",
    memory: Memory = None,
) -> Callable[[F], F]:
    """Registers the decorated function as the stage kind ``kind``: any
    pipeline loaded afterwards may say ``kind = "..."``, and its other
    settings are passed to the function as keyword arguments.

    The function runs on the engine's blocking workers, under the limits
    the pipeline gives the stage, holding the GIL only while it runs. With
    ``takes="raster"`` it is called with a :class:`Raster` (bands as numpy
    arrays, CRS, geotransform, nodata) and returns ``None`` (hand the
    raster on as it is), ``raster.with_bands(arrays, nodata=...)``, or the
    arrays themselves. With ``takes="written"`` (after ``write``) or
    ``"any"`` it is called with an :class:`Item` and its return value is
    ignored. An exception fails that item with the exception's text; the
    others go on.

    ``memory`` is what one call holds, charged to the byte limiters the
    stage lists before it runs: bytes, or a function of (width, height,
    bands) giving bytes; by default the input's files plus every band
    twice over as float64 (the arrays read and those handed back).

    ::

        @warpline.stage("ndvi")
        def ndvi(raster, *, nir=4, red=3):
            a = raster.read(nir, dtype="float32")
            b = raster.read(red, dtype="float32")
            return raster.with_bands([(a - b) / (a + b)], nodata=float("nan"))
    """

    def register(func: F) -> F:
        _warpline.register_stage(kind, func, takes=takes, hands_on=hands_on, memory=memory)
        return func

    return register


def unregister(kind: str) -> bool:
    """Forgets the stage kind ``kind`` registered in Python; whether it was."""
    return _warpline.unregister_stage(kind)


def stage_kinds() -> List[str]:
    """The stage kinds registered in Python, sorted."""
    return _warpline.stage_kinds()


def check_settings(func: Callable[..., Any], settings: Dict[str, Any]) -> List[Tuple[str, str]]:
    """(key, message) for each setting ``func`` cannot take as a keyword
    argument, for each keyword-only argument without a default that the
    settings lack, and ("", message) when it takes no first argument."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    params = list(sig.parameters.values())
    name = getattr(func, "__name__", "the stage's function")
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if not positional:
        return [("", f"{name}() must take the raster or item as its first argument")]
    first: Optional[inspect.Parameter] = (
        positional[0] if positional[0].kind != positional[0].VAR_POSITIONAL else None
    )
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params)
    named = {
        p.name: p
        for p in params
        if p is not first and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    problems: List[Tuple[str, str]] = []
    if not takes_any:
        for key in settings:
            if key not in named:
                known = ", ".join(f"`{k}`" for k in named) or "none"
                problems.append((key, f"{name}() takes no argument `{key}` (it takes: {known})"))
    for p in named.values():
        if p.default is p.empty and p.name not in settings:
            problems.append((p.name, f"{name}() needs this setting"))
    return problems
