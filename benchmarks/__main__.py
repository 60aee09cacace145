"""``python -m benchmarks list | run [IDS] [--all | --smoke] | report``: see :mod:`benchmarks`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks import registry, report, runner


def _list() -> int:
    for s in sorted(registry.load().values(), key=lambda s: (s.kind, s.id)):
        smoke = " (smoke)" if s.smoke is not None else ""
        print(f"{s.id:32s} {s.kind:7s}{smoke:8s} {s.what.splitlines()[0] if s.what else ''}")
    return 0


def _run(args: argparse.Namespace) -> int:
    scenarios = registry.load()
    if args.smoke:
        ids = args.ids or sorted(s.id for s in scenarios.values() if s.smoke is not None)
    elif args.all:
        ids = sorted(s.id for s in scenarios.values() if args.kind in (None, s.kind))
    else:
        ids = args.ids
    if not ids:
        print("name scenarios to run (python -m benchmarks list), or --all or --smoke", file=sys.stderr)
        return 2
    unknown = [i for i in ids if i not in scenarios]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)} (python -m benchmarks list)", file=sys.stderr)
        return 2
    no_smoke = [i for i in ids if args.smoke and scenarios[i].smoke is None]
    if no_smoke:
        print(f"no smoke variant: {', '.join(no_smoke)} (only speed scenarios have one)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (None if args.smoke else runner.RESULTS)
    bounds = runner.tolerances() if args.smoke and not args.write_tolerances else {}
    failures, docs = [], []
    t0 = time.perf_counter()
    for i in ids:
        doc = runner.run(scenarios[i], smoke=args.smoke)
        docs.append(doc)
        fig = doc["figures"]
        line = f"{i}: ratio {fig['ratio']:.3f} to {fig['baseline']}" if "ratio" in fig else f"{i}: {json.dumps(fig)}"
        print(line + f"  (load {doc['load_before'][0]} -> {doc['load_after'][0]})", flush=True)
        if out is not None:
            runner.write(doc, out)
        if doc["kind"] == "script" and fig.get("exit_code"):
            failures.append(f"{i}: exit code {fig['exit_code']}")
        if args.smoke and not args.write_tolerances:
            msg = runner.check(doc, bounds)
            if msg:
                failures.append(msg)
    if args.write_tolerances:
        runner.write_tolerances({d["id"]: d["figures"]["ratio"] for d in docs}, args.headroom)
        print(f"wrote {runner.TOLERANCES} ({args.headroom}x the measured ratios)")
    print(f"{len(ids)} scenario(s) in {time.perf_counter() - t0:.1f} s")
    for msg in failures:
        print("REGRESSION " + msg if args.smoke else "FAILED " + msg, file=sys.stderr)
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the scenarios by id")
    r = sub.add_parser("run", help="run scenarios; results/<id>.json")
    r.add_argument("ids", nargs="*", help="scenario ids (python -m benchmarks list)")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--all", action="store_true", help="every scenario (hours: the studies are long)")
    g.add_argument("--smoke", action="store_true", help="the speed scenarios' small variants against tolerances.json")
    r.add_argument("--kind", choices=registry.KINDS, help="with --all: only this kind")
    r.add_argument("--out", help="results folder (default benchmarks/results; --smoke writes none unless given)")
    r.add_argument("--write-tolerances", action="store_true", help="with --smoke: set the bounds from this run")
    r.add_argument("--headroom", type=float, default=1.6, help="bound = headroom x measured ratio (default 1.6)")
    p = sub.add_parser("report", help="markdown tables (and plots with matplotlib) from results/*.json")
    p.add_argument("ids", nargs="*", help="scenario ids (default: every result written by the runner)")
    p.add_argument("--readme", action="store_true", help="only rewrite README.md's Performance table from the results")
    args = ap.parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "run":
        if args.write_tolerances and not args.smoke:
            ap.error("--write-tolerances needs --smoke")
        return _run(args)
    if args.readme:
        from benchmarks import headlines

        changed = headlines.update_readme()
        print(f"README.md's Performance table {'rewritten' if changed else 'already current'}")
        return 0
    return report.main(args.ids)


if __name__ == "__main__":
    sys.exit(main())
