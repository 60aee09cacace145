"""An idle worker's window closes against its model's schedule, on the largest models the server accepts.

A model is created (Adult's schema, or 16 categorical attributes of 3-5 values, at ``--height``; by default
the tallest height the server's largest value accepts for that schema), one ``streamdp worker NAME
--processes 1`` is started and no record is pushed. The model's state is sampled every 0.1 s for
``--seconds``: the windows released, the windows due on the public schedule (the cadence's schedule as stored
with the state, or the clock's ``release_every`` windows with ``--max-lag`` equal to it) and how late the open
window's release is (the time past its end). Reported: closes per minute, windows due per minute, the largest
lateness once the worker has caught up with the windows due at its start (the first sample with every window due
released), and the windows behind at the end,
with the model's size, its create time and the load.

    python benchmarks/speed/idle_schedule.py                          # writes benchmarks/results/idle_schedule.{md,json}
    python benchmarks/speed/idle_schedule.py --schema cat16 --seconds 30 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, sh  # noqa: E402
from streamdp.forest.structure import TooLargeError  # noqa: E402
from streamdp.records.datasets import load_schema  # noqa: E402
from streamdp.records.schema import Schema  # noqa: E402
from streamdp.release.cadence import Schedule  # noqa: E402
from streamdp.release.schedule import windows_closed  # noqa: E402
from streamdp.service.connection import connect  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.registry import create_model, delete_model, show_model  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
MiB = 2**20


def cat16() -> Schema:
    arities = [3, 4, 5] * 5 + [3]
    return Schema.from_dict(
        {
            "attributes": [
                {"name": f"a{j}", "type": "categorical", "values": list(range(a))} for j, a in enumerate(arities)
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )


def largest(r, name: str, schema: Schema, height: int | None, max_lag: float | None) -> tuple:
    """Create the model at ``height``, or the tallest the server accepts from 12 down; (forest, seconds)."""
    for h in [height] if height is not None else range(12, 2, -1):
        t0 = time.perf_counter()
        try:
            return create_model(r, name, schema, height=h, max_lag=max_lag), time.perf_counter() - t0
        except TooLargeError:
            continue
    raise SystemExit("no height fits")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its children alive now (0 for one gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(d.name) == pid or int(f[1]) == pid:  # f[1]: the parent's pid
            total += (int(f[11]) + int(f[12])) / tick
    return total


def sample(r, keys: Keys, start: float, every: float) -> tuple[float, int, int, float]:
    """(now, released, due, seconds the open window's release is late) from the model's state."""
    rel, raw = r.hmget(keys.state, "releases", "schedule")
    now, rel = time.time(), int(rel or 0)
    if raw is None:  # the clock's windows
        due = windows_closed(now, start, every)
        end = start + (rel + 1) * every
    else:
        sched = Schedule.from_dict(json.loads(raw))
        due, end = sched.due(now), sched.end
    return now, rel, due, max(0.0, now - end)


def run(args: argparse.Namespace) -> dict:
    r = connect(args.redis_url)
    schema = load_schema("adult") if args.schema == "adult" else cat16()
    name = "idlesched" + uuid.uuid4().hex[:8]
    keys = Keys(name)
    out: dict = {"schema": args.schema, "max_lag": args.max_lag, "uptime_start": sh("uptime")}
    try:
        forest, create_s = largest(r, name, schema, args.height, args.max_lag)
        info = show_model(r, name)
        out.update(
            create_s=create_s,
            height=forest.height,
            cells=int(np.prod(forest.shape)),
            counts_mib=forest.counts.nbytes / MiB,
            release=info.get("release"),
            cadence=info.get("cadence"),
        )
        del forest
        start, every = float(info["release_start"]), float(info["release"]["release_every"])
        w = subprocess.Popen(
            [sys.executable, "-m", "streamdp.cli", "worker", name, "--processes", "1", "--redis-url", args.redis_url],
            env=ENV,
            stderr=subprocess.DEVNULL,
        )
        try:
            t_start = time.time()
            rows = []
            caught_up_at = None
            cpu = []  # (releases, the worker's CPU seconds) at each close seen
            while time.time() - t_start < args.seconds:
                try:
                    now, rel, due, late = sample(r, keys, start, every)
                except redis.ResponseError as e:  # BUSY: the shared server runs another client's long script
                    if "BUSY" not in str(e):
                        raise
                    time.sleep(0.1)
                    continue
                if rows and rel != rows[-1][1]:
                    cpu.append((rel, cpu_s(w.pid)))
                rows.append((now, rel, due, late))
                if caught_up_at is None and rel > 0 and late == 0.0:  # released every window due so far
                    caught_up_at = now
                time.sleep(0.1)
        finally:
            w.terminate()
            w.wait(60)
        after = [x for x in rows if caught_up_at is not None and x[0] >= caught_up_at]
        span = (after[-1][0] - after[0][0]) if len(after) > 1 else 0.0
        out.update(
            worker_ready_s=None if caught_up_at is None else caught_up_at - t_start,
            seconds=span,
            closes=after[-1][1] - after[0][1] if after else 0,
            due=after[-1][2] - after[0][2] if after else 0,
            max_late_s=max((x[3] for x in after), default=None),
            behind_end=rows[-1][2] - rows[-1][1],
            # over the whole run, the worker's start and catch-up included
            all_seconds=rows[-1][0] - rows[0][0],
            all_closes=rows[-1][1] - rows[0][1],
            all_due=rows[-1][2] - rows[0][2],
            late_end_s=rows[-1][3],  # growing over a run: the worker falls behind the schedule
            # the worker's CPU per close between the first close seen and the last (its start left out)
            cpu_per_close_s=(cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]) if len(cpu) > 1 else None,
        )
        out["closes_per_min"] = out["closes"] / span * 60 if span else None
        out["due_per_min"] = out["due"] / span * 60 if span else None
    finally:
        delete_model(r, name)
        left = list(r.scan_iter(match=keys.pattern, count=1000))
        if left:
            r.delete(*left)
    out["uptime_end"] = sh("uptime")
    return out


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the model and the worker cleaned up on a kill too
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--schema", choices=["adult", "cat16", "both"], default="both")
    ap.add_argument("--height", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--max-lag", type=float, nargs="*", default=[None], help="one run per value (1: 1 s windows)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    runs = []
    for schema in ["adult", "cat16"] if args.schema == "both" else [args.schema]:
        for lag in args.max_lag:
            one = argparse.Namespace(**{**vars(args), "schema": schema, "max_lag": lag})
            runs.append(run(one))
            print(json.dumps(runs[-1]), flush=True)
    if args.no_write:
        return
    (RESULTS / "idle_schedule.json").write_text(json.dumps({"machine": machine(), "runs": runs}, indent=1) + "\n")
    lines = [
        "# An idle worker's window closes on the largest models the server accepts",
        "",
        "`python benchmarks/speed/idle_schedule.py`: one idle `streamdp worker --processes 1`, the model's state "
        "sampled every 0.1 s; 'late' is how long past its end the open window waited for its release, once the "
        "worker had caught up with the windows due at its start.",
        "",
        "| schema | height | cells | counts MiB | release | max_lag | create s | worker caught up after s | "
        "closes / min | windows due / min | max late s | behind at end | whole run: closes / due | late at end s | "
        "worker CPU s per close | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in runs:
        lines.append(
            f"| {o['schema']} | {o['height']} | {o['cells']:,} | {o['counts_mib']:.0f} | {o['release']['kind']} | "
            f"{o['max_lag'] if o['max_lag'] is not None else 'default'} | {o['create_s']:.1f} | "
            f"{o['worker_ready_s'] if o['worker_ready_s'] is None else round(o['worker_ready_s'], 1)} | "
            f"{o['closes_per_min'] or 0:.1f} | {o['due_per_min'] or 0:.1f} | "
            f"{o['max_late_s'] if o['max_late_s'] is None else round(o['max_late_s'], 2)} | {o['behind_end']} | "
            f"{o['all_closes']} / {o['all_due']} in {o['all_seconds']:.0f} s | {o['late_end_s']:.1f} | "
            f"{'' if o['cpu_per_close_s'] is None else round(o['cpu_per_close_s'], 3)} | "
            f"{o['uptime_start'].split('load average:')[-1].strip()} |"
        )
    lines += ["", f"Machine: {machine()['nproc']} x {machine()['cpu']}.", ""]
    (RESULTS / "idle_schedule.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
