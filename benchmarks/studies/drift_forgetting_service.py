"""Forgetting on a drifting stream through the service: ``create_model(half_life=...)`` on a real Redis.

The drift of :mod:`benchmarks.studies.drift_forgetting` (river's ConceptDriftStream over Agrawal, 60,000 records,
a drift of width 1,000 at record 30,000; epsilon 1, 10 trees, one prior stump, height 6) pushed through the
service: ``create_model`` (``release="window"``, ``release_every=0.02``, ``cadence="fixed"``, with or without
``half_life`` in records), :class:`~streamdp.service.producer.Producer`, the stream worker's add and its window
closer, on the local Redis. One window per 1,000 records, as in the library study: the records are pushed and
added, then the closer releases the window at its end (an explicit tick at the window's end on the 0.02 s clock,
so the one-window-per-1,000-records layout does not depend on the machine's speed). Before each window's
release the published model is read back (``pub:model``, as a consumer does) and tested on the window's
records (prequential). The variants of one stream share the drawn structure (``seed``); their noise is fresh.

At every release the published counts are checked against the library's
:class:`streamdp.release.decay.DecayedCounts` over the service's own stored released deltas (rounded): the
service path is the library path on the same released deltas. Accuracy per stretch and the majority share
beside it; the library study's numbers are in drift_forgetting.json.

    PYTHONPATH=. nice -n 10 python3 benchmarks/studies/drift_forgetting_service.py [--report]
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.studies.drift_forgetting import (  # noqa: E402
    DRIFT_AT,
    EPSILON,
    FUNCTIONS,
    HEIGHT,
    N_TREES,
    NAMES,
    SCHEMA,
    SEEDS,
    WINDOW,
    N,
    majority,
    stream,
    stretches,
)
from streamdp.release.decay import DecayedCounts  # noqa: E402
from streamdp.service.connection import connect  # noqa: E402
from streamdp.service.draw_once import noise_from_bytes  # noqa: E402
from streamdp.service.forgetting import release_records  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.ledger_store import ledger_keys  # noqa: E402
from streamdp.service.merging import WorkerEntry  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.published import forest_from_counts  # noqa: E402
from streamdp.service.registry import create_model, delete_model, load_policy  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
EVERY = 0.02
HALF_LIVES = (None, 2_000, 5_000)
OUT = ROOT / "benchmarks" / "results" / "drift_forgetting_service.json"


def _add_all(w: Worker) -> None:
    """The worker's add step over every waiting entry (the closer is driven by explicit window ends)."""
    while True:
        entries = w.reader.read(w.config.batch_entries, 1)
        if not entries:
            return
        es = [WorkerEntry(e.id, e.fields, e.deliveries) for e in entries]
        for e in es:
            w._decode(e)
        w.merger.merge({e.batch.batch_id: e for e in es if e.batch is not None}, [])


def service_run(X: list[dict], y: np.ndarray, half_life: int | None, seed: int) -> tuple[np.ndarray, int]:
    """Prequential correctness per record through the service (the structure drawn from ``seed``, the same for
    every variant of a stream; the noise fresh); returns it and the windows checked against the library's decay
    of the same released deltas."""
    r = connect(URL)
    name = f"bench-drift-{uuid.uuid4().hex[:10]}"
    kw = {} if half_life is None else {"half_life": float(half_life), "half_life_unit": "records"}
    spec = create_model(
        r, name, SCHEMA, n_trees=N_TREES, height=HEIGHT, epsilon=EPSILON, release="window", release_every=EVERY,
        cadence="fixed", seed=seed, **kw,
    )  # fmt: skip
    keys = Keys.of(r, name)
    rows = [[x[a] for a in NAMES] for x in X]
    enc = SCHEMA.encode(rows, y)
    right = np.zeros(len(y), bool)
    policy, start = load_policy(r, name)
    lib = DecayedCounts(policy) if half_life is not None else None
    checked = 0
    try:
        w = Worker(r, name, block_ms=1, delta_ttl_s=600, warn_unkeyed=False)
        with Producer(r, name, batch_size=WINDOW) as p:
            for k, lo in enumerate(range(0, len(y), WINDOW), start=1):
                hi = min(lo + WINDOW, len(y))
                if k > 1:  # the published model, as a consumer reads it
                    v, rel, counts, nv = r.hmget(keys.pub_model, "version", "releases", "counts", "noise_variance")
                    model = forest_from_counts(spec, counts, v, rel, nv)
                    leaves = model.structure.apply(enc.X[lo:hi], SCHEMA.is_categorical)
                    right[lo:hi] = model.proba_from_leaves(leaves).argmax(axis=1) == y[lo:hi]
                p.push(rows[lo:hi], y[lo:hi])
                _add_all(w)
                assert w.closer.tick(start + k * EVERY + EVERY / 10) == 1
                if lib is not None:  # the library's decay over the service's stored released delta
                    delta = noise_from_bytes(r.get(keys.window_delta(k)), spec)
                    lib.update(delta, records=release_records(delta, spec))
                    got = forest_from_counts(spec, *r.hmget(keys.pub_model, "counts", "version", "releases")).counts
                    assert np.array_equal(got, np.rint(lib.counts).astype(got.dtype)), f"window {k} differs"
                    checked += 1
                r.delete(keys.window_delta(k))
    finally:
        delete_model(r, name)
        r.delete(*ledger_keys(name))
    return right, checked


