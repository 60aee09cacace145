"""The service at its defaults on Adult's schema, beside a plain pipeline doing the same counting without privacy.

Measured, in one run, on the local Redis:

* Redis memory of the model right after ``streamdp model create`` at the defaults (``MEMORY USAGE`` per key),
  beside the counts' bytes;
* a cold ``Consumer().latest()`` and a new version's fetch (a consumer holding the structure), beside the
  floor: reading the published counts' bytes (``HGET``);
* end to end: ``--rows`` Adult rows (the dataset repeated) from ``streamdp push`` (the CLI, its default batch
  size) to a drained ``streamdp worker NAME --processes 2 --until-drained``, with the resident set of the
  pool's parent and of each worker process (peak ``VmHWM`` and last ``VmRSS`` from /proc, sampled), and the time
  at which every entry was merged and acked (the group polled every 5 ms): "drained" also waits for the window
  holding the last records to be released on the model's public schedule;
* the plain pipeline on the same rows: pandas reads the CSV and codes it, msgpack packs each 1,000-row batch,
  pipelined XADD; then 2 consumer processes (XREADGROUP, scikit-learn ``apply`` on a RandomForestClassifier of
  10 trees as deep as the model's trees, fitted on Adult, ``np.bincount`` of the leaves, XACK) until the stream
  is drained (their last read blocks 0.5 s); its "merged" time is when every entry was acked;
* the service as it runs (``service_warm``): the same, with the worker pool started before the push, as the plain
  pipeline's consumers are, timed to every entry merged and to every window holding them published;
* ``--e2e-repeats`` runs of each side, interleaved (a model created just before each service run), and their
  medians;
* an idle worker's window closes per minute against the windows due on the model's schedule (``--idle-s``
  seconds; the largest models' 1 s schedule: ``benchmarks/speed/idle_schedule.py``).

    python benchmarks/studies/service_defaults.py [--rows 300000] [--idle-s 30]

Writes benchmarks/results/service_defaults.{md,json} with the machine's load. Every key it made is deleted.

``--only fetch`` measures the create and fetch part alone (:mod:`service_fetch`, one process per model) on
``--schema`` (``adult``, ``cat16``: 16 categorical attributes at height 10, or both), with ``--before``'s code
alongside, the runs interleaved; it writes benchmarks/results/service_defaults_fetch.{md,json}.

    python benchmarks/studies/service_defaults.py --only fetch --schema adult cat16 --before /path/to/main
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pandas as pd
import redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, sh  # noqa: E402
from benchmarks.speed.idle_schedule import sample  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.service.connection import connect  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import Keys, as_str  # noqa: E402
from streamdp.service.model_store import load_spec  # noqa: E402
from streamdp.service.registry import create_model, delete_model, load_policy  # noqa: E402

MiB = 2**20
RESULTS = ROOT / "benchmarks" / "results"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
BATCH = 1000


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "streamdp.cli", *args]


def adult_csv(rows: int, path: Path) -> pd.DataFrame:
    ds = load("adult")
    names = [a.name for a in ds.schema.attributes]
    df = pd.DataFrame(ds.X, columns=names)
    df[ds.schema.label.name] = ds.y
    reps = -(-rows // len(df))
    big = pd.concat([df] * reps, ignore_index=True).iloc[:rows]
    big.to_csv(path, index=False)
    return big


def children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def status_kb(pid: int, field: str) -> int | None:
    try:
        for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
            if ln.startswith(field + ":"):
                return int(ln.split()[1])
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    """Peak VmHWM and largest VmRSS of a process and its children, sampled every 0.1 s until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.stop_ev, self.peak, self.rss = pid, threading.Event(), {}, {}
        self.roles: dict[int, str] = {}

    def run(self) -> None:
        while not self.stop_ev.is_set():
            for p in [self.pid, *children_of(self.pid)]:
                hwm, rss = status_kb(p, "VmHWM"), status_kb(p, "VmRSS")
                if p not in self.roles:
                    try:
                        cmd = Path(f"/proc/{p}/cmdline").read_bytes()
                        self.roles[p] = "resource tracker" if b"resource_tracker" in cmd else "worker"
                    except OSError:
                        pass
                if hwm is not None:
                    self.peak[p] = max(self.peak.get(p, 0), hwm)
                    self.rss[p] = max(self.rss.get(p, 0), rss or 0)
            self.stop_ev.wait(0.1)


