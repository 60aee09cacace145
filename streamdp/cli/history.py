"""``streamdp model history NAME [--last N] [--json] [--plot FILE]``: a windowed model's releases over time.

Prints (or draws, with matplotlib: ``pip install 'streamdp[plot]'``) the public history the closer keeps
(:mod:`streamdp.service.history`): per released window (numbered from 1, as in the worker's ``-v`` log lines)
its noisy record count, whether it was merged, the noise sd the release drew per count, the published counts'
noise sd per cell (every merged release's, accumulated) and the window's length. Public values only.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from streamdp.cli.common import client

__all__ = ["HELP", "history", "plot_history"]

#: ``model history``'s help text (the columns, and why a noisy record count can be negative).
HELP = (
    "a windowed model's releases over time, one line per window, numbered from 1 as in the worker's -v log. "
    "'noisy records': the window's record count with its noise added (differentially private); a window with few "
    "or no records can show a negative total, which is noise, not an error. 'release sd/cell': the noise sd that "
    "window's release drew on each count (release=window; '-' for grow and tree, which draw per node); 'published sd/cell': the noise sd on each count of the published model "
    "after it (every merged release's noise, accumulated). A window left out (merged: no) could not be told from "
    "an empty one by its noisy total, and changed nothing published."
)


def history(args: argparse.Namespace) -> int:
    """``streamdp model history``: the table (last ``--last`` windows), ``--json`` or a ``--plot`` PNG."""
    from streamdp.service.history import read_history
    from streamdp.service.registry import show_model

    r = client(args)
    info = show_model(r, args.name)  # (ModelNotFound names a missing model)
    lines = read_history(r, args.name)
    if args.plot:
        print(f"wrote {plot_history(lines, args.plot, args.name)} ({len(lines)} windows)")
        return 0
    if args.json:
        print(json.dumps(lines))
        return 0
    if not lines:
        kind = (info.get("release") or {}).get("kind")
        why = "release='batch' has no windows" if kind == "batch" else "no window released yet"
        print(f"{args.name}: no release history ({why})")
        return 0
    shown = lines[-args.last :] if args.last else lines
    print(
        "window  version  merged  released (UTC)        window (s)  noisy records  release sd/cell  published sd/cell"
    )
    for e in shown:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["time"]))
        records = "-" if e["noisy_records"] is None else f"{e['noisy_records']:,.0f}"
        own = "-" if e.get("release_sd") is None else f"{e['release_sd']:,.1f}"
        print(
            f"{e['window']:>6}  {e['version']:>7}  {'yes' if e['merged'] else 'no':>6}  {at}  "
            f"{e['length_s']:>10g}  {records:>13}  {own:>15}  {e['cell_sd']:>17,.1f}"
        )
    if len(shown) < len(lines):
        print(f"({len(lines) - len(shown)} earlier windows not shown: --last 0 shows all)")
    return 0


def plot_history(lines: list[dict[str, Any]], path: str, name: str) -> str:
    """Draw the history into a PNG at ``path``: noisy records per release (merged filled, left out hollow), the
    noise sd per cell and the window length, over time. Raises SystemExit naming the extra if matplotlib is absent.
    """
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
    rec = [(x, e["noisy_records"], e["merged"]) for x, e in zip(t, lines) if e["noisy_records"] is not None]
    kept = [(x, n) for x, n, m in rec if m]
    out = [(x, n) for x, n, m in rec if not m]
    if kept:
        axes[0].plot(*zip(*kept), "o", ms=3, color="tab:blue", label="merged")
    if out:
        axes[0].plot(*zip(*out), "o", ms=3, mfc="none", color="tab:gray", label="left out (noise only)")
    axes[0].axhline(0, color="black", lw=0.5)
    axes[0].set_ylabel("noisy records\nper release")
    if rec:
        axes[0].legend(loc="upper right", fontsize=8)
    axes[1].plot(t, [e["cell_sd"] for e in lines], drawstyle="steps-post", color="tab:red")
    axes[1].set_ylabel("noise sd per cell\n(published counts)")
    axes[2].plot(t, [e["length_s"] for e in lines], drawstyle="steps-post", color="tab:green")
    axes[2].set_ylabel("window length (s)")
    axes[2].set_xlabel("seconds since the first window in the history")
    fig.suptitle(f"model {name}: releases over time ({len(lines)} windows)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