def markdown(results: dict) -> str:
    """The result's table (means over the seeds), the library study's beside it, and the load."""
    lib_path = OUT.with_name("drift_forgetting.json")
    library = json.loads(lib_path.read_text())["mean_over_seeds"] if lib_path.exists() else {}
    setup = results["setup"]
    checked = sum(n for row in results["runs"] for n in row["windows_equal_to_library"].values())
    lines = [
        "# Forgetting on a drifting stream, through the service (drift_forgetting_service.json)\n",
        "Generated by `benchmarks/studies/drift_forgetting_service.py` from the JSON beside it. The drift of",
        "[drift_forgetting.md](drift_forgetting.md) (river's ConceptDriftStream over Agrawal, "
        f"{setup['records']:,} records, the drift at {setup['drift_at']:,}) pushed through the service on a real "
        f"Redis: `create_model(release='window', release_every={setup['release_every_s']}, cadence='fixed')`, with "
        "or without `half_life` in records, the Producer, the stream worker's add and its window closer; one window "
        f"per {setup['window_records']:,} records, tested before its release with the published counts "
        f"(prequential). Epsilon {setup['epsilon']:g}, {setup['n_trees']} trees, one prior stump, height "
        f"{setup['height']}; seeds {setup['seeds']} (the variants of one stream share its drawn structure).\n",
        f"The service path is the library path: at each of the {checked:,} decayed releases the published counts "
        "equalled `DecayedCounts` over the service's own stored released deltas, rounded (checked in the run).\n",
        "| drift | model | before drift (5k-30k) | 10k after drift | last 10k | overall | library study |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for drift, table in results["mean_over_seeds"].items():
        first = True
        for model, row in table.items():
            lib = library.get(drift, {}).get(model, {}).get("10k after drift")
            lib_s = "" if lib is None else f"{lib:.3f} (10k after drift)"
            name = "majority share" if model == "majority" else model
            cells = " | ".join(
                f"{row[k]:.3f}" for k in ("before drift (5k-30k)", "10k after drift", "last 10k", "overall")
            )
            lines.append(f"| {drift if first else ''} | {name} | {cells} | {lib_s} |")
            first = False
    a = results["mean_over_seeds"].get("A0->A2", {})
    if a:
        none, h2 = a["no forgetting"], a["half-life 2,000 records"]
        lines += [
            "",
            "Reading: through the service, as in the library, forgetting lifts the accuracy after the drift where the "
            f"forest learns the concept (A0->A2, 10k after drift: {none['10k after drift']:.3f} without, "
            f"{h2['10k after drift']:.3f} with a half-life of 2,000 records; last 10k {none['last 10k']:.3f} against "
            f"{h2['last 10k']:.3f}). The levels differ from the library study's by the drawn structures: here the "
            "three streams' structures come from their seeds and are shared by the variants, there each run draws "
            "its own; the published counts themselves are the library's function of the released deltas (checked "
            "at every release above).",
        ]
    lines += [
        "",
        f"Load average (1/5/15 min) {setup['load_at_start']} at the start, {results['load_at_end']} at the end; "
        f"{results['seconds']:,.0f} s.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    if "--report" in sys.argv:  # the markdown again from the stored JSON
        OUT.with_suffix(".md").write_text(markdown(json.loads(OUT.read_text())))
        return 0
    t0 = time.time()
    results: dict = {
        "setup": {
            "records": N,
            "drift_at": DRIFT_AT,
            "window_records": WINDOW,
            "release_every_s": EVERY,
            "cadence": "fixed",
            "epsilon": EPSILON,
            "n_trees": N_TREES,
            "height": HEIGHT,
            "seeds": list(SEEDS),
            "half_lives_records": [h for h in HALF_LIVES if h],
            "load_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "runs": [],
    }
    for before, after in FUNCTIONS:
        for seed in SEEDS:
            X, y = stream(seed, before, after)
            row: dict = {"functions": [before, after], "seed": seed, "majority": majority(y), "accuracy": {}}
            row["windows_equal_to_library"] = {}
            for h in HALF_LIVES:
                label = "no forgetting" if h is None else f"half-life {h:,} records"
                right, checked = service_run(X, y, h, seed)
                row["accuracy"][label] = stretches(right)
                if h is not None:
                    row["windows_equal_to_library"][label] = checked
            results["runs"].append(row)
            print(json.dumps(row), flush=True)
    summary = {}
    for before, after in FUNCTIONS:
        rows = [r for r in results["runs"] if r["functions"] == [before, after]]
        summary[f"A{before}->A{after}"] = {
            k: {s: round(float(np.mean([r["accuracy"][k][s] for r in rows])), 4) for s in rows[0]["accuracy"][k]}
            for k in rows[0]["accuracy"]
        } | {"majority": {s: round(float(np.mean([r["majority"][s] for r in rows])), 4) for s in rows[0]["majority"]}}
    results["mean_over_seeds"] = summary
    results["seconds"] = round(time.time() - t0, 1)
    results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    OUT.write_text(json.dumps(results, indent=1))
    OUT.with_suffix(".md").write_text(markdown(results))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