def key_memory(r: redis.Redis, keys: Keys) -> list[dict]:
    out = []
    for k in sorted(r.scan_iter(match=keys.pattern, count=1000)):
        kind = r.type(k)
        out.append(
            {
                "key": k.decode() if isinstance(k, bytes) else k,
                "type": kind.decode() if isinstance(kind, bytes) else kind,
                "bytes": r.memory_usage(k, samples=0) or 0,
            }
        )
    return out


class AckWatch(threading.Thread):
    """The time (``perf_counter``) at which group ``group`` of ``stream`` first held ``rows`` records' entries
    delivered and acked: nothing pending, no lag, every entry read (polled every 5 ms until stopped)."""

    def __init__(self, url: str, stream: str, group: str, entries: int):
        super().__init__(daemon=True)
        self.r, self.stream, self.group, self.entries = redis.Redis.from_url(url), stream, group, entries
        self.stop_ev = threading.Event()
        self.at: float | None = None

    def run(self) -> None:
        while not self.stop_ev.is_set() and self.at is None:
            try:
                g = next(
                    (g for g in self.r.xinfo_groups(self.stream) if g["name"] in (self.group, self.group.encode())),
                    None,
                )
            except redis.ResponseError:
                g = None
            if g is not None and int(g["pending"]) == 0 and int(g.get("entries-read") or 0) >= self.entries:
                self.at = time.perf_counter()
            self.stop_ev.wait(0.005)


