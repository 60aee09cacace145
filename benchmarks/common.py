"""Helpers the benchmark scripts share: the machine they ran on, CV folds, the runtime table."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

import numpy as np


def sh(cmd: str) -> str:
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return {"uname": sh("uname -a"), "nproc": sh("nproc"), "cpu": cpu, "python": platform.python_version()}


def folds(n: int, k: int, rng) -> list[np.ndarray]:
    return np.array_split(rng.permutation(n), k)


def run_info(**extra) -> dict:
    """What a study's results record about its run: machine, git commit, load at start, and ``extra``."""
    return {"machine": machine(), "git": sh("git rev-parse --short HEAD"), "uptime_start": sh("uptime"), **extra}


def cv_splits(n: int, repeats: int, k: int, rng):
    """``(split number, train, test)`` of ``repeats`` x ``k``-fold CV over ``n`` records (test sorted)."""
    for r in range(repeats):
        perm = rng.permutation(n)
        for i, test in enumerate(np.array_split(perm, k)):
            yield r * k + i, np.setdiff1d(perm, test), np.sort(test)


def study_header(title: str, script: str, info: dict) -> list[str]:
    """The first lines of a study's markdown: title, command, commit, machine, load at start and end."""
    return [
        f"# {title}",
        "",
        f"`python benchmarks/studies/{script}`; git {info['git']}; {info['machine']['nproc']} x {info['machine']['cpu']}",
        f"load at start: {info['uptime_start']}",
        f"load at end: {info['uptime_end']}",
        "",
    ]


def append_runtime(path: Path, rows: list[dict], info: dict, source: str) -> None:
    """Append fit runtimes (dicts with learner, dataset, rows, params, median_s) to the shared table."""
    if not path.exists():
        path.write_text(
            "# Runtime of the batch learners\n\n"
            "One fit on the whole dataset; median of reps. Machine and load per row.\n\n"
            "| learner | dataset | rows | params | median s | machine | load (uptime) | source |\n"
            "|---|---|---|---|---|---|---|---|\n"
        )
    m = info["machine"]
    load_avg = info["uptime_end"].split("load average:")[-1].strip()
    with path.open("a") as f:
        for r in rows:
            f.write(
                f"| {r['learner']} | {r['dataset']} | {r['rows']} | {r['params']} | {r['median_s']:.3f} | "
                f"{m['nproc']} x {m['cpu']} | {load_avg} | {source} |\n"
            )


def write_results(stem: str, info: dict, rows: list[dict], lines: list[str]) -> None:
    """``results/<stem>.json`` (info and rows) and ``results/<stem>.md`` (``lines``, its Reading kept)."""
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    write_keeping_reading(out / f"{stem}.md", lines)


def write_keeping_reading(path: Path, lines: list[str]) -> None:
    """Write a results file; a hand-written "## Reading" section already in it is kept at the end
    (check it against the new numbers)."""
    old = path.read_text() if path.exists() else ""
    if "## Reading" in old:
        lines = [*lines, old[old.index("## Reading") :].rstrip("\n"), ""]
    path.write_text("\n".join(lines))
