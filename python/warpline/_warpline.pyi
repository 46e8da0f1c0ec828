"""Type stubs of the extension module (the Rust half of warpline)."""

import asyncio
import os
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

class Limits:
    """Limiters shared by every run given them (``limits=``), as
    ``warpline::Limits`` is for a Rust service. A pipeline draws on one
    with ``[limits.NAME] shared = true``; shared limiters are acquired in
    the order they were added."""

    def __init__(self) -> None: ...
    def count(self, name: str, permits: int) -> None:
        """Adds a count limiter of ``permits`` slots (cores, connections)."""
    def bytes(self, name: str, budget: Union[int, str], *, oversize: str = "fail") -> None:
        """Adds a byte budget (bytes, or text such as ``"512MiB"``); an item
        larger than it fails (``oversize="fail"``) or waits to run alone
        (``"alone"``)."""
    def rate(self, name: str, per_second: float, *, burst: int = 1, per_host: bool = False) -> None:
        """Adds a token bucket of ``per_second`` tokens a second holding at
        most ``burst``, one for all or one per host, paced 2% under
        ``per_second`` (a pipeline's default ``margin``), and a wider margin
        after a refusal at its pace."""
    def names(self) -> List[str]:
        """The limiters' names, in acquisition order."""
    def in_use(self, name: str) -> int:
        """Slots or bytes in use now, by every run together."""
    def peak_in_use(self, name: str) -> int:
        """The most slots or bytes held at once since the limiter was made."""
    def capacity(self, name: str) -> int:
        """Slots, bytes, or burst."""
    def __len__(self) -> int: ...
    def __contains__(self, name: object) -> bool: ...

class Raster:
    """The raster of one item, lent to a stage's call: its georeferencing,
    its bands as numpy arrays, and new rasters made from arrays."""

    @property
    def id(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def count(self) -> int:
        """The number of bands."""
    @property
    def crs_wkt(self) -> str:
        """The CRS as WKT ("" when none)."""
    @property
    def geo_transform(self) -> Optional[Tuple[float, float, float, float, float, float]]:
        """GDAL's affine geotransform."""
    @property
    def nodata(self) -> List[Optional[float]]:
        """Each band's nodata value."""
    @property
    def dtypes(self) -> List[Optional[str]]:
        """Each band's numpy dtype name as ``read`` gives it."""
    def read(self, band: int, dtype: Optional[npt.DTypeLike] = None) -> npt.NDArray[Any]:
        """Band ``band`` (from 1) as a (height, width) array, of its own
        dtype or of ``dtype`` (GDAL converts)."""
    def with_bands(
        self,
        bands: Union[npt.NDArray[Any], List[npt.NDArray[Any]], Tuple[npt.NDArray[Any], ...]],
        nodata: Optional[float] = None,
    ) -> "Raster":
        """A new raster of this one's size, geotransform and CRS whose
        bands are ``bands`` (all of one dtype), each with nodata
        ``nodata``."""

class Item:
    """An item, as a stage that takes no raster sees it."""

    @property
    def id(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def path(self) -> Optional[str]:
        """Where ``write`` put the output, for a stage after it."""

class EventStream:
    def next(self) -> Optional[str]: ...
    def next_async(self, event_loop: asyncio.AbstractEventLoop) -> "asyncio.Future[Optional[str]]": ...

class NativeRun:
    def wait(self, timeout: Optional[float] = None) -> bool: ...
    def wait_async(self, event_loop: asyncio.AbstractEventLoop) -> "asyncio.Future[bool]": ...
    def is_finished(self) -> bool: ...
    def progress(self) -> str: ...
    def stop(self) -> None: ...
    def abort(self) -> None: ...
    def report(self) -> Optional[Tuple[str, str]]: ...
    def events(self) -> EventStream: ...

PipelineArg = Union[str, "os.PathLike[str]", Mapping[str, Any]]

def start(
    pipeline: PipelineArg,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[Limits] = None,
    env: bool = False,
) -> NativeRun: ...
def validate(
    pipeline: PipelineArg,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[Limits] = None,
    env: bool = False,
) -> str: ...
def plan(
    pipeline: PipelineArg,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[Limits] = None,
    env: bool = False,
) -> Tuple[str, str]: ...
def start_demo(dir: Path, *, set: Optional[Mapping[str, Any]] = None) -> NativeRun: ...
def sample_tiles(dir: Path, *, per_crs: int = 2, size: int = 256) -> List[str]: ...
def versions() -> Tuple[str, str, str]: ...
def register_stage(
    kind: str,
    func: Callable[..., Any],
    *,
    takes: str = "raster",
    hands_on: str = "raster",
    memory: Union[int, Callable[[int, int, int], int], None] = None,
) -> None: ...
def unregister_stage(kind: str) -> bool: ...
def stage_kinds() -> List[str]: ...
