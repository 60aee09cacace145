"""The scenarios by stable id: what each one runs, with which parameters, and its smoke variant.

A scenario's ``kind`` says how the runner treats it:

* ``speed``: ``func(**params)`` returns a :class:`Pair` (our operation, a plain baseline doing the same work
  without privacy); the runner times both interleaved and reports their ratio. ``smoke`` holds the
  parameters of the small variant ``run --smoke`` checks against ``speed/tolerances.json``.
* ``study``: ``func(**params)`` returns a dict of figures, stored as they are.
* ``script``: a benchmark script run as ``python -m MODULE ARGS`` in its own process; the script writes its
  own result files, the runner records its exit code, wall time and the machine.

Registering an existing script is one line: ``script("stream_small", "benchmarks.studies.stream_small")``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KINDS = ("speed", "study", "script")


@dataclass(frozen=True)
class Pair:
    """Our operation and the plain baseline, each a no-argument callable doing one unit of the same work."""

    ours: Callable[[], Any]
    baseline: Callable[[], Any]
    baseline_name: str


@dataclass(frozen=True)
class Scenario:
    """One benchmark: ``id`` (stable, the result file's name), ``kind`` (see the module docstring), the
    callable and its parameters, the smoke variant's parameters (speed only) and one line saying what it measures."""

    id: str
    kind: str
    func: Callable[..., Any]
    params: dict = field(default_factory=dict)
    smoke: dict | None = None
    what: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"scenario {self.id!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.kind == "speed" and self.smoke is None:
            raise ValueError(f"speed scenario {self.id!r} needs a smoke variant")


REGISTRY: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    """Add ``scenario``; raises :class:`ValueError` when its id is taken."""
    if scenario.id in REGISTRY:
        raise ValueError(f"scenario id {scenario.id!r} registered twice")
    REGISTRY[scenario.id] = scenario
    return scenario


def speed(id: str, func: Callable[..., Pair], params: dict, smoke: dict, what: str = "") -> Scenario:
    """Register a speed scenario (``func(**params)`` returns a :class:`Pair`)."""
    what = what or " ".join((func.__doc__ or "").split())
    return register(Scenario(id, "speed", func, dict(params), dict(smoke), what))


def script(id: str, module: str, *args: str, what: str = "") -> Scenario:
    """Register the script ``module`` (dotted, e.g. ``benchmarks.studies.river_eval``) run with ``args``."""
    return register(script_scenario(id, module, *args, what=what))


def script_scenario(id: str, module: str, *args: str, what: str = "") -> Scenario:
    """The scenario running ``python -m module *args`` (not registered)."""
    return Scenario(id, "script", _run_script, {"module": module, "args": list(args)}, None, what or module)


def _run_script(module: str, args: list[str]) -> dict:
    """Run ``python -m module *args`` from the checkout's root; its exit code and wall time."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    t = time.perf_counter()
    code = subprocess.call([sys.executable, "-m", module, *args], cwd=Path(__file__).resolve().parents[1])
    return {"exit_code": code, "wall_s": round(time.perf_counter() - t, 3)}


def get(id: str) -> Scenario:
    """The scenario ``id``; raises :class:`KeyError` naming the known ids when there is none."""
    load()
    try:
        return REGISTRY[id]
    except KeyError:
        raise KeyError(f"no scenario {id!r}; known: {', '.join(sorted(REGISTRY))}") from None


def load() -> dict[str, Scenario]:
    """Import the modules that register scenarios (once) and return the registry."""
    from benchmarks import scenarios  # noqa: F401  (registers on import)

    return REGISTRY
