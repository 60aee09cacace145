"""A stream model over time, through the real service: idle, slow and fast streams, windows from the released rate
against the clock's windows.

Nursery at epsilon 1 (defaults otherwise: 10 trees, one prior stump, ``grow``), created with the CLI
(``streamdp model create``), one worker process (``streamdp worker``), records pushed by ``Producer`` and the
model read by ``Consumer``, on the local Redis (unique model names, deleted after, their ledgers too); accuracy
on a held-out fifth (a fresh shuffle per draw). Scenarios:

* **idle**: ``--release-every 0.02 --max-lag 5.12``; the training records pushed at once, then the worker
  started; accuracy once every record is published, and again after 3,600 more windows of the clock (72 s)
  with the worker running;
* **slow**: the same settings; the worker started first, then one batch of 10 records per 0.02 s window;
  accuracy once every record is published; each batch's lag (its push to the release of its window) and the
  records in windows left out of the estimate (their released total could not be told from an empty one's);
* **fast**: the default clock (``--release-every`` 1 s, the default ``--max-lag``); the worker started, then
  the training records pushed in batches of 10,000 or of 10 as fast as the producer sends them.

Each scenario runs on a model with the cadence (``rate``) and on the same model without it (``clock``:
``model create --cadence fixed``: every window on the clock, every release
merged); beside them the pure core's one-shot fit of the same training records (``PrivateForest.fit``, the
ceiling). Windows and merged releases are read from the model's public schedule.

    python benchmarks/studies/stream_over_time.py --draws 2 > benchmarks/results/stream_over_time.log
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import redis  # noqa: E402

from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.structure import ceiling_height  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import GROUP, Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import delete_model  # noqa: E402

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
SCHEMA = ROOT / "streamdp" / "data" / "schemas" / "nursery.json"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": URL}


def cli(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "streamdp.cli", *args], env=ENV, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"streamdp {' '.join(args)}: {out.stderr}")
    return out.stdout


def create(name: str, mode: str, every: float | None, max_lag: float | None) -> None:
    args = ["model", "create", name, "--schema", str(SCHEMA), "--epsilon", "1"]
    if every is not None:
        args += ["--release-every", str(every)]
    if mode == "clock":  # the clock's windows, every release merged
        args += ["--cadence", "fixed"]
    elif max_lag is not None:
        args += ["--max-lag", str(max_lag)]
    cli(*args)


def start_worker(name: str, log_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "streamdp.cli", "worker", name, "--processes", "1", "-v"],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=open(log_path, "w"),
    )


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def published(r: redis.Redis, name: str) -> bool:
    """Every pushed record added and the windows holding them released (reads worker-only keys: a harness)."""
    keys = Keys(name)
    g = r.xinfo_groups(keys.records)
    g = next(x for x in g if x["name"] in (GROUP, GROUP.encode()))
    if g["pending"] or (g.get("lag") or 0):
        return False
    open_, rel = (int(x or 0) for x in r.hmget(keys.state, "open", "releases"))
    return not any(r.exists(keys.acc(w)) for w in range(rel + 1, open_ + 1))


def wait(cond, timeout: float, what: str, fatal: bool = True) -> bool:
    """Poll ``cond`` until it holds (True) or ``timeout`` passes (False, or TimeoutError when ``fatal``)."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            if fatal:
                raise TimeoutError(what)
            return False
        time.sleep(0.02)
    return True


def windows(r: redis.Redis, name: str) -> tuple[int, int]:
    """(windows released, releases merged into the counts)."""
    keys = Keys(name)
    rel = int(r.hget(keys.state, "releases") or 0)
    merged = int(r.hget(keys.pub_model, "releases") or 0)
    return rel, merged


