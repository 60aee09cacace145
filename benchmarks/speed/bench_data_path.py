"""The user's data path beside the plain way of doing the same work, in the same run (issue 14).

Rows (each pair run interleaved ``--repeat`` times; medians; ``uptime`` beside each row):

1. ``streamdp push`` of an Adult-like CSV (``--rows``, default 1 M, resampled from
   ``shared/datasets/adult``; written to a temporary folder, never committed) vs a plain
   script: ``pd.read_csv`` in chunks + XADD of envelopes of the same size. Both are
   fresh processes; wall time from start to the last XADD.
2. ``Producer.push(DataFrame)`` vs plain coding (``pd.Categorical`` codes against the
   declared values, numbers clipped) + XADD of the packed codes, in this process.
3. End to end from the CLI: ``streamdp push`` with ``streamdp worker`` processes already
   running, from the start of the push to the published model holding every batch, vs a
   plain push with plain consumer processes (XREADGROUP, unpack codes, the same
   structure's apply + tally, XACK; no noise, no commit) until every entry is acked. Under a
   release window the push starts at a uniformly drawn phase of the model's public schedule
   (the last batch waits for its window's end), so the mean over repetitions is what a user
   sees; "ratio of means" is reported beside the ratio of medians.
4. ``update`` from raw values vs apply + tally at height 8, 16 categorical attributes
   (3-5 values), epsilon 1 (noise included), CPU seconds in this process.

    python benchmarks/speed/bench_data_path.py [--redis-url URL] [--rows N] [--repeat 3]
    # writes benchmarks/results/data_path.{md,json}
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import msgpack
import numpy as np
import pandas as pd
import redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from streamdp import blob  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.tally import tally  # noqa: E402
from streamdp.records.datasets import datasets_dir, load_schema  # noqa: E402
from streamdp.records.schema import Categorical, Schema  # noqa: E402
from streamdp.service import codec  # noqa: E402
from streamdp.service.keys import GROUP, Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model, delete_model, load_policy  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
BATCH = 10_000
ADULT_COLUMNS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
]
ARITIES = [3, 4, 5] * 5 + [3]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def load_avg() -> float:
    return os.getloadavg()[0]


def make_csv(path: Path, rows: int, seed: int = 0) -> None:
    """An Adult-like CSV: rows of adult.data resampled with replacement, under a header of the schema's names."""
    src = datasets_dir() / "adult" / "adult.data"
    lines = [ln for ln in src.read_text().splitlines() if ln.strip()]
    idx = np.random.default_rng(seed).integers(0, len(lines), rows)
    with open(path, "w") as fh:
        fh.write(", ".join(ADULT_COLUMNS) + "\n")
        for s in range(0, rows, 100_000):
            fh.write("\n".join(lines[i] for i in idx[s : s + 100_000]) + "\n")


# -- the plain pipelines (also run as subprocesses: --plain-push / --plain-consume) --------------------------
def plain_push(url: str, csv: str, stream: str, payload_file: str) -> None:
    """pd.read_csv in chunks, one XADD of a same-size envelope per BATCH rows (pipelined per chunk)."""
    r = redis.Redis.from_url(url, socket_timeout=60)
    payload = Path(payload_file).read_bytes()
    for df in pd.read_csv(csv, skipinitialspace=True, chunksize=BATCH * 6):
        p = r.pipeline(transaction=False)
        for _ in range(0, len(df), BATCH):
            p.xadd(stream, {"d": payload})
        p.execute()


