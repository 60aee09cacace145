"""The UCI datasets of the papers, with their declared schemas.

Schemas live in ``streamdp/data/schemas/*.json``; they were written from each
dataset's ``.names`` documentation (and, for Adult's numeric attributes, from
public domain knowledge such as "age is within 0..100"), never from the data.
The data files ship inside the package, gzipped, under ``streamdp/data/uci``
(UCI Machine Learning Repository, CC BY 4.0; citations in
``streamdp/data/uci/README.md``). ``$STREAMDP_DATASETS`` names another folder
of the same layout to read instead.

>>> ds = load("congressional-voting")
>>> ds.X.shape, ds.schema.n_classes
((435, 16), 2)
"""

from __future__ import annotations

import gzip
import hashlib
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from streamdp.records.schema import Schema

__all__ = [
    "Dataset",
    "load",
    "parse",
    "load_schema",
    "DATASETS",
    "datasets_dir",
    "dataset_digest",
    "pinned_lines",
    "DatasetChanged",
]

# name -> (files relative to the datasets folder, label column, separator)
DATASETS: dict[str, tuple[tuple[str, ...], int, str]] = {
    "nursery": (("nursery/nursery.data",), -1, ","),
    "mushroom": (("mushroom/agaricus-lepiota.data",), 0, ","),
    "congressional-voting": (("congressional-voting/house-votes-84.data",), 0, ","),
    "tic-tac-toe": (("tic-tac-toe/tic-tac-toe.data",), -1, ","),
    "adult": (("adult/adult.data", "adult/adult.test"), -1, ", "),
}


