"""Running pipelines: :func:`run` and :func:`run_async` (to the end, with a
progress callback), :func:`spawn` (in the background: a :class:`RunHandle`
with events, progress, stop, abort and the report), and the binary's demo.

The engine runs on its own runtime's threads; every wait here releases
the GIL. A first Ctrl-C (``KeyboardInterrupt``) while :func:`run` waits
stops the run as ``warpline run`` does (no new inputs; items in flight
finish, so every output on disk is whole), a second aborts it, and the
``KeyboardInterrupt`` is raised once the run has ended, with the report as
its ``report`` attribute."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Set, Union

from . import _warpline
from ._records import Event, Progress, Report

PathLike = Union[str, "os.PathLike[str]"]
PipelineLike = Union[str, "os.PathLike[str]", Mapping[str, Any]]
ProgressCallback = Callable[[Progress], Any]

_running: Set[_warpline.NativeRun] = set()
_running_lock = threading.Lock()


def _track(native: _warpline.NativeRun) -> None:
    with _running_lock:
        for done in [r for r in _running if r.is_finished()]:
            _running.discard(done)
        _running.add(native)


@atexit.register
def _abort_at_exit() -> None:
    """Runs still going when the interpreter exits are aborted, and waited
    for a little, so no stage calls into an interpreter that is gone."""
    with _running_lock:
        left = [r for r in _running if not r.is_finished()]
    for r in left:
        r.abort()
    for r in left:
        try:
            r.wait(10.0)
        except BaseException:
            pass


class Events:
    """A run's events, as an iterator (``for e in handle.events()``) or an
    async iterator (``async for e in handle.events()``); it ends with the
    run. A reader more than 4096 events behind misses the oldest, and is
    told so by a ``missed`` event (progress and the report stay exact)."""

    def __init__(self, stream: _warpline.EventStream) -> None:
        self._stream = stream

    def __iter__(self) -> "Events":
        return self

    def __next__(self) -> Event:
        raw = self._stream.next()
        if raw is None:
            raise StopIteration
        return Event(json.loads(raw))

    def __aiter__(self) -> "Events":
        return self

    async def __anext__(self) -> Event:
        raw = await self._stream.next_async(asyncio.get_running_loop())
        if raw is None:
            raise StopAsyncIteration
        return Event(json.loads(raw))


def _say(text: str) -> None:
    try:
        print(f"warpline: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class RunHandle:
    """A pipeline running in the background (:func:`spawn`). Dropping the
    handle does not stop the run; :meth:`abort` does, and so does leaving a
    ``with`` block early."""

    def __init__(self, native: _warpline.NativeRun) -> None:
        self._native = native
        self._events: Optional[_warpline.EventStream] = native.events()
        _track(native)

    def events(self) -> Events:
        """The run's events: from its start for the first call, from now on
        for later ones."""
        stream = self._events if self._events is not None else self._native.events()
        self._events = None
        return Events(stream)

    def progress(self) -> Progress:
        """Exact counts so far, the rate and an ETA."""
        return Progress(json.loads(self._native.progress()))

    def stop(self) -> None:
        """Stops admitting inputs; items in flight finish (until the
        pipeline's ``shutdown_deadline``)."""
        self._native.stop()

    def abort(self) -> None:
        """Aborts now: waits are cancelled, every permit is given back, and
        items in flight are counted failed as ``interrupted``."""
        self._native.abort()

    def is_finished(self) -> bool:
        """Whether the run has ended."""
        return self._native.is_finished()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the end, at most ``timeout`` seconds; whether it came."""
        return self._native.wait(timeout)

    def report(
        self,
        *,
        progress: Optional[ProgressCallback] = None,
        progress_interval: float = 0.5,
    ) -> Report:
        """Waits for the run to end and returns its report, calling
        ``progress`` every ``progress_interval`` seconds meanwhile (and once
        at the end). A first ``KeyboardInterrupt`` stops the run (it
        drains), a second aborts it; it is raised after the end, with the
        report as its ``report`` attribute. Raises :class:`RunError` when
        the run could not start or finish."""
        interrupted: Optional[BaseException] = None
        while True:
            try:
                if self._native.wait(progress_interval if progress else None):
                    break
                if progress is not None:
                    progress(self.progress())
            except KeyboardInterrupt as e:
                if interrupted is None:
                    interrupted = e
                    _say(
                        "stopping: no new inputs; items in flight finish "
                        "(interrupt again to abort now)"
                    )
                    self.stop()
                else:
                    _say("second interrupt: aborting now")
                    self.abort()
        report = self._finished_report()
        if progress is not None:
            progress(self.progress())
        if interrupted is not None:
            setattr(interrupted, "report", report)
            raise interrupted
        return report

    async def report_async(
        self,
        *,
        progress: Optional[ProgressCallback] = None,
        progress_interval: float = 0.5,
    ) -> Report:
        """As :meth:`report`, awaiting the end without blocking the event
        loop. Cancelling the awaiting task aborts the run."""
        done = self._native.wait_async(asyncio.get_running_loop())
        try:
            while True:
                timeout = progress_interval if progress is not None else None
                finished, _ = await asyncio.wait({done}, timeout=timeout)
                if finished:
                    break
                if progress is not None:
                    progress(self.progress())
        except asyncio.CancelledError:
            self.abort()
            raise
        report = self._finished_report()
        if progress is not None:
            progress(self.progress())
        return report

    def _finished_report(self) -> Report:
        texts = self._native.report()
        if texts is None:  # pragma: no cover - the run has ended
            raise RuntimeError("the run has not ended")
        return Report._from_native(texts)

    def report_json(self) -> Optional[str]:
        """The report as ``warpline run --report`` writes it, once the run
        has ended (``None`` before)."""
        texts = self._native.report()
        return None if texts is None else texts[0]

    def __enter__(self) -> "RunHandle":
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if not self.is_finished():
            self.abort()
            self._native.wait(None)


def _write_report(handle: RunHandle, path: Optional[PathLike]) -> None:
    if path is not None:
        text = handle.report_json()
        if text is not None:
            Path(os.fspath(path)).write_text(text + "\n")


def spawn(
    pipeline: PipelineLike,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[_warpline.Limits] = None,
    env: bool = False,
) -> RunHandle:
    """Compiles ``pipeline`` and starts it in the background.

    ``pipeline`` is a path (``str`` or ``pathlib.Path``), TOML text (a
    ``str`` with a newline) or a ``dict`` of the tables a file holds.
    ``set`` overrides keys as ``--set`` does (``{"stages.decode.workers":
    4}``); ``limits`` are limiters shared with other runs (the file says
    ``[limits.NAME] shared = true``); ``env=True`` applies ``WARPLINE__``
    variables as the binary does. Raises :class:`PipelineError` with every
    problem."""
    return RunHandle(_warpline.start(pipeline, set=_sets(set), limits=limits, env=env))


def _sets(sets: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    return None if sets is None else dict(sets)


def run(
    pipeline: PipelineLike,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[_warpline.Limits] = None,
    env: bool = False,
    report: Optional[PathLike] = None,
    progress: Optional[ProgressCallback] = None,
    progress_interval: float = 0.5,
) -> Report:
    """Runs ``pipeline`` to its end and returns its :class:`Report`.

    The arguments are :func:`spawn`'s; ``report`` is a path to write the
    JSON report to (as ``--report``), and ``progress`` is called with a
    :class:`Progress` every ``progress_interval`` seconds and at the end.
    Ctrl-C drains the run as ``warpline run`` does, then raises
    ``KeyboardInterrupt`` (with the report as ``.report``)."""
    handle = spawn(pipeline, set=set, limits=limits, env=env)
    try:
        return handle.report(progress=progress, progress_interval=progress_interval)
    finally:
        _write_report(handle, report)


async def run_async(
    pipeline: PipelineLike,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[_warpline.Limits] = None,
    env: bool = False,
    report: Optional[PathLike] = None,
    progress: Optional[ProgressCallback] = None,
    progress_interval: float = 0.5,
) -> Report:
    """:func:`run` for asyncio: the engine runs on its own threads and the
    event loop is never blocked. Cancelling the task aborts the run."""
    handle = spawn(pipeline, set=set, limits=limits, env=env)
    try:
        return await handle.report_async(progress=progress, progress_interval=progress_interval)
    finally:
        _write_report(handle, report)


def spawn_demo(dir: PathLike, *, set: Optional[Mapping[str, Any]] = None) -> RunHandle:
    """Starts ``warpline demo``: sample tiles in four CRSs served on a
    loopback HTTP server (for as long as the run lasts), listed in
    ``dir/tiles.txt``, fetched, decoded, reprojected to EPSG:3857 and
    written as COGs to ``dir/output`` by the demo pipeline the binary
    ships."""
    return RunHandle(_warpline.start_demo(Path(os.fspath(dir)), set=_sets(set)))


def demo(
    dir: PathLike,
    *,
    set: Optional[Mapping[str, Any]] = None,
    report: Optional[PathLike] = None,
    progress: Optional[ProgressCallback] = None,
) -> Report:
    """Runs ``warpline demo`` in ``dir`` (see :func:`spawn_demo`) to its end."""
    handle = spawn_demo(dir, set=set)
    try:
        return handle.report(progress=progress)
    finally:
        _write_report(handle, report)