class ReleaseClock(threading.Thread):
    """Polls the state: the wall time each window was first seen released, and whether it was merged."""

    def __init__(self, r: redis.Redis, name: str):
        super().__init__(daemon=True)
        self.r, self.keys = r, Keys(name)
        self.at: dict[int, float] = {}
        self.merged: dict[int, bool] = {}
        self.done = False

    def run(self) -> None:
        last_rel, last_merged = 0, 0
        while not self.done:
            p = self.r.pipeline(transaction=True)
            p.hget(self.keys.state, "releases")
            p.hget(self.keys.pub_model, "releases")
            rel, merged = (int(x or 0) for x in p.execute())
            now = time.time()
            for w in range(last_rel + 1, rel + 1):
                self.at[w] = now
                # a jump of several windows in one poll: the merges are put on its last windows (an upper bound
                # on what was left out never counts a merged window's records as lost)
                self.merged[w] = (rel - w) < (merged - last_merged)
            last_rel, last_merged = rel, merged
            time.sleep(0.002)


def accuracy(name: str, X: np.ndarray, y: np.ndarray) -> float:
    with Consumer(URL, name) as c:
        f = c.latest()
    return float(np.mean(f.predict(X) == y))


def cleanup(r: redis.Redis, name: str) -> None:
    try:
        delete_model(r, name)
    except KeyError:
        pass
    ledger = [k for k in r.scan_iter(match=f"sdp:{{{name}}}:ledger*", count=1000)]
    if ledger:
        r.delete(*ledger)


def run_idle(mode: str, Xtr, ytr, Xte, yte, idle_windows: int) -> dict:
    r = redis.Redis.from_url(URL)
    name = f"bench-sot-{uuid.uuid4().hex[:10]}"
    try:
        create(name, mode, 0.02, 5.12 if mode == "rate" else None)
        Producer(URL, name).push(Xtr, ytr)
        w = start_worker(name, Path(f"/tmp/{name}.log"))
        try:
            t0 = time.monotonic()
            # (the clock's windows: a worker that cannot release a window per 0.02 s falls behind for good)
            done = wait(lambda: published(r, name), 120, "the drain", fatal=mode == "rate")
            drained_s = time.monotonic() - t0
            a0, (rel0, m0) = accuracy(name, Xte, yte), windows(r, name)
            t1 = time.time()
            time.sleep(idle_windows * 0.02)  # the worker runs; the clock's windows pass
            a1, (rel1, m1) = accuracy(name, Xte, yte), windows(r, name)
            idle_s = time.time() - t1
        finally:
            stop(w)
        return {
            "scenario": "idle",
            "mode": mode,
            "drained_s": drained_s,
            "published_all": done,
            "acc_drained": a0,
            "windows_drained": rel0,
            "merged_drained": m0,
            "acc_idle": a1,
            "idle_s": idle_s,
            "windows_idle": rel1 - rel0,
            "merged_idle": m1 - m0,
            "cadence_logs": _cadence_logs(name),
        }
    finally:
        cleanup(r, name)


def run_slow(mode: str, Xtr, ytr, Xte, yte, every: float = 0.02, max_lag: float = 5.12, size: int = 10) -> dict:
    r = redis.Redis.from_url(URL)
    name = f"bench-sot-{uuid.uuid4().hex[:10]}"
    try:
        create(name, mode, every, max_lag if mode == "rate" else None)
        w = start_worker(name, Path(f"/tmp/{name}.log"))
        clock = ReleaseClock(redis.Redis.from_url(URL), name)
        clock.start()
        try:
            wait(lambda: r.xinfo_consumers(Keys(name).records, GROUP), 60, "the worker to join")
            pushed: dict[str, tuple[float, int]] = {}
            with Producer(URL, name, batch_size=size) as prod:
                t0 = time.monotonic()
                for i, s in enumerate(range(0, len(ytr), size)):
                    delay = t0 + i * every - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)  # one batch per window of the clock
                    bid = f"{name}-{i}"
                    prod.push(Xtr[s : s + size], ytr[s : s + size], batch_id=bid)
                    pushed[bid] = (time.time(), len(ytr[s : s + size]))
                push_s = time.monotonic() - t0
            done = wait(lambda: published(r, name), 120, "the last records' release", fatal=mode == "rate")
            time.sleep(0.05)
            clock.done = True
            clock.join()
            acc, (rel, merged) = accuracy(name, Xte, yte), windows(r, name)
        finally:
            clock.done = True
            stop(w)
        keys = Keys(name)
        p = r.pipeline(transaction=False)
        for bid in pushed:
            p.zscore(keys.merged, bid)
        win = {bid: int(s or 0) for bid, s in zip(pushed, p.execute())}
        lags = np.array([clock.at[win[b]] - t for b, (t, _) in pushed.items() if win[b] in clock.at])
        lost = sum(n for b, (_, n) in pushed.items() if not clock.merged.get(win[b], True))
        return {
            "scenario": "slow",
            "mode": mode,
            "push_s": push_s,
            "published_all": done,
            "acc": acc,
            "windows": rel,
            "merged": merged,
            "lag_over_bound": int(np.sum(lags > max_lag)),
            "lag_max_s": float(lags.max()),
            "lag_p50_s": float(np.median(lags)),
            "records_left_out": int(lost),
            "records": int(len(ytr)),
            "cadence_logs": _cadence_logs(name),
        }
    finally:
        cleanup(r, name)