@dataclass
class Dataset:
    """A dataset's records (raw declared values) with its schema."""

    name: str
    schema: Schema
    X: np.ndarray  # object array (n, n_attributes) of raw declared values, schema order
    y: np.ndarray  # object array of labels

    def to_csv(self, path: str | os.PathLike) -> Path:
        """Write the records as a CSV file with a header (the attributes in schema order, then the label column
        under the schema's label name): what ``streamdp push NAME FILE --label LABEL`` reads. Returns the path.

        >>> import tempfile
        >>> ds = load("congressional-voting")
        >>> out = ds.to_csv(Path(tempfile.mkdtemp()) / "votes.csv")
        >>> out.read_text().splitlines()[0].split(",")[-2:]
        ['export-administration-act-south-africa', 'party']
        """
        import csv

        out = Path(path)
        with open(out, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow([*self.schema.names, self.schema.label.name])
            w.writerows([*x, y] for x, y in zip(self.X, self.y))
        return out


def load_schema(name: str) -> Schema:
    """The declared schema of a dataset."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    text = resources.files("streamdp").joinpath("data", "schemas", f"{name}.json").read_text()
    import json

    return Schema.from_dict(json.loads(text))


def datasets_dir() -> Path | None:
    """The folder named by ``$STREAMDP_DATASETS``, if set; else None (the bundled copies are read)."""
    env = os.environ.get("STREAMDP_DATASETS")
    return Path(env) if env else None


def load(name: str, *, drop_missing: bool = False, path: str | os.PathLike | None = None) -> Dataset:
    """Load a dataset as raw values with its schema.

    ``drop_missing`` removes rows holding ``?`` (Adult: 45,222 rows remain,
    as in Friedman & Schuster). Elsewhere ``?`` is a declared value.
    """
    return parse(name, _file_lines(name, path), drop_missing=drop_missing)


def parse(name: str, file_lines: list[list[str]], *, drop_missing: bool = False) -> Dataset:
    """:func:`load` of lines already read (:func:`pinned_lines`: the bytes checked are the bytes parsed)."""
    schema = load_schema(name)
    _, label_col, sep = DATASETS[name]
    rows = []
    for line in (ln for lines in file_lines for ln in lines):
        line = line.strip()
        if not line or line.startswith("|"):
            continue
        parts = line.split(sep)
        rows.append(parts)
    arr = np.array(rows, dtype=object)
    y = arr[:, label_col]
    X = np.delete(arr, label_col if label_col >= 0 else arr.shape[1] - 1, axis=1)
    if name == "adult":
        y = np.array([v.rstrip(".") for v in y], dtype=object)
        for j, a in enumerate(schema.attributes):
            if a.to_dict()["type"] == "numeric":
                X[:, j] = X[:, j].astype(np.float64)
    if drop_missing:
        keep = ~np.any(X == "?", axis=1)
        X, y = X[keep], y[keep]
    return Dataset(name, schema, X, y)


class DatasetChanged(ValueError):
    """A known dataset's content here is not the one pinned (:func:`pinned_lines`)."""


def dataset_digest(name: str) -> str:
    """SHA-256 of a known dataset's content as :func:`load` would read it here (``FileNotFoundError`` where it
    cannot): a batch job pins it at submit, and its worker reads the dataset only if it finds the same bytes."""
    return _digest(_file_lines(name, None))


def pinned_lines(name: str, digest: str) -> list[list[str]]:
    """A known dataset's lines, read once, if their :func:`dataset_digest` is ``digest`` (else
    :class:`DatasetChanged`); :func:`parse` reads these very lines, so nothing swapped in after the check is read."""
    lines = _file_lines(name, None)
    if _digest(lines) != digest:
        raise DatasetChanged(f"dataset {name!r} here is not the one pinned (sha256 {digest[:16]}... expected)")
    return lines


def _digest(file_lines: list[list[str]]) -> str:
    h = hashlib.sha256()
    for lines in file_lines:
        h.update("\n".join(lines).encode())
        h.update(b"\0")
    return h.hexdigest()


def _file_lines(name: str, path) -> list[list[str]]:
    files, _, _ = DATASETS[name]
    return [_read_lines(name, f, path) for f in files]


def _read_lines(name: str, rel: str, path) -> list[str]:
    base = Path(path) if path is not None else datasets_dir()
    if base is None:
        packed = resources.files("streamdp").joinpath("data", "uci", *f"{rel}.gz".split("/"))
        return gzip.decompress(packed.read_bytes()).decode().splitlines()
    if not (base / rel).is_file():
        raise FileNotFoundError(f"dataset {name!r} needs {rel} under {base}; not found")
    return (base / rel).read_text().splitlines()


def skewed(n: int = 6000, seed: int = 0) -> Dataset:
    """Synthetic 4-class data with a 70% majority class and a known answer (for estimation tests).

    Six categorical attributes ``a0..a5`` (arities 3, 4, 3, 2, 4, 3), uniform
    and independent. The label is ``c0`` unless a rule fires (first match):
    ``a0 = 2 and a1 < 2``: ``c1`` with probability 0.8; ``a2 = 0 and a3 = 1``:
    ``c2`` with probability 0.6; ``a4 = 3 and a5 < 2``: ``c3`` with probability
    0.6 (one uniform draw per record decides). Class shares about 0.71 / 0.13 /
    0.08 / 0.07 (c0 is the majority); the Bayes rule (predict the rule's class
    where it fires) scores about 0.86.

    >>> ds = skewed(2000, seed=1)
    >>> round(float((ds.y == "c0").mean()), 1)
    0.7
    """
    arities = (3, 4, 3, 2, 4, 3)
    schema = Schema.from_dict(
        {
            "attributes": [
                {"name": f"a{j}", "type": "categorical", "values": list(range(k))} for j, k in enumerate(arities)
            ],
            "label": {"name": "y", "values": ["c0", "c1", "c2", "c3"]},
        }
    )
    rng = np.random.default_rng(seed)
    X = np.stack([rng.integers(k, size=n) for k in arities], axis=1)
    u = rng.random(n)
    y = np.zeros(n, dtype=np.int64)
    r3 = (X[:, 4] == 3) & (X[:, 5] < 2) & (u < 0.6)
    r2 = (X[:, 2] == 0) & (X[:, 3] == 1) & (u < 0.6)
    r1 = (X[:, 0] == 2) & (X[:, 1] < 2) & (u < 0.8)
    for rule, c in ((r3, 3), (r2, 2), (r1, 1)):  # the first rule wins: assign in reverse order
        y[rule] = c
    labels = np.array(["c0", "c1", "c2", "c3"], dtype=object)
    return Dataset("skewed", schema, X.astype(object), labels[y])
