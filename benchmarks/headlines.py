"""The README's "Performance" table, generated from the committed results (never typed by hand).

``python -m benchmarks report --readme`` rewrites the block between ``<!-- performance:start -->`` and
``<!-- performance:end -->`` in README.md; ``tests/test_readme.py`` fails when the block and the results
disagree. Each :class:`Headline` names its result file and reads its figure from it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import runner

__all__ = ["Headline", "HEADLINES", "table", "update_readme", "START", "END", "README"]

START, END = "<!-- performance:start -->", "<!-- performance:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"


@dataclass(frozen=True)
class Headline:
    """One row: what was measured, the result file (in ``benchmarks/results``) and how to read the figure."""

    what: str
    file: str
    figure: Callable[[dict], str]


def _load(name: str, folder: Path) -> dict:
    return json.loads((folder / name).read_text())


def _stream_idle(d: dict) -> str:
    rows = [r for r in d["rows"] if r.get("scenario") == "idle"]
    rate = [r for r in rows if r["mode"] == "rate"]
    clock = [r for r in rows if r["mode"] == "clock"]
    mean = statistics.fmean
    return (
        f"{mean(r['acc_drained'] for r in rate):.2f} after the push, {mean(r['acc_idle'] for r in rate):.2f} after "
        f"3,600 idle windows (clock-driven windows: {mean(r['acc_idle'] for r in clock):.2f})"
    )


def _stream_slow(d: dict) -> str:
    rate = [r for r in d["rows"] if r.get("scenario") == "slow" and r["mode"] == "rate"]
    return (
        f"{statistics.fmean(r['acc'] for r in rate):.2f}; every batch published within "
        f"{max(r['lag_max_s'] for r in rate):.1f} s (bound 5.12 s)"
    )


def _small_data(d: dict) -> str:
    ours = [r for r in d["rows"] if not r.get("dpl")]
    dpl = [r["acc"] for r in d["rows"] if r.get("dpl")]
    fit = statistics.fmean(r["acc"]["fit"] for r in ours)
    majority = statistics.fmean(r["acc"]["majority"] for r in ours)
    text = f"mean accuracy {fit:.3f} (majority share {majority:.3f}"
    return text + (f"; diffprivlib's forest {statistics.fmean(dpl):.3f})" if dpl else ")")


def _speed_ratio(d: dict) -> str:
    return f"{1 / d['figures']['ratio']:.1f}x the plain baseline's speed ({d['figures']['baseline']})"


def _hot_path(d: dict) -> str:
    speed = " / ".join(f"{r['ours_ratio_wall_median']:.1f}x" for r in d["rows"])
    sizes = " / ".join(f"{r['batch']:,}" for r in d["rows"])
    return f"{speed} scikit-learn's speed at batches of {sizes} records"


def _service(d: dict) -> str:
    return (
        f"{d['ratio']:.1f}x the plain pipeline's time (push to drained workers); a cold fetch "
        f"{d['fetch']['cold_x_floor']:.1f}x reading the counts"
    )


HEADLINES: list[Headline] = [
    Headline("Stream model left idle, Nursery, epsilon 1", "stream_over_time.json", _stream_idle),
    Headline("Slow stream, 10 records per window, lag bound 5.12 s", "stream_over_time.json", _stream_slow),
    Headline("Default forest on small data (9 datasets, eps 0.1-2)", "accuracy_small_data_5x10.json", _small_data),
    Headline(
        "Default forest on held-out data (Wine, Breast Cancer, Digits, UCI Car; eps 0.1-2)",
        "accuracy_heldout.json",
        _small_data,
    ),
    Headline("Apply + tally on Adult's default forest vs sklearn `apply` + `bincount`", "hot_path.json", _hot_path),
    Headline("River loop (`progressive_val_score`)", "speed.river_loop.json", _speed_ratio),
    Headline("Service end to end, 300k Adult rows", "service_defaults.json", _service),
]


def table(folder: Path = runner.RESULTS) -> str:
    """The markdown table of :data:`HEADLINES` read from ``folder``."""
    lines = ["| measured | result | source |", "|---|---|---|"]
    for h in HEADLINES:
        stem = h.file.removesuffix(".json")
        lines.append(f"| {h.what} | {h.figure(_load(h.file, folder))} | [{stem}](benchmarks/results/{stem}.md) |")
    return "\n".join(lines)


def update_readme(path: Path = README, folder: Path = runner.RESULTS) -> bool:
    """Rewrite the block between :data:`START` and :data:`END` in ``path``; True if it changed."""
    text = path.read_text()
    head, sep, rest = text.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"{path} has no {START} ... {END} block")
    new = f"{head}{START}\n{table(folder)}\n{END}{tail}"
    if new != text:
        path.write_text(new)
    return new != text