def run_fast(mode: str, size: int, Xtr, ytr, Xte, yte) -> dict:
    r = redis.Redis.from_url(URL)
    name = f"bench-sot-{uuid.uuid4().hex[:10]}"
    try:
        create(name, mode, None, None)
        w = start_worker(name, Path(f"/tmp/{name}.log"))
        try:
            wait(lambda: r.xinfo_consumers(Keys(name).records, GROUP), 60, "the worker to join")
            t0 = time.monotonic()
            with Producer(URL, name, batch_size=size) as prod:
                prod.push(Xtr, ytr)
            push_s = time.monotonic() - t0
            done = wait(lambda: published(r, name), 300, "the drain", fatal=mode == "rate")
            published_s = time.monotonic() - t0
            acc, (rel, merged) = accuracy(name, Xte, yte), windows(r, name)
        finally:
            stop(w)
        return {
            "scenario": f"fast, batches of {size:,}",
            "mode": mode,
            "push_s": push_s,
            "published_s": published_s,
            "published_all": done,
            "acc": acc,
            "windows": rel,
            "merged": merged,
        }
    finally:
        cleanup(r, name)


def _cadence_logs(name: str) -> int:
    try:
        return sum('"worker.cadence"' in ln for ln in open(f"/tmp/{name}.log"))
    except FileNotFoundError:
        return 0
    finally:
        Path(f"/tmp/{name}.log").unlink(missing_ok=True)


def boundary(draws: int = 200) -> list[dict]:
    """What the merge rule leaves out, in the pure core: streams of Poisson arrivals at several rates (records a
    second, starting 1 s after the model, lasting 20 s or 300 s) through the cadence at ``--release-every 0.02
    --max-lag 5.12`` with Nursery's noise at epsilon 1 (geometric on each of the stump's 5 cells, as the service
    draws it); the share of records in left-out releases and the merged releases."""
    from streamdp.estimation import cell_variance
    from streamdp.release.cadence import Cadence, Schedule, total_sd

    sd = total_sd(cell_variance("geometric", 1.0 / 11), 5, 1, "split", 11)
    c, every, out = Cadence(5.12), 0.02, []
    for seconds in (20.0, 300.0):
        for rate in (5, 20, 50, 200, 500, 2_000, 20_000):
            rng = np.random.default_rng(rate)
            lost, total, merged = [], [], []
            for _ in range(draws):
                s, kept_n, lost_n, all_n = Schedule.first(0.0, every), 0, 0, 0
                while s.end - s.length < 1.0 + seconds + 5.12:
                    lo, hi = s.end - s.length, s.end
                    span = max(0.0, min(hi, 1.0 + seconds) - max(lo, 1.0))
                    x = int(rng.poisson(rate * span))
                    n = x + float(rng.geometric(1 - np.exp(-1 / 11), (2, 5)).sum(axis=1) @ [1, -1])
                    new = s.after(n, sd, c, every)
                    kept_n += new.merged > s.merged
                    lost_n += 0 if new.merged > s.merged else x
                    all_n += x
                    s = new
                lost.append(lost_n / max(all_n, 1))
                total.append(all_n)
                merged.append(kept_n)
            out.append(
                {
                    "scenario": "boundary (pure core)",
                    "stream_s": seconds,
                    "rate": rate,
                    "records_mean": float(np.mean(total)),
                    "share_left_out_mean": float(np.mean(lost)),
                    "share_left_out_max": float(np.max(lost)),
                    "merged_mean": float(np.mean(merged)),
                }
            )
    return out


