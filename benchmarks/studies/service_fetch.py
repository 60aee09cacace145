"""One model's Redis memory after ``model create`` and its consumers' fetch times, measured with one checkout's code.

A model is created at the defaults on Adult's schema (``--schema adult``) or on 16 categorical attributes of 3-5
values (``--schema cat16``, ``--height 10``: the large model of issue 34), and the keys' ``MEMORY USAGE`` read.
Then a version with noisy counts is published the way a window release publishes one (``pub:model``'s ``version``,
``releases`` and ``counts``: counts of every leaf drawn at random, the padding zero), and, ``--repeats`` times:
a cold ``Consumer().latest()`` (a new consumer), a new version's fetch (the same consumer, its cached forest
dropped: the structure held, the counts fetched again) and the floor, an ``HGET`` of the published counts, as
``service_defaults.py`` measures them; then a new version's fetch and the floor again while the previous
version (or read) is still held, as a consumer's caller holds it (``*_held``: a read into fresh pages, where the
first two may reuse the pages just freed).
Every key made is deleted. Prints one JSON document.

    python benchmarks/studies/service_fetch.py --schema adult [--code /another/checkout]

``--code``: the checkout whose ``streamdp`` is measured (default: this one); ``service_defaults.py --only fetch``
runs this script on two checkouts, interleaved.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _code() -> Path:
    """``--code``'s checkout, read before ``streamdp`` is imported."""
    args = sys.argv[1:]
    return Path(args[args.index("--code") + 1]).resolve() if "--code" in args else Path(__file__).resolve().parents[2]


CODE = _code()
sys.path.insert(0, str(CODE))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import machine, sh  # noqa: E402
from benchmarks.speed.idle_schedule import cat16  # noqa: E402
from streamdp.records.datasets import load_schema  # noqa: E402
from streamdp.service.connection import connect  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.published import counts_to_bytes  # noqa: E402
from streamdp.service.registry import create_model, delete_model  # noqa: E402

MiB = 2**20


def measure(url: str, schema_name: str, height: int | None, repeats: int) -> dict:
    r = connect(url)
    schema = load_schema("adult") if schema_name == "adult" else cat16()
    name = "svcfetch" + uuid.uuid4().hex[:8]
    keys = Keys(name)
    try:  # which structure reader ran (format 3's; earlier code reads no "bfs" layout)
        from streamdp.forest import layout

        reader = "C kernel" if layout._KERNEL is not None else "numpy"
    except ImportError:
        reader = "none"
    out: dict = {"schema": schema_name, "code": str(CODE), "bfs_reader": reader}
    try:
        t = time.perf_counter()
        forest = create_model(r, name, schema, height=height)
        out["create_s"] = time.perf_counter() - t
        out.update(height=forest.height, trees=forest.n_trees, cells=int(np.prod(forest.shape)))
        out["counts_mib"] = forest.counts.nbytes / MiB
        mem = {
            k.decode().split(":", 2)[2]: (r.memory_usage(k, samples=0) or 0) / MiB
            for k in sorted(r.scan_iter(match=keys.pattern, count=1000))
        }
        out["redis_after_create"] = {"keys": mem, "total_mib": sum(mem.values())}
        out["redis_after_create"]["x_counts"] = out["redis_after_create"]["total_mib"] / out["counts_mib"]
        out["spec_bytes"] = len(r.get(keys.spec))
        c = Consumer(url, name)
        t = time.perf_counter()
        c.latest()
        out["cold_v0_s"] = time.perf_counter() - t
        c.close()
        # version 1 as a window release publishes it: counts of every leaf, the padding zero
        rng = np.random.default_rng(0)
        noisy = rng.integers(-3, 60, size=forest.shape, dtype=np.int64) * forest.real_cells
        r.hset(keys.pub_model, mapping={"version": 1, "releases": 1, "counts": counts_to_bytes(noisy)})
        del noisy, forest
        cold, new, floor, new_held, floor_held = [], [], [], [], []
        for _ in range(repeats):  # as service_defaults.py measures them
            c = Consumer(url, name)
            t = time.perf_counter()
            assert c.latest().version == 1
            cold.append(time.perf_counter() - t)
            c._cached = None  # the structure held, the counts fetched again: a new version's cost
            t = time.perf_counter()
            c.latest()
            new.append(time.perf_counter() - t)
            t = time.perf_counter()
            r.hget(keys.pub_model, "counts")
            floor.append(time.perf_counter() - t)
            # the same while the previous version (or read) is still held, as a consumer's caller holds it
            prev = c.latest()
            c._cached = None
            t = time.perf_counter()
            cur = c.latest()
            new_held.append(time.perf_counter() - t)
            c.close()
            del prev, cur
            prev = r.hget(keys.pub_model, "counts")
            t = time.perf_counter()
            cur = r.hget(keys.pub_model, "counts")
            floor_held.append(time.perf_counter() - t)
            del prev, cur
        med = statistics.median
        out["fetch"] = {
            "cold_s": cold,
            "new_version_s": new,
            "floor_s": floor,
            "new_held_s": new_held,
            "floor_held_s": floor_held,
            "cold_x_floor": med(cold) / med(floor),
            "new_version_x_floor": med(new) / med(floor),
            "new_held_x_floor_held": med(new_held) / med(floor_held),
        }
    finally:
        delete_model(r, name)
        left = list(r.scan_iter(match=keys.pattern, count=1000))  # the ledger stays after delete_model
        if left:
            r.delete(*left)
    return out