def worker_code_mib() -> float:
    """Peak RSS (MiB) of a process that imported the worker's code and holds no model: what a worker holds
    before its model (the interpreter, numpy, redis-py, streamdp)."""
    # (VmHWM: getrusage's ru_maxrss keeps the forking parent's peak across exec)
    code = (
        "import streamdp.service.stream_worker; print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024


def times(push_s: float, merged_s: float, total_s: float) -> dict:
    """One end-to-end run's times (seconds from the push's start)."""
    return {"push_s": push_s, "merged_s": merged_s, "drain_s": total_s - push_s, "total_s": total_s}


# -- the plain pipeline -------------------------------------------------------------------------
def plain_codes(df: pd.DataFrame, label: str) -> tuple[np.ndarray, np.ndarray]:
    X = df.drop(columns=[label])
    cols = [
        X[c].to_numpy(np.float32)
        if pd.api.types.is_numeric_dtype(X[c])
        else pd.Categorical(X[c]).codes.astype(np.float32)
        for c in X.columns
    ]
    return np.column_stack(cols), pd.Categorical(df[label]).codes.astype(np.int64)


def plain_push(url: str, stream: str, csv: Path, label: str) -> None:
    r = redis.Redis.from_url(url)
    df = pd.read_csv(csv)
    X, y = plain_codes(df, label)
    p = r.pipeline(transaction=False)
    for i, start in enumerate(range(0, len(y), BATCH)):
        xb, yb = X[start : start + BATCH], y[start : start + BATCH]
        p.xadd(stream, {"d": msgpack.packb({"X": xb.tobytes(), "n": len(yb), "y": yb.tobytes()})})
        if i % 50 == 49:
            p.execute()
    p.execute()


def plain_consumer(url: str, stream: str, group: str, name: str, train: tuple, ready: object, go: object) -> None:
    from sklearn.ensemble import RandomForestClassifier

    X, y, depth = train  # the service model's height (its trees' depth below the stump)
    model = RandomForestClassifier(n_estimators=10, max_depth=depth, random_state=0, n_jobs=1).fit(X, y)
    n_nodes = max(t.tree_.node_count for t in model.estimators_)
    counts = np.zeros(10 * n_nodes * 2, dtype=np.int64)
    offsets = (np.arange(10) * n_nodes)[None, :]
    r = redis.Redis.from_url(url, socket_timeout=10)
    ready.set()  # type: ignore[attr-defined]
    go.wait()  # type: ignore[attr-defined]
    while True:
        got = r.xreadgroup(group, name, {stream: ">"}, count=1, block=500)
        if not got:
            break
        for msg_id, fields in got[0][1]:
            doc = msgpack.unpackb(fields[b"d"])
            xb = np.frombuffer(doc["X"], dtype=np.float32).reshape(doc["n"], -1)
            yb = np.frombuffer(doc["y"], dtype=np.int64)
            leaves = model.apply(xb) + offsets
            counts += np.bincount((leaves * 2 + yb[:, None]).ravel(), minlength=counts.size)
            r.xack(stream, group, msg_id)


def run_plain(url: str, csv: Path, label: str, train: tuple, rows: int) -> dict:
    r = redis.Redis.from_url(url)
    stream, group = f"bench-plain-{uuid.uuid4().hex[:8]}", "g"
    ctx = mp.get_context("spawn")
    try:
        r.xgroup_create(stream, group, id="0", mkstream=True)
        ready = [ctx.Event(), ctx.Event()]
        go = ctx.Event()
        procs = [
            ctx.Process(target=plain_consumer, args=(url, stream, group, f"c{i}", train, ready[i], go))
            for i in range(2)
        ]
        for p in procs:
            p.start()
        for e in ready:
            e.wait(120)
        watch = AckWatch(url, stream, group, -(-rows // BATCH))
        watch.start()
        t0 = time.perf_counter()
        plain_push(url, stream, csv, label)
        push_s = time.perf_counter() - t0
        go.set()
        for p in procs:
            p.join()
        total = time.perf_counter() - t0
        watch.stop_ev.set()
        watch.join()
        pending = r.xpending(stream, group)["pending"]
        merged = (watch.at or time.perf_counter()) - t0
        return {**times(push_s, merged, total), "pending_after": pending}
    finally:
        r.delete(stream)


# -- the service -------------------------------------------------------------------------------
def run_service(url: str, name: str, csv: Path, label: str, rows: int, checkout: Path = ROOT) -> dict:
    """One end-to-end run of the service (its CLI run from ``checkout``) on model ``name``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    watch = AckWatch(url, Keys(name).records, "workers", -(-rows // BATCH))
    watch.start()
    t0 = time.perf_counter()
    subprocess.run(
        cli("push", name, str(csv), "--label", label, "-q", "--redis-url", url), check=True, env=env, cwd=checkout
    )
    push_s = time.perf_counter() - t0
    w = subprocess.Popen(
        cli("worker", name, "--processes", "2", "--until-drained", "--redis-url", url), env=env, cwd=checkout
    )
    sampler = RssSampler(w.pid)
    sampler.start()
    code = w.wait()
    total = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"the worker pool of {name} exited with {code} (its log above says why)")
    sampler.stop_ev.set()
    sampler.join()
    watch.stop_ev.set()
    watch.join()
    parent = w.pid
    procs = [
        {
            "role": "pool parent" if p == parent else sampler.roles.get(p, "worker"),
            "pid": p,
            "peak_mib": sampler.peak[p] / 1024,
            "rss_max_mib": sampler.rss[p] / 1024,
        }
        for p in sampler.peak
    ]
    merged = (watch.at or time.perf_counter()) - t0
    return {**times(push_s, merged, total), "exit": code, "processes": procs}


def published_all(r: redis.Redis, keys: Keys, entries: int) -> bool:
    """Whether model ``keys`` has every one of ``entries`` entries merged and acked and no window holding added
    entries unreleased (the condition ``--until-drained`` exits on, read from outside)."""
    try:
        g = next(g for g in r.xinfo_groups(keys.records) if as_str(g["name"]) == "workers")
    except (redis.ResponseError, StopIteration):
        return False
    if int(g["pending"]) or int(g.get("entries-read") or 0) < entries:
        return False
    open_, rel = (int(x or 0) for x in r.hmget(keys.state, "open", "releases"))
    return not (open_ > rel and r.exists(*(keys.acc(w) for w in range(rel + 1, open_ + 1))))


def run_service_warm(url: str, name: str, csv: Path, label: str, rows: int, checkout: Path = ROOT) -> dict:
    """The service as it runs: a ``streamdp worker NAME --processes 2`` pool started (and joined) before the push,
    as the plain pipeline's consumers are; merged (every entry acked) and published (every window holding
    them released) timed from the push's start, the pool stopped after."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    r, keys, entries = connect(url), Keys(name), -(-rows // BATCH)
    w = subprocess.Popen(cli("worker", name, "--processes", "2", "--redis-url", url), env=env, cwd=checkout)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both processes have read (blocked) once: the pool has started
            got = [c for g in r.xinfo_groups(keys.records) for c in r.xinfo_consumers(keys.records, g["name"])]
            if len(got) >= 2:
                break
            time.sleep(0.05)
        watch = AckWatch(url, keys.records, "workers", entries)
        watch.start()
        t0 = time.perf_counter()
        subprocess.run(
            cli("push", name, str(csv), "--label", label, "-q", "--redis-url", url), check=True, env=env, cwd=checkout
        )
        push_s = time.perf_counter() - t0
        while not published_all(r, keys, entries) and time.perf_counter() - t0 < 600:
            time.sleep(0.005)
        total = time.perf_counter() - t0
    finally:
        w.terminate()
        w.wait(60)
    watch.stop_ev.set()
    watch.join()
    return times(push_s, (watch.at or time.perf_counter()) - t0, total)


def create_with(checkout: Path, url: str, name: str, max_lag: float | None, *extra: str) -> None:
    """``streamdp model create NAME`` at the defaults on Adult's schema (``extra``: other options), by the CLI of
    ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    schema = checkout / "streamdp" / "data" / "schemas" / "adult.json"
    lag = ["--max-lag", str(max_lag)] if max_lag is not None else []
    subprocess.run(
        cli("model", "create", name, "--schema", str(schema), "--epsilon", "1", *lag, *extra, "--redis-url", url),
        check=True,
        env=env,
        cwd=checkout,
        stdout=subprocess.DEVNULL,
    )


def e2e_runs(
    url: str,
    csv: Path,
    label: str,
    train: tuple,
    rows: int,
    repeats: int,
    max_lag: float | None,
    before: Path | None = None,
) -> dict:
    """``repeats`` more end-to-end runs of each side, interleaved (the machine is shared), each service run on a
    model created just before its push (as the first run's); with ``before`` (another checkout), ``repeats + 1``
    runs of the service from that code too ("service_before")."""
    r = connect(url)
    runs: dict = {"service": [], "plain": [], **({"service_before": []} if before else {})}
    for i in range(repeats + (1 if before else 0)):
        sides = [("service", ROOT), ("service_warm", ROOT)] if i < repeats else []
        if before:
            sides.insert(i % 2, ("service_before", before))  # which code goes first alternates
        for side, code in sides:
            name = "svcdefaults" + uuid.uuid4().hex[:8]
            try:
                create_with(code, url, name, max_lag)  # (by the side's own code: a spec another version can read)
                run = run_service_warm if side == "service_warm" else run_service
                runs.setdefault(side, []).append(run(url, name, csv, label, rows, code))
            finally:
                delete_model(r, name)
                left = list(r.scan_iter(match=Keys(name).pattern, count=1000))
                if left:
                    r.delete(*left)
        if i < repeats:
            runs["plain"].append(run_plain(url, csv, label, train, rows))
    return runs


#: The worker-memory runs beside the default model's: the smallest model (what a worker's process holds whatever
#: its model: interpreter, buffers, a step's records in flight) and a large one (Adult at height 7).
MEMORY_MODELS = {"floor (height 1)": ["--height", "1"], "height 7": ["--height", "7"]}


def worker_memory(url: str, csv: Path, label: str, rows: int, max_lag: float | None) -> dict:
    """The end-to-end run of each of :data:`MEMORY_MODELS` (a pool of 2 until drained), with its model's
    counts, structure (padded node arrays) and routing tables (the router's packed words) in MiB."""
    r = connect(url)
    out = {}
    for label_, extra in MEMORY_MODELS.items():
        name = "svcmemory" + uuid.uuid4().hex[:8]
        try:
            create_with(ROOT, url, name, max_lag, *extra)
            spec = load_spec(r, name)
            sizes = model_mib(spec)
            del spec
            out[label_] = {**sizes, "run": run_service(url, name, csv, label, rows)}
        finally:
            delete_model(r, name)
            left = list(r.scan_iter(match=Keys(name).pattern, count=1000))
            if left:
                r.delete(*left)
    return out


def model_mib(forest: Any) -> dict:
    """A model's counts, structure as a worker holds it (padded node arrays; a broadcast constant takes no memory)
    and routing tables (:attr:`.routing.ForestRouter.nbytes`), in MiB."""
    return {
        "counts_mib": forest.counts.nbytes / MiB,
        "structure_mib": sum(a.nbytes for a in forest.structure.arrays().values() if 0 not in a.strides) / MiB,
        "routing_mib": forest.structure.router().nbytes / MiB,
    }


def e2e_medians(runs: dict) -> dict:
    """Medians of each side's push, merged (every entry acked) and push-to-drained times, and their ratios to the
    plain pipeline's (``before_*_x``: the service from the other checkout)."""
    keys = ("push_s", "merged_s", "total_s")
    med = {side: {k: statistics.median(x[k] for x in got) for k in keys} for side, got in runs.items()}
    out = {**med, "runs": len(runs["service"])}
    out.update({f"{k[:-2]}_x": med["service"][k] / med["plain"][k] for k in keys})
    if "service_warm" in med:
        out.update({f"warm_{k[:-2]}_x": med["service_warm"][k] / med["plain"][k] for k in keys})
    if "service_before" in med:
        out.update({f"before_{k[:-2]}_x": med["service_before"][k] / med["plain"][k] for k in keys})
    return out


def idle_closes(url: str, name: str, seconds: float) -> dict:
    """An idle worker's window closes per minute against the windows due on the model's own schedule (its
    cadence's, as stored with its state: an idle model's windows grow), and how many it is behind before and
    after (given at most a minute to catch up first)."""
    r = connect(url)
    keys = Keys(name)
    policy, start = load_policy(r, name)
    every = policy.release_every

    def lag() -> tuple[int, int]:
        _, released, due, _ = sample(r, keys, start, every)
        return released, due

    w = subprocess.Popen(cli("worker", name, "--processes", "1", "--redis-url", url), env=ENV)
    try:
        deadline = time.monotonic() + 60  # its start and catch-up: within 3 windows of the schedule
        while (lambda x: x[1] - x[0])(lag()) > 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        (a, due_a), t0 = lag(), time.monotonic()
        time.sleep(seconds)
        (b, due_b), t1 = lag(), time.monotonic()
    finally:
        w.terminate()
        w.wait(30)
    return {
        "seconds": t1 - t0,
        "closes": b - a,
        "per_minute": (b - a) / (t1 - t0) * 60,
        "schedule_per_minute": (due_b - due_a) / (t1 - t0) * 60,
        "windows_behind_start": due_a - a,
        "windows_behind_end": due_b - b,
        "caught_up": due_a - a <= 3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--max-lag", type=float, default=None, help="the models' max_lag (default: the default cadence; 1: 1 s windows)"
    )
    ap.add_argument("--before", type=Path, default=None, help="another checkout: its service measured alongside")
    ap.add_argument("--out", default="service_defaults", help="results' file name (without suffix)")
    ap.add_argument("--e2e-repeats", type=int, default=3, help="end-to-end runs of each side, interleaved")
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--only", choices=("all", "fetch"), default="all", help="fetch: the create and fetch part alone")
    ap.add_argument("--schema", nargs="+", choices=("adult", "cat16"), default=["adult"], help="with --only fetch")
    ap.add_argument("--fetch-runs", type=int, default=3, help="with --only fetch: processes per model and code")
    args = ap.parse_args()
    if args.only == "fetch":
        from service_fetch import fetch_only  # (this script's folder)

        fetch_only(args, RESULTS)
        return
    url = args.redis_url
    r = connect(url)
    name = "svcdefaults" + uuid.uuid4().hex[:8]
    keys = Keys(name)
    ds = load("adult")
    label = ds.schema.label.name
    uptime_start = sh("uptime")
    out: dict = {"rows": args.rows, "model": name, "max_lag": args.max_lag, "before": str(args.before or "")}
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "adult.csv"
        df = adult_csv(args.rows, csv)
        del df
        train: tuple = plain_codes(pd.read_csv(csv, nrows=len(ds.y)), label)
        try:
            t0 = time.perf_counter()
            forest = create_model(r, name, ds.schema, max_lag=args.max_lag)
            out["create_s"] = time.perf_counter() - t0
            out["counts_mib"] = forest.counts.nbytes / MiB
            out["cells"] = int(np.prod(forest.shape))
            out["height"], out["trees"] = forest.height, forest.n_trees
            train = (*train, forest.height)
            out.update(model_mib(forest))
            mem = key_memory(r, keys)
            out["redis_after_create"] = {"keys": mem, "total_mib": sum(k["bytes"] for k in mem) / MiB}
            out["worker_code_mib"] = worker_code_mib()
            out["redis_after_create"]["x_counts"] = out["redis_after_create"]["total_mib"] / out["counts_mib"]
            del forest
            # right after create: workers started later first release every window due since (a catch-up)
            out["service"] = run_service(url, name, csv, label, args.rows)
            cold, steady, floor = [], [], []
            for _ in range(args.repeats):
                c = Consumer(url, name)
                t = time.perf_counter()
                c.latest()
                cold.append(time.perf_counter() - t)
                c._cached = None  # the structure held, the counts fetched again: a new version's cost
                t = time.perf_counter()
                c.latest()
                steady.append(time.perf_counter() - t)
                c.close()
                t = time.perf_counter()
                r.hget(keys.pub_model, "counts")
                floor.append(time.perf_counter() - t)
            fl = statistics.median(floor)
            out["fetch"] = {
                "cold_s": cold,
                "new_version_s": steady,
                "floor_s": floor,
                "cold_x_floor": statistics.median(cold) / fl,
                "new_version_x_floor": statistics.median(steady) / fl,
            }
            out["plain"] = run_plain(url, csv, label, train, args.rows)
            out["e2e_runs"] = e2e_runs(
                url, csv, label, train, args.rows, args.e2e_repeats - 1, args.max_lag, args.before
            )
            out["e2e_runs"]["service"].insert(0, out["service"])
            out["e2e_runs"]["plain"].insert(0, out["plain"])
            out["e2e"] = e2e_medians(out["e2e_runs"])
            out["ratio"] = out["e2e"]["total_x"]
            out["published_version_after"] = int(r.hget(keys.pub_model, "version"))
            if args.idle_s > 0:
                out["idle"] = idle_closes(url, name, args.idle_s)
            out["worker_memory"] = worker_memory(url, csv, label, args.rows, args.max_lag)
        finally:
            delete_model(r, name)
            left = list(r.scan_iter(match=keys.pattern, count=1000))  # the ledger stays after delete_model
            if left:
                r.delete(*left)
    out["uptime_start"], out["uptime_end"], out["machine"] = uptime_start, sh("uptime"), machine()
    print(json.dumps(out, indent=1))
    if not args.no_write:
        (RESULTS / f"{args.out}.json").write_text(json.dumps(out, indent=1) + "\n")
        (RESULTS / f"{args.out}.md").write_text(report(out))


def memory_lines(o: dict) -> list[str]:
    """The worker-memory table: each model's workers (a pool of 2, the same rows) above their code's baseline,
    and above the floor model's workers (what a worker process holds whatever its model), against 2 x counts +
    the structure (node arrays; and with the routing tables, the structure compiled for routing)."""
    if "worker_memory" not in o or o.get("worker_code_mib") is None:
        return []
    base = o["worker_code_mib"]
    models = {"default": {**{k: o[k] for k in ("counts_mib", "structure_mib", "routing_mib")}, "run": o["service"]}}
    models.update(o["worker_memory"])
    floor_run = next((m["run"] for k, m in models.items() if k.startswith("floor")), None)
    floor = max((w["peak_mib"] - base for w in floor_run["processes"] if w["role"] == "worker"), default=0.0)
    lines = [
        "",
        f"Worker memory: each worker's peak RSS above its code's baseline ({base:.0f} MiB: a process that imported "
        f"the worker), then above the floor model's workers' ({floor:.1f} MiB: the interpreter's heap, buffers and "
        "a step's records, whatever the model), against 2 x counts + the structure (its node arrays; then with its "
        "routing tables). A pool of 2 workers, the same rows, run until drained.",
        "",
        "| model | counts MiB | structure MiB | routing MiB | worker peak above its code, MiB | above the floor | "
        "/ (2 x counts + structure) | / (2 x counts + structure + routing) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, m in models.items():
        peaks = [w["peak_mib"] - base for w in m["run"]["processes"] if w["role"] == "worker"]
        c, st, rt = m["counts_mib"], m["structure_mib"], m["routing_mib"]
        net = [p - floor for p in peaks]
        lines.append(
            f"| {label} | {c:.1f} | {st:.1f} | {rt:.1f} | {' / '.join(f'{p:.1f}' for p in peaks)} | "
            f"{' / '.join(f'{p:.1f}' for p in net)} | "
            f"{' / '.join(f'{p / (2 * c + st):.2f}x' for p in net) if c > 0.1 else ''} | "
            f"{' / '.join(f'**{p / (2 * c + st + rt):.2f}x**' for p in net) if c > 0.1 else ''} |"
        )
    return lines


def report(o: dict) -> str:
    s, p, f, m, e = o["service"], o["plain"], o["fetch"], o["redis_after_create"], o["e2e"]
    workers = [x for x in s["processes"] if x["role"] == "worker"]
    parent = [x for x in s["processes"] if x["role"] == "pool parent"]
    lines = [
        "# The service at its defaults on Adult's schema, beside a plain pipeline",
        "",
        f"`python benchmarks/studies/service_defaults.py`: Adult's default model ({o['trees']} trees with the prior "
        f"stump, height {o['height']}, {o['cells']:,} cells, {o['counts_mib']:.1f} MiB of int64 counts), "
        f"{o['rows']:,} Adult rows (the dataset repeated).",
        "",
        "| measure | service | plain | ratio | target |",
        "|---|---|---|---|---|",
        f"| push s | {s['push_s']:.2f} | {p['push_s']:.2f} | {s['push_s'] / p['push_s']:.2f}x | |",
        f"| drain s (2 processes) | {s['drain_s']:.2f} | {p['drain_s']:.2f} | {s['drain_s'] / p['drain_s']:.2f}x | |",
        f"| push to drained, s | {s['total_s']:.2f} | {p['total_s']:.2f} | {s['total_s'] / p['total_s']:.2f}x | <= 1.7x |",
        f"| push to merged (every entry acked), s | {s['merged_s']:.2f} | {p['merged_s']:.2f} | "
        f"{s['merged_s'] / p['merged_s']:.2f}x | |",
        f"| **median of {e['runs']} interleaved runs**: push s | {e['service']['push_s']:.2f} | "
        f"{e['plain']['push_s']:.2f} | {e['push_x']:.2f}x | |",
        f"| median: push to merged, s | {e['service']['merged_s']:.2f} | {e['plain']['merged_s']:.2f} | "
        f"**{e['merged_x']:.2f}x** | |",
        f"| median: push to drained (published), s | {e['service']['total_s']:.2f} | {e['plain']['total_s']:.2f} | "
        f"**{e['total_x']:.2f}x** | <= 1.7x |",
        *(
            [
                f"| median, the pool started before the push (as the plain consumers): push / merged / "
                f"published s | {e['service_warm']['push_s']:.2f} / {e['service_warm']['merged_s']:.2f} / "
                f"{e['service_warm']['total_s']:.2f} | | {e['warm_push_x']:.2f}x / **{e['warm_merged_x']:.2f}x** / "
                f"**{e['warm_total_x']:.2f}x** | |"
            ]
            if "service_warm" in e
            else []
        ),
        *(
            [
                f"| median, the code before (`{o['before']}`): push / merged / drained s | "
                f"{e['service_before']['push_s']:.2f} / {e['service_before']['merged_s']:.2f} / "
                f"{e['service_before']['total_s']:.2f} | | {e['before_push_x']:.2f}x / {e['before_merged_x']:.2f}x / "
                f"{e['before_total_x']:.2f}x | |"
            ]
            if "service_before" in e
            else []
        ),
        f"| Redis after create, MiB | {m['total_mib']:.1f} | (counts {o['counts_mib']:.1f}) | "
        f"**{m['x_counts']:.2f}x** the counts | <= 3x |",
        f"| cold `Consumer().latest()` s (median) | {statistics.median(f['cold_s']):.2f} | "
        f"(floor {statistics.median(f['floor_s']):.2f}) | **{f['cold_x_floor']:.2f}x** the floor | <= 3x |",
        f"| new version's fetch s (median) | {statistics.median(f['new_version_s']):.2f} | "
        f"(floor {statistics.median(f['floor_s']):.2f}) | **{f['new_version_x_floor']:.2f}x** the floor | <= 1.3x |",
    ]
    budget = 2 * o["counts_mib"] + o["structure_mib"]
    base = o.get("worker_code_mib")
    for w in workers:
        above = (
            ""
            if base is None
            else f"; {w['peak_mib'] - base:.0f} above its code's {base:.0f} = **{(w['peak_mib'] - base) / budget:.2f}x**"
        )
        lines.append(
            f"| worker pid {w['pid']} peak RSS MiB | {w['peak_mib']:.0f} | | "
            f"{w['peak_mib'] / o['counts_mib']:.2f}x the counts; "
            f"{w['peak_mib'] / budget:.2f}x (2 x counts + structure){above} | "
            f"<= {budget:.0f} (2 x counts + structure {o['structure_mib']:.0f}) |"
        )
    for w in parent:
        lines.append(f"| pool parent peak RSS MiB | {w['peak_mib']:.0f} | | | holds no model |")
    if "idle" in o:
        i = o["idle"]
        lines.append(
            f"| idle worker closes / min (its schedule: {i['schedule_per_minute']:.1f} due / min) | "
            f"{i['per_minute']:.1f} | | windows behind {i['windows_behind_start']:.0f} -> "
            f"{i['windows_behind_end']:.0f} over {i['seconds']:.0f} s | every window due |"
        )
    lines += memory_lines(o)
    lines += [
        "",
        "Fetch runs (s): cold "
        + ", ".join(f"{x:.2f}" for x in f["cold_s"])
        + "; new version "
        + ", ".join(f"{x:.2f}" for x in f["new_version_s"])
        + "; floor "
        + ", ".join(f"{x:.2f}" for x in f["floor_s"]),
        "",
        "Redis keys after create: "
        + ", ".join(f"`{k['key'].split(':', 1)[1]}` {k['bytes'] / MiB:.1f} MiB" for k in m["keys"] if k["bytes"] > MiB),
        "",
        f"Machine: {o['machine']['nproc']} x {o['machine']['cpu']}, Python {o['machine']['python']}. Load: "
        f"`{o['uptime_start']}` -> `{o['uptime_end']}`.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