def plain_code(schema: Schema, df: pd.DataFrame, label: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of a DataFrame the plain way: pd.Categorical against the declared values, numbers clipped."""
    X = np.empty((len(df), schema.n_attributes))
    for j, a in enumerate(schema.attributes):
        if isinstance(a, Categorical):
            X[:, j] = pd.Categorical(df[a.name], categories=list(a.values)).codes
        else:
            X[:, j] = np.clip(df[a.name].to_numpy(dtype=np.float64), a.min, a.max)
    y = pd.Categorical(label, categories=list(schema.label.values)).codes
    return X, y.astype(np.int64)


def plain_consume(url: str, model: str, consumer: str, total: int) -> None:
    """A plain worker: XREADGROUP, unpack the codes, the model's apply + tally, XACK; until ``total`` entries acked."""
    r = redis.Redis.from_url(url, socket_timeout=60)
    keys = Keys(model)
    f = PrivateForest.from_bytes(r.get(keys.spec))
    counts = np.zeros(f.shape, dtype=np.int64)
    while True:
        resp = r.xreadgroup(GROUP, consumer, {keys.records: ">"}, count=16, block=200)
        for _, entries in resp or []:
            ids = []
            for eid, fields in entries:
                doc = msgpack.unpackb(fields[b"d"], raw=False)
                X = blob.unpack_array(doc["X"]).astype(np.float64)
                y = blob.unpack_array(doc["y"]).astype(np.int64)
                counts += tally(f.structure.apply(X, f.schema.is_categorical), y, f.shape)
                ids.append(eid)
            r.xack(keys.records, GROUP, *ids)
            r.incrby(f"{keys.prefix}:bench:acked", len(ids))
        if int(r.get(f"{keys.prefix}:bench:acked") or 0) >= total:
            return


def _drop(url: str, model: str) -> None:
    """Delete a benchmark model and its ledger (delete_model keeps ledgers on purpose; these are throwaway)."""
    delete_model(url, model)
    r = redis.Redis.from_url(url, socket_timeout=60)
    for k in list(r.scan_iter(match=f"{Keys(model).prefix}:ledger*", count=1000)):
        r.delete(k)


def _run(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t


def _reset_stream(r: redis.Redis, model: str) -> None:
    keys = Keys(model)
    r.delete(keys.records)
    r.xgroup_create(keys.records, GROUP, id="0", mkstream=True)


def median_pair(fn_a, fn_b, repeat: int) -> dict:
    a, b, loads = [], [], []
    for _ in range(repeat):
        loads.append(load_avg())
        a.append(fn_a())
        b.append(fn_b())
    ma, mb = statistics.median(a), statistics.median(b)
    return {
        "streamdp_s": a,
        "plain_s": b,
        "streamdp_median_s": ma,
        "plain_median_s": mb,
        "ratio": mb / ma,
        "ratio_of_means": statistics.mean(b) / statistics.mean(a),
        "load1": loads,
        "uptime": uptime(),
    }


# -- rows ---------------------------------------------------------------------------------------------------
def push_rows(url: str, csv: Path, rows: int, repeat: int, tmp: Path) -> tuple[dict, dict]:
    r = redis.Redis.from_url(url, socket_timeout=60)
    schema = load_schema("adult")
    model = f"bench-dp-{uuid.uuid4().hex[:8]}"
    create_model(url, model, schema, n_trees=10, height=5, epsilon=1.0)
    keys = Keys(model)
    py = [sys.executable]
    try:
        df = pd.read_csv(csv, skipinitialspace=True, nrows=BATCH)
        payload = codec.encode_batch(schema, df[schema.names], df["income"], encoded=False, on_invalid="dead-letter")
        (tmp / "payload.bin").write_bytes(payload)

        def ours() -> float:
            _reset_stream(r, model)
            t = _run(
                py
                + [
                    "-m",
                    "streamdp.cli",
                    "--redis-url",
                    url,
                    "push",
                    model,
                    str(csv),
                    "--batch-size",
                    str(BATCH),
                    "-q",
                    "--no-dedup",
                ]
            )
            assert r.xlen(keys.records) == math.ceil(rows / BATCH)
            return t

        def plain() -> float:
            _reset_stream(r, model)
            return _run(py + [__file__, "--plain-push", url, str(csv), keys.records, str(tmp / "payload.bin")])

        cli = median_pair(ours, plain, repeat)
        cli.update(rows=rows, what="streamdp push (CSV) vs pd.read_csv + XADD of same-size envelopes")
        print("push", cli, flush=True)

        frame = pd.read_csv(csv, skipinitialspace=True)
        X, label = frame[schema.names], frame["income"]

        def producer() -> float:
            _reset_stream(r, model)
            t = time.perf_counter()
            with Producer(url, model, batch_size=BATCH, dedup=False) as p:
                p.push(X, label)
            return time.perf_counter() - t

        def plain_producer() -> float:
            _reset_stream(r, model)
            t = time.perf_counter()
            c = redis.Redis.from_url(url, socket_timeout=60)
            for s in range(0, len(X), BATCH * 6):
                Xc, yc = plain_code(schema, X.iloc[s : s + BATCH * 6], label.iloc[s : s + BATCH * 6])
                p = c.pipeline(transaction=False)
                for b in range(0, len(Xc), BATCH):
                    p.xadd(
                        keys.records,
                        {
                            "d": msgpack.packb(
                                {
                                    "X": blob.pack_array(Xc[b : b + BATCH]),
                                    "y": blob.pack_array(yc[b : b + BATCH].astype("|u1")),
                                }
                            )
                        },
                    )
                p.execute()
            return time.perf_counter() - t

        prod = median_pair(producer, plain_producer, repeat)
        prod.update(rows=len(X), what="Producer.push(DataFrame) vs pd.Categorical codes + XADD")
        print("producer", prod, flush=True)
        del frame, X, label
    finally:
        _drop(url, model)
    return cli, prod


def holds_every_batch(r: redis.Redis, keys: Keys, n_batches: int) -> bool:
    """Every batch merged and published: all ``n_batches`` batch ids in ``priv:merged``, and the release
    that holds the last of them published (its score: the window with ``release="window"``, the default,
    or the version with ``"batch"``, which never exceeds the published releases). Counting releases
    alone measured the 1 s window clock (100 windows), not the data path."""
    if r.zcard(keys.merged) < n_batches:
        return False
    last = r.zrange(keys.merged, -1, -1, withscores=True)
    return int(r.hget(keys.pub_model, "releases") or 0) >= int(last[0][1])


def end_to_end(
    url: str,
    csv: Path,
    rows: int,
    repeat: int,
    tmp: Path,
    processes: int,
    height: int,
    release: str = "window",
    release_every: float = 1.0,
) -> dict:
    r = redis.Redis.from_url(url, socket_timeout=60)
    schema = load_schema("adult")
    py = [sys.executable]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    n_batches = math.ceil(rows / BATCH)
    phases: list[float] = []
    gen = random.Random(height)

    def at_a_random_phase(model: str) -> None:
        """Sleep until a uniformly drawn point of the model's public release schedule: a user's push lands
        anywhere in a window, and the last batch waits for its window's end (up to ``release_every``), so a
        fixed phase (model created, workers started, push) measured the phase, not the data path."""
        start = load_policy(r, model)[1]
        u = gen.random()
        k = math.floor((time.time() - start) / release_every) + 1
        phases.append(u)
        time.sleep(max(0.0, start + (k + u) * release_every - time.time()))

    def ours() -> float:
        model = f"bench-e2e-{uuid.uuid4().hex[:8]}"
        create_model(
            url,
            model,
            schema,
            n_trees=10,
            height=height,
            epsilon=1.0,
            release=release,
            release_every=None if release == "batch" else release_every,
        )
        keys = Keys(model)
        w = subprocess.Popen(
            py + ["-m", "streamdp.cli", "--redis-url", url, "worker", model, "--processes", str(processes)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.0)  # workers up (they block on the empty stream)
            if release != "batch":
                at_a_random_phase(model)
            t = time.perf_counter()
            subprocess.run(
                py
                + ["-m", "streamdp.cli", "--redis-url", url, "push", model, str(csv), "--batch-size", str(BATCH), "-q"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            while not holds_every_batch(r, keys, n_batches):
                time.sleep(0.02)  # polling the published model: the measured condition
            return time.perf_counter() - t
        finally:
            w.terminate()
            w.wait(60)
            _drop(url, model)

    def plain() -> float:
        model = f"bench-e2e-{uuid.uuid4().hex[:8]}"
        create_model(url, model, schema, n_trees=10, height=height, epsilon=1.0)
        keys = Keys(model)
        df = pd.read_csv(csv, skipinitialspace=True, nrows=BATCH)
        Xc, yc = plain_code(schema, df[schema.names], df["income"])
        (tmp / "codes.bin").write_bytes(codec.encode_batch(schema, Xc, yc, encoded=True))
        ws = [
            subprocess.Popen(py + [__file__, "--plain-consume", url, model, f"c{i}", str(n_batches)], env=env)
            for i in range(processes)
        ]
        try:
            time.sleep(1.0)
            t = time.perf_counter()
            subprocess.run(
                py + [__file__, "--plain-push", url, str(csv), keys.records, str(tmp / "codes.bin")],
                env=env,
                check=True,
            )
            for w in ws:
                w.wait(600)
            return time.perf_counter() - t
        finally:
            for w in ws:
                if w.poll() is None:
                    w.kill()
            _drop(url, model)

    out = median_pair(ours, plain, repeat)
    cells = int(np.prod(PrivateForest.create(schema, 10, height, seed=1).shape))
    out.update(
        rows=rows,
        processes=processes,
        height=height,
        push_phases=phases,
        what=f"end to end: CLI push + {processes} `streamdp "
        f"worker` processes (Adult, 10 trees, height {height}: {cells:,} padded cells, epsilon 1, "
        + (f"{release_every:g} s release windows" if release == "window" else f"release={release!r}")
        + (", the push started at a uniformly drawn phase of the schedule" if release != "batch" else "")
        + ") until the model holds every batch vs plain push + plain consumers (apply + tally, XACK) until every entry is acked",
    )
    print("e2e", out, flush=True)
    return out


def update_vs_tally(repeat: int, n: int = 100_000) -> dict:
    schema = Schema.from_dict(
        {
            "attributes": [
                {"name": f"a{j}", "type": "categorical", "values": list(range(a))} for j, a in enumerate(ARITIES)
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    f = PrivateForest.create(schema, 10, 8, epsilon=1.0, seed=1, max_cells=2**27)
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(a, size=n).astype(np.float64) for a in ARITIES])
    y = rng.integers(2, size=n)
    enc = schema.encode(X, y)
    f.update(X[:20_000], y[:20_000])  # warm the routing tables

    def cpu(fn):
        def run() -> float:
            t = time.process_time()
            fn()
            return time.process_time() - t

        return run

    out = median_pair(
        cpu(lambda: f.update(X, y)),
        cpu(lambda: tally(f.structure.apply(enc.X, schema.is_categorical), enc.y, f.shape)),
        repeat,
    )
    parts = median_pair(cpu(lambda: schema.encode(X, y)), cpu(lambda: f._noise(np.zeros(f.shape, np.int64))), repeat)
    out.update(
        rows=n,
        cells=int(np.prod(f.shape)),
        encode_cpu_s=parts["streamdp_median_s"],
        noise_cpu_s=parts["plain_median_s"],
        what=f"update from raw values, {n:,} records per update (epsilon 1, noise included) vs apply + tally; CPU s",
    )
    print("update", out, flush=True)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--plain-push":
        return plain_push(*sys.argv[2:6])
    if len(sys.argv) > 1 and sys.argv[1] == "--plain-consume":
        return plain_consume(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--only", default="push,e2e,update")
    ap.add_argument("--heights", type=int, nargs="+", default=[4, 6], help="end-to-end model heights")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--release", default="window", help="the stream models' release policy in the end-to-end rows")
    ap.add_argument("--release-every", type=float, default=1.0, help="their window length (release='window')")
    args = ap.parse_args()
    only = set(args.only.split(","))
    res: dict = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, numpy {np.__version__}, pandas {pd.__version__}",
        "uptime_before": uptime(),
        "rows": args.rows,
        "repeat": args.repeat,
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        csv = tmp / "adult_like.csv"
        if only & {"push", "e2e"}:
            make_csv(csv, args.rows)
        if "push" in only:
            res["push_cli"], res["producer"] = push_rows(args.redis_url, csv, args.rows, args.repeat, tmp)
        if "e2e" in only:
            for h in args.heights:
                res[f"end_to_end_h{h}"] = end_to_end(
                    args.redis_url,
                    csv,
                    args.rows,
                    args.repeat,
                    tmp,
                    args.processes,
                    h,
                    args.release,
                    args.release_every,
                )
    if "update" in only:
        res["update"] = update_vs_tally(args.repeat, 100_000)
        res["update_1m"] = update_vs_tally(args.repeat, 1_000_000)
    res["uptime_after"] = uptime()
    if not args.no_write:
        old = RESULTS / "data_path.json"
        if old.exists():  # rows not rerun (another --only or --heights) are kept from the last run
            res = {**json.loads(old.read_text()), **{k: v for k, v in res.items()}}
        write(res)


def means(row: dict) -> str:
    """The ratio of mean times (rows written before it was recorded: from their raw times)."""
    return f"{statistics.mean(row['plain_s']) / statistics.mean(row['streamdp_s']):.2f}"


def write(res: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "data_path.json").write_text(json.dumps(res, indent=1))
    goals = {
        "push_cli": 0.7,
        "producer": 0.8,
        **{k: 0.6 for k in sorted(res) if k.startswith("end_to_end")},
        "update": 0.7,
        "update_1m": 0.7,
    }
    lines = [
        "# The data path beside the plain way (benchmarks/speed/bench_data_path.py)",
        "",
        f"Machine: {res['machine']}; shared with other jobs. Before: `{res['uptime_before']}`; "
        f"after: `{res['uptime_after']}`.",
        "",
        f"Each pair run interleaved {res['repeat']} times; medians. Ratio = plain time / streamdp time "
        "(1.0: as fast as the plain way). A row's load column is from its own run (a partial rerun keeps the "
        "rows of earlier runs: see `uptime` in `data_path.json`).",
        "",
        "| path | records | streamdp | plain | ratio | ratio of means | goal | load (1-min avg at each run; uptime after) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, g in goals.items():
        if key not in res:
            continue
        row = res[key]
        n = row["rows"]
        rate = (
            (lambda s: f"{n / s / 1e3:,.0f} k/s ({s:.2f} s)")
            if not key.startswith("update")
            else (lambda s: f"{n / s / 1e6:.2f} M/s ({s:.3f} CPU s)")
        )
        lines.append(
            f"| {row['what']} | {n:,} | {rate(row['streamdp_median_s'])} | {rate(row['plain_median_s'])} | "
            f"**{row['ratio']:.2f}** | {means(row)} | >= {g} {'met' if row['ratio'] >= g else 'missed'} | "
            f"{', '.join(f'{x:.1f}' for x in row['load1'])}; `{row['uptime'].split('load average:')[-1].strip()}` |"
        )
    for key in ("update", "update_1m"):
        if key in res:
            u = res[key]
            lines += [
                "",
                f"update, {u['rows']:,} records: encode {u['encode_cpu_s'] * 1e3:.0f} ms, one release's noise "
                f"({u['cells']:,} padded cells) {u['noise_cpu_s'] * 1e3:.0f} ms, apply + tally "
                f"{u['plain_median_s'] * 1e3:.0f} ms (CPU, medians).",
            ]
    lines += ["", "Raw numbers: `data_path.json` next to this file."]
    (RESULTS / "data_path.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