def fetch_only(args: argparse.Namespace, results: Path) -> None:
    """``service_defaults.py --only fetch``: this script on each schema, ``--fetch-runs`` processes of each code
    (this checkout's, with its compiled structure reader and with numpy's, and ``--before``'s), interleaved;
    writes ``results``/service_defaults_fetch.{md,json}."""
    script = Path(__file__).resolve()
    here = Path(__file__).resolve().parents[2]
    codes = [("after", here, []), ("after, numpy reader", here, ["--numpy-reader"])] + (
        [("before", args.before.resolve(), [])] if args.before else []
    )
    out: dict = {"uptime_start": sh("uptime"), "machine": machine(), "runs": []}
    for schema in args.schema:
        for i in range(args.fetch_runs):
            for side, code, flags in codes if i % 2 == 0 else codes[::-1]:  # which code goes first alternates
                cmd = [sys.executable, str(script), *flags, "--schema", schema, "--code", str(code), "--redis-url"]
                got = subprocess.run(
                    [*cmd, args.redis_url, "--repeats", str(args.repeats)], capture_output=True, text=True, check=True
                )
                run = {"side": side, "uptime": sh("uptime"), **json.loads(got.stdout.strip().splitlines()[-1])}
                out["runs"].append(run)
                f = run["fetch"]
                print(
                    f"{schema} {side}: redis {run['redis_after_create']['x_counts']:.2f}x, cold "
                    f"{f['cold_x_floor']:.2f}x, new version {f['new_version_x_floor']:.2f}x (held: "
                    f"{f['new_held_x_floor_held']:.2f}x) the floor",
                    flush=True,
                )
    out["uptime_end"] = sh("uptime")
    out["summary"] = fetch_summary(out["runs"])
    if not args.no_write:
        (results / "service_defaults_fetch.json").write_text(json.dumps(out, indent=1) + "\n")
        (results / "service_defaults_fetch.md").write_text(fetch_report(out))
    print(fetch_report(out))


