"""What the engine reports, as typed Python objects: the run report, the
plan, a validation, progress and events. Each is made from the JSON the
engine serialises (the very JSON ``warpline run --report`` writes), so its
fields are the engine's fields; ``to_dict()`` gives that JSON back as it
came. A test checks that every class here names exactly the fields the
JSON has."""

from __future__ import annotations

import json
import sys
import typing
from typing import (
    Any,
    Dict,
    Generic,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    TypeVar,
    Union,
    overload,
)

from ._errors import Problem

T = TypeVar("T")
R = TypeVar("R", bound="Record")


class ByName(Sequence[T], Generic[T]):
    """A list that can also be indexed by name: ``report.stages[0]`` or
    ``report.stages["reproject"]``."""

    def __init__(self, items: List[T]) -> None:
        self._items = items

    @overload
    def __getitem__(self, key: Union[int, str]) -> T: ...

    @overload
    def __getitem__(self, key: slice) -> List[T]: ...

    def __getitem__(self, key: Union[int, str, slice]) -> Union[T, List[T]]:
        if isinstance(key, str):
            for item in self._items:
                if getattr(item, "name", None) == key:
                    return item
            names = ", ".join(repr(getattr(i, "name", "?")) for i in self._items)
            raise KeyError(f"no {key!r}; there are {names}")
        return self._items[key]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def names(self) -> List[str]:
        """The names, in order."""
        return [str(getattr(i, "name", "")) for i in self._items]

    def __repr__(self) -> str:
        return f"ByName({self._items!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ByName):
            return self._items == other._items
        return self._items == other


def _hints(cls: type) -> Dict[str, Any]:
    module = sys.modules[cls.__module__]
    return {
        k: v
        for k, v in typing.get_type_hints(cls, vars(module)).items()
        if not k.startswith("_")
    }


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint(value)
    if hint is Problem:
        return Problem(value["path"], value["message"], value["tier"])
    if origin in (list, List) and args:
        return [_convert(args[0], v) for v in value]
    if origin is ByName and args:
        return ByName([_convert(args[0], v) for v in value])
    return value


class Record:
    """A value made from the engine's JSON: one attribute per field."""

    _optional: typing.ClassVar[Dict[str, Any]] = {}
    """Fields the JSON leaves out when they are empty, with their value
    then."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)
        for name, hint in _hints(type(self)).items():
            if name in data:
                value = data[name]
            else:
                value = self._optional.get(name)
                value = type(value)(value) if value is not None else None
            setattr(self, name, _convert(hint, value))

    @classmethod
    def fields(cls) -> List[str]:
        """The fields, in order."""
        return list(_hints(cls))

    def to_dict(self) -> Dict[str, Any]:
        """The JSON this was made from, as the engine wrote it."""
        copy: Dict[str, Any] = json.loads(json.dumps(self._data))
        return copy

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and getattr(other, "_data") == self._data

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{k}={getattr(self, k)!r}"
            for k in self.fields()
            if not isinstance(getattr(self, k), (list, dict, ByName, Record))
        )
        return f"{type(self).__name__}({shown})"


class ItemCounts(Record):
    """What became of the items: ``done + skipped + failed == total``."""

    total: int
    """Inputs admitted (including malformed ones the source reported)."""
    done: int
    """Passed every stage."""
    skipped: int
    """Stopped early on purpose (for example: output already complete)."""
    failed: int
    """Failed at some stage, or interrupted."""
    requeued: int
    """Times an item gave back its share of a byte budget and went to the
    start of the flow again (not an end)."""
    not_admitted: Optional[int]
    """Inputs never admitted because the run was stopped first; ``None``
    when the source does not know its length."""


class StageReport(Record):
    """One stage's work."""

    _optional = {"paths": {}, "notes": []}

    name: str
    kind: str
    workers: int
    mailbox: int
    processed: int
    """Items the stage's code ran on (whatever the outcome)."""
    busy_s: float
    """Time in the stage's code, summed over workers."""
    starved_s: float
    """Time workers waited for an item."""
    blocked_s: float
    """Time workers waited to hand an item on."""
    utilisation: float
    """``busy_s / (workers x elapsed_s)``."""
    cpu_s: Optional[float]
    """CPU time of the stage's code (``None`` for an async stage)."""
    paths: Dict[str, int]
    """Tries per way the stage said it took (reproject's ``memory``,
    ``disk``)."""
    notes: List[str]
    """What the stage said of how it works (reproject's warp path)."""


class LimiterReport(Record):
    """One limiter's use during the run (for a shared limiter: while this
    run went on)."""

    _optional = {"per_second": None}

    name: str
    kind: str
    """``count``, ``bytes`` or ``rate``."""
    capacity: int
    """Slots, bytes, or burst."""
    peak_in_use: Optional[int]
    """The most slots or bytes held at once (``None`` for a rate)."""
    per_second: Optional[float]
    wait_s: float
    p95_wait_s: float
    share_at_capacity: float


class HostReport(Record):
    """Requests to one remote host."""

    host: str
    requests: int
    achieved_per_s: float
    throttled_429: int
    retries: int
    adaptive: Optional[Dict[str, Any]]


class Failure(Record):
    """One failed item."""

    id: str
    source: str
    stage: str
    kind: str
    """``permanent``, ``transient``, ``interrupted``, ..."""
    message: str
    attempts: int
    status: Optional[int]
    """The HTTP status, when a server's answer failed the item."""


class ItemFootprint(Record):
    """Where one item's data went: its bounds in EPSG:4326 (``west > east``
    across the antimeridian) and how it ended."""

    id: str
    outcome: str
    """``done`` (the output's bounds), ``skipped`` or ``failed`` (the
    input's)."""
    west: float
    south: float
    east: float
    north: float


