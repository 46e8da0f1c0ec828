"""One Limits object shared by two runs of the process: together they never
hold more than it has."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

import pytest

import warpline


def job(name: str, count: int) -> Dict[str, Any]:
    return {
        "pipeline": {"name": name, "flow": ["work"]},
        "source": {"kind": "generate", "count": count},
        "limits": {"cpu": {"shared": True}},
        "stages": {"work": {"kind": "counted", "workers": 4, "limits": ["cpu"]}},
    }


def test_two_runs_sharing_limits_never_exceed_them_together(registered: List[str]) -> None:
    lock = threading.Lock()
    now = {"in": 0, "peak": 0, "calls": 0}

    @warpline.stage("counted", takes="any", hands_on="any")
    def counted(item: warpline.Item) -> None:
        with lock:
            now["in"] += 1
            now["calls"] += 1
            now["peak"] = max(now["peak"], now["in"])
        time.sleep(0.005)
        with lock:
            now["in"] -= 1

    registered.append("counted")
    shared = warpline.Limits()
    shared.count("cpu", 2)
    assert "cpu" in shared and shared.names() == ["cpu"] and len(shared) == 1
    a = warpline.spawn(job("a", 60), limits=shared)
    b = warpline.spawn(job("b", 60), limits=shared)
    ra, rb = a.report(), b.report()
    assert ra.items.done == rb.items.done == 60
    assert now["calls"] == 120
    # Eight workers in all, two slots: never more than two calls at once,
    # and the two runs did fill them.
    assert now["peak"] == 2
    assert shared.peak_in_use("cpu") == 2 and shared.in_use("cpu") == 0
    for r in (ra, rb):
        assert r.limiters["cpu"].capacity == 2
        assert r.limiters["cpu"].peak_in_use is not None and r.limiters["cpu"].peak_in_use <= 2


def test_a_pipeline_that_asks_for_a_shared_limiter_it_was_not_given_is_told() -> None:
    v = warpline.validate(job("alone", 1))
    assert [p.path for p in v.problems if "cpu" in p.path] != [], v.problems
    with pytest.raises(ValueError):
        warpline.Limits().count("cpu", 0)
    limits = warpline.Limits()
    limits.bytes("memory", "64MiB")
    limits.rate("requests", 10.0, burst=5, per_host=True)
    assert limits.capacity("memory") == 64 << 20 and limits.capacity("requests") == 5
    with pytest.raises(ValueError):
        limits.count("memory", 1)
