"""``streamdp model history NAME [--last N] [--json] [--plot FILE]``: a windowed model's releases over time.

Prints (or draws, with matplotlib: ``pip install 'streamdp[plot]'``) the public history the closer keeps
(:mod:`streamdp.service.history`): per released window (numbered from 1, as in the worker's ``-v`` log lines;
the last ``--last`` of them in every form) its scheduled end (no release time is stored), its noisy record count, whether it was merged, the noise sd the release drew per count, the published counts'
noise sd per cell (every merged release's, accumulated) and the window's length. Public values only.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from streamdp.cli.common import client

__all__ = ["HELP", "history", "plot_history"]

#: What the table shows for a noisy record count the release floored at 0 (:func:`.service.history.at_floor`), and
#: the legend printed under a table that shows one: a floored 0 is no exact count of none.
AT_FLOOR = "<= 0"
AT_FLOOR_LEGEND = (
    "the window's noisy record total came out at or below 0 and was released as 0 (noise, not a count of none)"
)

#: ``model history``'s help text (the columns, and why a noisy record count can be negative).
HELP = (
    "a windowed model's releases over time, one line per window, numbered from 1 as in the worker's -v log. "
    "'noisy records': the window's record count with its noise added (differentially private); a window with few "
    "or no records can show a negative total, which is noise, not an error. 'release sd/cell': the noise sd that "
    "window's release drew on each count (release=window; grow: on each node it released; '-' for tree, whose "
    "nodes each draw their own); 'published sd/cell': the noise sd on each count of the published model "
    "after it (every merged release's noise, accumulated). A window left out (merged: no) could not be told from "
    "an empty one by its noisy total, and changed nothing published. 'window end (UTC)': the window's scheduled end "
    "(public; the time of the release itself is not stored, and can be later). --last applies to --json and --plot "
    "too. "
    f"'{AT_FLOOR}' (release=window): {AT_FLOOR_LEGEND}."
)


def history(args: argparse.Namespace) -> int:
    """``streamdp model history``: the table (last ``--last`` windows), ``--json`` or a ``--plot`` PNG."""
    from streamdp.service.history import at_floor, read_history
    from streamdp.service.registry import show_model

    r = client(args)
    info = show_model(r, args.name)  # (ModelNotFound names a missing model)
    lines = read_history(r, args.name)
    every = len(lines)
    lines = lines[-args.last :] if args.last else lines  # (the table, --json and --plot alike)
    if args.plot:
        kind = (info.get("release") or {}).get("kind", "batch")
        print(f"wrote {plot_history(lines, args.plot, args.name, kind)} ({len(lines)} windows)")
        return 0
    if args.json:
        print(json.dumps(lines))
        return 0
    if not lines:
        kind = (info.get("release") or {}).get("kind")
        why = "release='batch' has no windows" if kind == "batch" else "no window released yet"
        print(f"{args.name}: no release history ({why})")
        return 0
    print(
        "window  version  merged  window end (UTC)      window (s)  noisy records  release sd/cell  published sd/cell"
    )
    kind = (info.get("release") or {}).get("kind", "batch")
    floored = False
    for e in lines:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["time"]))
        records = _records(e["noisy_records"], at_floor(e, kind))
        floored = floored or records == AT_FLOOR
        own = "-" if e.get("release_sd") is None else f"{e['release_sd']:,.1f}"
        print(
            f"{e['window']:>6}  {e['version']:>7}  {'yes' if e['merged'] else 'no':>6}  {at}  "
            f"{e['length_s']:>10g}  {records:>13}  {own:>15}  {e['cell_sd']:>17,.1f}"
        )
    if len(lines) < every:
        print(f"({every - len(lines)} earlier windows not shown: --last 0 shows all)")
    if floored:
        print(f"{AT_FLOOR}: {AT_FLOOR_LEGEND}")
    return 0


def _records(n: float | None, floored: bool) -> str:
    """A history line's noisy record count as the table shows it: ``-`` where a release has none,
    :data:`AT_FLOOR` where the release floored it at 0, to one decimal below 1 in size (so no noisy value
    prints as a bare ``0``), else to the record.

    >>> [_records(None, False), _records(0.0, True), _records(0.4, False), _records(-0.0, False), _records(1234.6, False)]
    ['-', '<= 0', '0.4', '-0.0', '1,235']
    """
    if n is None:
        return "-"
    if floored:
        return AT_FLOOR
    return f"{n:,.1f}" if abs(n) < 1 else f"{n:,.0f}"


def plot_history(lines: list[dict[str, Any]], path: str, name: str, kind: str = "batch") -> str:
    """Draw the history into a PNG at ``path``: noisy records per release (merged filled, left out hollow; a count
    the release floored at 0 as a downward triangle, ``kind`` the release policy), the noise sd per cell and the
    window length, over time. Raises SystemExit naming the extra if matplotlib is absent.
    """
    from streamdp.service.history import at_floor

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "streamdp: error: model history --plot needs matplotlib: pip install 'streamdp[plot]'"
        ) from None
    t0 = lines[0]["time"] if lines else 0.0
    t = [e["time"] - t0 for e in lines]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    rec = [
        (x, e["noisy_records"], e["merged"])
        for x, e in zip(t, lines)
        if e["noisy_records"] is not None and not at_floor(e, kind)
    ]
    kept = [(x, n) for x, n, m in rec if m]
    out = [(x, n) for x, n, m in rec if not m]
    floor = [x for x, e in zip(t, lines) if at_floor(e, kind)]
    if kept:
        axes[0].plot(*zip(*kept), "o", ms=3, color="tab:blue", label="merged")
    if out:
        axes[0].plot(*zip(*out), "o", ms=3, mfc="none", color="tab:gray", label="left out (noise only)")
    if floor:
        axes[0].plot(floor, [0.0] * len(floor), "v", ms=4, mfc="none", color="tab:orange", label=AT_FLOOR)
    axes[0].axhline(0, color="black", lw=0.5)
    axes[0].set_ylabel("noisy records\nper release")
    if rec or floor:
        axes[0].legend(loc="upper right", fontsize=8)
    axes[1].plot(t, [e["cell_sd"] for e in lines], drawstyle="steps-post", color="tab:red")
    axes[1].set_ylabel("noise sd per cell\n(published counts)")
    # each window over its own span, from its start (end - length) to its end
    lengths = [e["length_s"] for e in lines]
    axes[2].plot([t[0] - lengths[0], *t], [lengths[0], *lengths], drawstyle="steps-pre", color="tab:green")
    axes[2].set_ylabel("window length (s)")
    axes[2].set_xlabel("seconds since the first window in the history")
    fig.suptitle(f"model {name}: releases over time ({len(lines)} windows)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