def one_shot(ds, tr, te) -> float:
    f = PrivateForest.create(ds.schema, n_trees=10, height=ceiling_height(ds.schema), epsilon=1.0)
    f.fit(ds.X[tr], ds.y[tr])
    return float(np.mean(f.predict(ds.X[te]) == ds.y[te]))


def render(doc: dict) -> list[str]:
    """The results as markdown (means over draws; every draw is in the JSON)."""
    rows = doc["rows"]
    out = [
        "# A stream model over time through the service: windows from the released rate against the clock's",
        "",
        f"`{doc.get('command', 'python benchmarks/studies/stream_over_time.py')}`; git {doc.get('git', '?')}; "
        f"load at start: {doc.get('uptime_start', '?')}; at end: {doc.get('uptime_end', '?')}. "
        "Nursery, epsilon 1, 10 trees + 1 prior stump, `grow`; accuracy on a held-out fifth; "
        "`rate`: the cadence (`--release-every 0.02 --max-lag 5.12` for idle and slow, the defaults for fast), "
        "`clock`: the same model without it (every window on the clock, every release merged). "
        "Windows: released; merged: into the published counts.",
        "",
        "| scenario | mode | draws | accuracy | windows | merged | other |",
        "|---|---|---|---|---|---|---|",
    ]

    def mean(xs: list[dict], k: str) -> str:
        v = [x[k] for x in xs if k in x]
        return " / ".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in v)

    one = [r for r in rows if r["scenario"].startswith("one-shot")]
    out.append(f"| one-shot fit (pure core, the ceiling) | - | {len(one)} | {mean(one, 'acc')} | - | - | - |")
    for scen in ("idle", "slow", "fast, batches of 10,000", "fast, batches of 10"):
        for mode in ("rate", "clock"):
            xs = [r for r in rows if r["scenario"] == scen and r["mode"] == mode]
            if not xs:
                continue
            if scen == "idle":
                out.append(
                    f"| idle: pushed at once, drained | {mode} | {len(xs)} | {mean(xs, 'acc_drained')} | "
                    f"{mean(xs, 'windows_drained')} | {mean(xs, 'merged_drained')} | all published: "
                    f"{mean(xs, 'published_all')}; drained in {mean(xs, 'drained_s')} s |"
                )
                out.append(
                    f"| idle: then 3,600 windows of the clock (72 s) | {mode} | {len(xs)} | {mean(xs, 'acc_idle')} "
                    f"| +{mean(xs, 'windows_idle')} | +{mean(xs, 'merged_idle')} | cadence log lines "
                    f"{mean(xs, 'cadence_logs')} |"
                )
            elif scen == "slow":
                out.append(
                    f"| slow: 10 records per 0.02 s window | {mode} | {len(xs)} | {mean(xs, 'acc')} | "
                    f"{mean(xs, 'windows')} | {mean(xs, 'merged')} | pushing took {mean(xs, 'push_s')} s; lag "
                    f"(push to its window's release) median {mean(xs, 'lag_p50_s')} s, max {mean(xs, 'lag_max_s')} "
                    f"s, batches over 5.12 s: {mean(xs, 'lag_over_bound')}; records left out "
                    f"{mean(xs, 'records_left_out')} of {xs[0]['records']}; all published: {mean(xs, 'published_all')} |"
                )
            else:
                out.append(
                    f"| {scen}, default clock | {mode} | {len(xs)} | {mean(xs, 'acc')} | {mean(xs, 'windows')} | "
                    f"{mean(xs, 'merged')} | pushed in {mean(xs, 'push_s')} s, published after "
                    f"{mean(xs, 'published_s')} s; all published: {mean(xs, 'published_all')} |"
                )
    b = [r for r in rows if r["scenario"].startswith("boundary")]
    if b:
        out += [
            "",
            "## What the merge rule leaves out (pure core)",
            "",
            "Poisson arrivals at a rate, from 1 s after the model's start, for 20 s or 300 s, through the cadence at "
            "`--release-every 0.02 --max-lag 5.12` with Nursery's noise at epsilon 1 (a release's total: sd 34.9, "
            "the merge bar 3 sd = 105 records); 200 draws each.",
            "",
            "| stream | records a second | records | share left out, mean | max | merged releases, mean |",
            "|---|---|---|---|---|---|",
        ]
        for r in b:
            out.append(
                f"| {r['stream_s']:g} s | {r['rate']:,} | {r['records_mean']:,.0f} | {r['share_left_out_mean']:.4f} "
                f"| {r['share_left_out_max']:.4f} | {r['merged_mean']:.1f} |"
            )
    return out + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--idle-windows", type=int, default=3600)
    ap.add_argument("--modes", default="rate,clock")
    ap.add_argument("--scenarios", default="boundary,idle,slow,fast")
    ap.add_argument("--render", action="store_true", help="only write the markdown from the saved JSON")
    a = ap.parse_args()
    out = ROOT / "benchmarks" / "results" / "stream_over_time.json"
    if a.render:
        from common import write_keeping_reading

        write_keeping_reading(out.with_suffix(".md"), render(json.loads(out.read_text())))
        return 0
    import warnings

    warnings.simplefilter("ignore")
    ds = load("nursery")
    start_load = subprocess.getoutput("uptime")
    print(
        f"# python benchmarks/studies/stream_over_time.py --draws {a.draws}; git "
        f"{subprocess.getoutput(f'git -C {ROOT} rev-parse --short HEAD')}; load at start: "
        f"{subprocess.getoutput('uptime')}",
        flush=True,
    )
    rows = []
    if "boundary" in a.scenarios:
        for row in boundary():
            rows.append(row)
            print(json.dumps(row), flush=True)
    for draw in range(a.draws):
        idx = np.random.default_rng(draw).permutation(len(ds.y))
        cut = len(idx) // 5
        te, tr = idx[:cut], idx[cut:]
        Xtr, ytr, Xte, yte = ds.X[tr], ds.y[tr], ds.X[te], ds.y[te]
        row = {"scenario": "one-shot fit (pure core)", "mode": "-", "draw": draw, "acc": one_shot(ds, tr, te)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        for mode in a.modes.split(","):
            todo = []
            if "idle" in a.scenarios:
                todo.append(lambda: run_idle(mode, Xtr, ytr, Xte, yte, a.idle_windows))
            if "slow" in a.scenarios:
                todo.append(lambda: run_slow(mode, Xtr, ytr, Xte, yte))
            if "fast" in a.scenarios:
                todo += [lambda s=s: run_fast(mode, s, Xtr, ytr, Xte, yte) for s in (10_000, 10)]
            for job in todo:
                row = {**job(), "draw": draw}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"# load at end: {subprocess.getoutput('uptime')}", flush=True)
    doc = {
        "command": "python benchmarks/studies/stream_over_time.py " + " ".join(sys.argv[1:]),
        "git": subprocess.getoutput(f"git -C {ROOT} rev-parse --short HEAD"),
        "uptime_start": start_load,
        "uptime_end": subprocess.getoutput("uptime"),
        "rows": rows,
    }
    out.write_text(json.dumps(doc, indent=1))
    from common import write_keeping_reading

    write_keeping_reading(out.with_suffix(".md"), render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
