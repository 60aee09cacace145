"""Run scenarios and write their results: ``results/<id>.json``, one format for every scenario.

A result holds the machine (cpu count, model name, python and numpy versions), the load average before and
after, the git commit, the parameters and the figures. A speed scenario's figures are ratios of our time to
the plain baseline's, from rounds that time both back to back (the order alternating), the median over rounds.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.registry import Pair, Scenario

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
TOLERANCES = Path(__file__).resolve().parent / "speed" / "tolerances.json"


def machine() -> dict:
    """The machine a result was measured on."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        cpu = platform.processor() or "?"
    return {"cpu_count": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "numpy": np.__version__}


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (what ``uptime`` shows)."""
    return [round(x, 2) for x in os.getloadavg()]


@functools.cache
def git_commit() -> str:
    """The checkout's commit when this process first asks (the code it runs), ``+dirty`` when tracked files
    differ from it; ``?`` outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=ROOT, capture_output=True, text=True)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if rev.returncode == 0 else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _per_call(fn: Callable[[], Any], min_time: float) -> int:
    """Calls of ``fn`` per timing so one timing takes about ``min_time`` CPU seconds (after a warm-up call)."""
    fn()
    return max(1, int(np.ceil(min_time / max(_time(fn, 1), 1e-6))))


def _time(fn: Callable[[], Any], number: int) -> float:
    """CPU seconds per call of this process (every thread): other jobs on a shared machine barely move it."""
    t = time.process_time()
    for _ in range(number):
        fn()
    return (time.process_time() - t) / number


def measure(pair: Pair, repeat: int, min_time: float) -> dict:
    """Time ``pair.ours`` and ``pair.baseline`` (CPU time) in ``repeat`` rounds; the ratio ours / baseline
    per round and its median (the figure a tolerance bounds)."""
    n_ours = _per_call(pair.ours, min_time)
    n_base = _per_call(pair.baseline, min_time)
    ratios = []
    for r in range(repeat):
        if r % 2:
            b = _time(pair.baseline, n_base)
            o = _time(pair.ours, n_ours)
        else:
            o = _time(pair.ours, n_ours)
            b = _time(pair.baseline, n_base)
        ratios.append(o / b)
    return {
        "ratio": round(statistics.median(ratios), 4),
        "ratios": [round(x, 4) for x in ratios],
        "baseline": pair.baseline_name,
        "calls_per_timing": {"ours": n_ours, "baseline": n_base},
    }


def run(scenario: Scenario, smoke: bool = False, params: dict | None = None) -> dict:
    """Run one scenario; its result document (not written). ``smoke`` takes a speed scenario's smoke variant."""
    p = dict(scenario.smoke if smoke and scenario.smoke is not None else scenario.params)
    p.update(params or {})
    doc: dict[str, Any] = {
        "id": scenario.id,
        "kind": scenario.kind,
        "what": scenario.what,
        "smoke": smoke,
        "machine": machine(),
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": load_average(),
        "params": p,
    }
    if scenario.kind == "speed":
        timing = {k: p.pop(k) for k in ("repeat", "min_time") if k in p}
        pair = scenario.func(**p)
        doc["figures"] = measure(pair, timing.get("repeat", 7), timing.get("min_time", 0.2))
    else:
        doc["figures"] = scenario.func(**p)
    doc["load_after"] = load_average()
    return doc


def write(doc: dict, out: Path = RESULTS) -> Path:
    """``out/<id>.json``; a script's run record goes to ``out/runs/<id>.json`` (the script writes its own results)."""
    out = out / "runs" if doc["kind"] == "script" else out
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{doc['id']}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def tolerances(path: Path = TOLERANCES) -> dict[str, float]:
    """The committed ratio bounds per speed scenario id."""
    return {k: float(v) for k, v in json.loads(path.read_text()).get("max_ratio", {}).items()}


def check(doc: dict, bounds: dict[str, float]) -> str | None:
    """A message when ``doc``'s ratio exceeds its bound (or it has none), else None."""
    bound = bounds.get(doc["id"])
    if bound is None:
        return f"{doc['id']}: no tolerance in {TOLERANCES.name}"
    ratio = doc["figures"]["ratio"]
    if ratio > bound:
        return f"{doc['id']}: ratio {ratio:.3f} to {doc['figures']['baseline']} exceeds its tolerance {bound:.3f}"
    return None


def write_tolerances(ratios: dict[str, float], headroom: float, path: Path = TOLERANCES) -> None:
    """Set the bounds of ``ratios``' scenarios to ``headroom`` times their measured ratio (others kept)."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    bounds = doc.get("max_ratio", {})
    bounds.update({k: round(v * headroom, 3) for k, v in ratios.items()})
    doc = {
        "about": "Upper bound per smoke speed scenario on its CPU-time ratio to the plain baseline "
        "(python -m benchmarks run --smoke fails beyond it); set by --write-tolerances as headroom x a measured ratio.",
        "headroom": headroom,
        "machine": machine(),
        "load": load_average(),
        "commit": git_commit(),
        "max_ratio": dict(sorted(bounds.items())),
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