class Report(Record):
    """The report of one run: the fields of ``warpline run --report``'s JSON;
    ``str(report)`` is the text the binary prints."""

    _optional = {"timeline": None, "footprints": []}

    pipeline: str
    outcome: str
    """``completed``, ``stopped``, ``aborted`` or ``aborted_on_error``."""
    elapsed_s: float
    throughput_per_s: float
    bytes_in: int
    bytes_out: int
    diagnosis: str
    """What limited the run, in a sentence."""
    items: ItemCounts
    stages: ByName[StageReport]
    limiters: ByName[LimiterReport]
    hosts: List[HostReport]
    failures: List[Failure]
    failures_not_listed: int
    peak_rss_bytes: Optional[int]
    timeline: Optional[Dict[str, Any]]
    stalls: List[Dict[str, Any]]
    footprints: List[ItemFootprint]
    """Where each item's data went, when a stage knew (raster pipelines)."""

    _text: str = ""

    @classmethod
    def _from_native(cls, texts: "tuple[str, str]") -> "Report":
        report = cls(json.loads(texts[0]))
        report._text = texts[1]
        return report

    def __str__(self) -> str:
        return self._text or repr(self)


class PlannedStage(Record):
    """A stage as it will run."""

    _optional = {"adaptive": None, "notes": []}

    name: str
    kind: str
    workers_are: str
    """``async`` (tokio tasks) or ``blocking`` (OS threads)."""
    workers: int
    workers_from: Dict[str, Any]
    """Where ``workers`` came from: ``{"from": "declared"}``, ``{"from":
    "cores", "cores": 2}`` (the kind's default, one per core) or ``{"from":
    "one"}``."""
    mailbox: int
    limits: List[str]
    carry: List[str]
    release: List[str]
    charges: List[str]
    attempts: int
    adaptive: Optional[Dict[str, Any]]
    notes: List[str]


class PlannedLimiter(Record):
    """A limiter with its resolved numbers."""

    _optional = {"per_second": None, "per": None}

    name: str
    kind: str
    capacity: int
    per_second: Optional[float]
    per: Optional[str]
    origin: str
    """``declared``, or the default it is and what it is sized from
    (``default: half of RAM 15.6 GiB``)."""


class Plan(Record):
    """The pipeline as it will run (``warpline plan``); ``str(plan)`` is the
    binary's text."""

    pipeline: str
    source: str
    source_limits: List[str]
    stages: ByName[PlannedStage]
    admission_bound: int
    """The most items in the pipeline at once."""
    limiters: ByName[PlannedLimiter]
    gdal_cache_bytes: Optional[int]
    memory: Dict[str, Any]
    """What bounds the memory and where that came from (``bound_by``), the
    most the process can take (``at_most_bytes``, ``None`` when nothing
    bounds it), and the peak estimated from the first inputs (``estimate``,
    or ``not_estimated`` saying why not): docs/pipeline.md, "Defaults: the
    smallest pipeline"."""
    estimated_peak_memory_bytes: Optional[int]
    """The estimate's peak, else ``memory["at_most_bytes"]``."""

    _text: str = ""

    @classmethod
    def _from_native(cls, texts: "tuple[str, str]") -> "Plan":
        plan = cls(json.loads(texts[0]))
        plan._text = texts[1]
        return plan

    def __str__(self) -> str:
        return self._text or repr(self)


class Validation(Record):
    """What ``warpline validate`` finds: every problem of every tier, each
    with its key path."""

    valid: bool
    admission_bound: Optional[int]
    problems: List[Problem]
    not_checked: List[str]

    def __bool__(self) -> bool:
        return self.valid


class Progress(Record):
    """Where a run stands: exact counts, the rate and an ETA."""

    total: Optional[int]
    """Inputs in all, when the source knows."""
    admitted: int
    done: int
    skipped: int
    failed: int
    finished: bool
    not_admitted: Optional[int]
    rate_per_s: float
    """Items ended per second since the run started."""

    @property
    def ended(self) -> int:
        """Items done, skipped or failed."""
        return self.done + self.skipped + self.failed

    @property
    def eta_s(self) -> Optional[float]:
        """Seconds until every input has ended at the rate so far; ``None``
        when the total or the rate is not known yet."""
        if self.finished:
            return 0.0
        if self.total is None or self.rate_per_s <= 0:
            return None
        return max(self.total - self.ended, 0) / self.rate_per_s


class Event:
    """Something that happened in a run. ``kind`` is the engine's event
    name: ``run_started``, ``admitted``, ``stage_started``,
    ``stage_finished``, ``done``, ``skipped``, ``failed``, ``requeued``,
    ``host_limits``, ``missed`` or ``run_finished``; ``data`` holds every
    field as the engine's JSON has it (``--events`` writes the same)."""

    __slots__ = ("kind", "item", "stage", "message", "at_ms", "t_s", "data")

    kind: str
    item: Optional[str]
    """The item's id, for an event of one item."""
    stage: Optional[str]
    message: Optional[str]
    """A failure's message, a skip's reason."""
    at_ms: int
    t_s: float
    data: Dict[str, Any]

    def __init__(self, data: Dict[str, Any]) -> None:
        self.data = data
        self.kind = str(data.get("event", ""))
        self.item = data.get("item")
        self.stage = data.get("stage")
        self.message = data.get("message", data.get("reason"))
        self.at_ms = int(data.get("at_ms", 0))
        self.t_s = float(data.get("t_s", 0.0))

    def __repr__(self) -> str:
        about = f" {self.item}" if self.item else ""
        at = f" at {self.stage}" if self.stage else ""
        return f"<Event {self.kind}{about}{at}>"