def fetch_summary(runs: list[dict]) -> list[dict]:
    """Per schema and code: medians over the runs (each run's ratios are its medians over its repeats)."""
    rows = []
    for schema in dict.fromkeys(r["schema"] for r in runs):
        for side in dict.fromkeys(r["side"] for r in runs):
            got = [r for r in runs if r["schema"] == schema and r["side"] == side]
            if not got:
                continue
            med = statistics.median
            rows.append(
                {
                    "schema": schema,
                    "side": side,
                    "runs": len(got),
                    "height": got[0]["height"],
                    "counts_mib": med(r["counts_mib"] for r in got),
                    "spec_mib": med(r["spec_bytes"] for r in got) / MiB,
                    "redis_mib": med(r["redis_after_create"]["total_mib"] for r in got),
                    "redis_x": med(r["redis_after_create"]["x_counts"] for r in got),
                    "floor_s": med(med(r["fetch"]["floor_s"]) for r in got),
                    "cold_s": med(med(r["fetch"]["cold_s"]) for r in got),
                    "new_s": med(med(r["fetch"]["new_version_s"]) for r in got),
                    "cold_x": med(r["fetch"]["cold_x_floor"] for r in got),
                    "new_x": med(r["fetch"]["new_version_x_floor"] for r in got),
                    "floor_held_s": med(med(r["fetch"]["floor_held_s"]) for r in got),
                    "new_held_s": med(med(r["fetch"]["new_held_s"]) for r in got),
                    "new_held_x": med(r["fetch"]["new_held_x_floor_held"] for r in got),
                    "cold_v0_s": med(r["cold_v0_s"] for r in got),
                    "create_s": med(r["create_s"] for r in got),
                }
            )
    return rows


def fetch_report(o: dict) -> str:
    lines = [
        "# Redis after create and a consumer's fetch, at the defaults",
        "",
        "`python benchmarks/studies/service_defaults.py --only fetch --schema adult cat16 --before ...`: each model "
        "created at `model create`'s defaults (adult: Adult's schema, the budgeted draw; cat16: 16 categorical "
        "attributes of 3-5 values at height 10, released `grow` by default), Redis's `MEMORY USAGE` of its keys "
        "read, then a version of noisy counts published as a window release publishes it and fetched: cold (a new "
        "`Consumer().latest()`), a new version's (the structure held), the floor (`HGET` of the published counts), "
        "as `service_defaults.py` measures them; then a new version's fetch and the floor while the previous "
        "version (or read) is still held ('held': reads into fresh pages). Each run is its own process; 'after' "
        "(this branch) and 'before' (`--before`) alternate. Medians over runs of each run's median over its repeats.",
        "",
        "| model | code | runs | height | counts MiB | spec MiB | Redis after create MiB | x counts (<= 3) | "
        "floor s | cold s | cold x floor (<= 3) | new version s | new x floor (<= 1.3) | held: floor s | "
        "held: new version s | held: new x floor | create s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in o["summary"]:
        lines.append(
            f"| {r['schema']} | {r['side']} | {r['runs']} | {r['height']} | {r['counts_mib']:.1f} | "
            f"{r['spec_mib']:.2f} | {r['redis_mib']:.1f} | **{r['redis_x']:.2f}x** | {r['floor_s']:.4f} | "
            f"{r['cold_s']:.4f} | **{r['cold_x']:.2f}x** | {r['new_s']:.4f} | **{r['new_x']:.2f}x** | "
            f"{r['floor_held_s']:.4f} | {r['new_held_s']:.4f} | {r['new_held_x']:.2f}x | {r['create_s']:.2f} |"
        )
    lines += [
        "",
        "Runs (ratios to each run's floor; load at the run's end): "
        + "; ".join(
            f"{r['schema']} {r['side']} cold {r['fetch']['cold_x_floor']:.2f}x new "
            f"{r['fetch']['new_version_x_floor']:.2f}x held {r['fetch']['new_held_x_floor_held']:.2f}x "
            f"(load {r['uptime'].split('average:')[-1].strip()})"
            for r in o["runs"]
        ),
        "",
        f"Machine: {o['machine']['nproc']} x {o['machine']['cpu']}, Python {o['machine']['python']}. Load: "
        f"`{o['uptime_start']}` -> `{o['uptime_end']}`.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--schema", choices=("adult", "cat16"), default="adult")
    ap.add_argument("--height", type=int, default=None, help="default: the model create default (cat16: 10)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--code", default=None, help="the checkout whose streamdp is measured")
    ap.add_argument("--numpy-reader", action="store_true", help="the structure read by numpy, not the C kernel")
    args = ap.parse_args()
    if args.numpy_reader:
        from streamdp.forest import layout

        layout._KERNEL = None
    height = args.height if args.height is not None or args.schema == "adult" else 10
    print(json.dumps(measure(args.redis_url, args.schema, height, args.repeats)))


if __name__ == "__main__":
    main()
