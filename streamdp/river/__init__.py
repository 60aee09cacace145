"""River classifiers backed by the private forest, locally or through the live service.

* :class:`PrivateForestClassifier`: a ``river.base.MiniBatchClassifier`` that
  buffers labelled records and, every ``batch_size`` records, releases that
  batch's noised leaf-count delta into its :class:`~streamdp.forest.PrivateForest`
  (Jagannathan's update). Batches are disjoint, so the model stays
  ``epsilon``-DP however long it learns (parallel composition); every release
  adds fresh noise, so the number of releases matters for accuracy.
* :class:`ServiceClassifier`: predicts with the latest model published by the
  streamdp service and pushes what it learns to the service as labelled
  records, so ``river.evaluate.progressive_val_score`` measures the live
  service end to end.

Privacy notes
-------------
* ``seed=None`` (the default) is the only private setting: the structure is
  drawn from a CSPRNG and the noise comes from an AES-CTR keystream keyed from ``os.urandom``, through
  :class:`streamdp.privacy.SecureRandom`.
* ``seed=<int>`` makes the model reproducible for tests and river's checks:
  the structure *and the noise* are drawn from seeded generators, the forest is
  marked ``private=False`` and a ``NotPrivateWarning`` is issued. **A seeded
  model is NOT private.**
* Predictions only ever use released (noised) counts. The records waiting in
  the buffer are raw data: they are not used until their batch is released,
  but they are kept in memory and would be included in a pickle of the model.
  Call :meth:`PrivateForestClassifier.flush` before pickling/sharing a model
  (it releases the partial batch with fresh noise).
* Missing values (a record without one of the schema's attributes):
  a missing numeric value is replaced by the midpoint of its declared range (a
  public constant), in learning and prediction alike. A record whose
  categorical value is missing or undeclared is dropped by ``learn_one`` (the
  decision depends on that record only) and, in prediction, descends every
  branch of that split (each tree averages the leaves it reaches, each by its
  share of the combinations of the unknown values). A value that
  is present but undeclared (``1`` where ``True`` is declared, a misspelt
  category) or not a number is warned about when learned (:class:`UndeclaredValueWarning`
  from ``learn_one``/``learn_many``, naming the attribute and the value's type, never
  the value; prediction treats it as unknown, without a warning); the warning
  comes from raw data and is outside the privacy guarantee (keep it out of
  anything released). A first record (or frame) whose keys name none of the
  schema's attributes is warned about once (:class:`UnknownAttributesWarning`,
  naming the schema's attributes, never other keys: they can be data), since its numbers would all be range midpoints.
* Growing trees: on a schema whose attributes are all categorical the forest's
  trees start from their roots and deepen release by release
  (``PrivateForestClassifier(grow=None)``).
* A record key may be the attribute name or, for schemas whose attribute names
  are digit strings (river's LED uses integer keys), the integer.
* Batch size: every release adds fresh noise, so the noise on a cell grows
  like ``sqrt(#releases)``; ``batch_size=1000`` is the default, reached by
  doubling from ``first_batch=100`` so short streams get a model early (why
  these sizes: docs/decisions/004-river-batch-and-window-sizes.md). ``window=K`` keeps
  only the last ``K`` releases (follows drift, caps the noise).
* Prior phase: with a prior stump (the default), the first ``first_batch``
  records are released to the stump alone at the whole epsilon (batches of 4,
  8, 16, ... records at epsilon 1), so the model predicts a measured class
  prior from its 5th record on, as a running majority does; the class prior
  weighs each of the stump's releases by its size and noise
  (:func:`streamdp.estimation.release_prior`). ``prior_records=0`` turns the
  phase off.
* River's mini-batch API (``learn_many`` / ``predict_many`` /
  ``predict_proba_many`` with pandas) is vectorised and gives what the
  one-record methods give.
* Schemas for river's datasets: :func:`streamdp.river.schemas.schema_for`.

Layout (one classifier per module, as in river's ``river/tree/``):
``forest`` (:class:`PrivateForestClassifier`), ``window``
(:class:`PrivateWindowClassifier`), ``service`` (:class:`ServiceClassifier`),
``forest_view`` (predictions from a forest's released counts, shared by the
forest and the service classifiers), ``encoding`` (the record encoder, on
:class:`~streamdp.records.schema.Schema`'s rules), ``schemas`` (declared schemas
for river's datasets), ``uci`` (the shared UCI datasets as river streams) and
``inference`` (a schema learned from data, which leaks: :class:`PrivacyLeakWarning`).

Package name: this package is ``streamdp.river`` and imports the library with
absolute imports (``import river.base``), which is unambiguous as long as the
``streamdp/`` folder itself is not on ``sys.path``. Its doctests run with
``python -m pytest`` (``--doctest-modules`` is configured), not ``python -m
doctest streamdp/river/forest.py`` (that puts ``streamdp/river/`` first on the
path).

>>> from streamdp.river.schemas import stagger_schema
>>> from river import datasets
>>> model = PrivateForestClassifier(stagger_schema(), n_trees=5, epsilon=1.0, batch_size=100)
>>> for x, y in datasets.synth.STAGGER(seed=1).take(300):
...     model.learn_one(x, y)
>>> model.n_releases  # the prior phase (stumps only: 4, 8, 16, 32, 40 records), then 100 and 100
7
>>> p = model.predict_proba_one({"size": 0, "color": 0, "shape": 0})
>>> sorted(p) == [0, 1] and abs(sum(p.values()) - 1) < 1e-9
True
"""

from __future__ import annotations

from streamdp.river.encoding import UndeclaredValueWarning, UnknownAttributesWarning
from streamdp.river.forest import PrivateForestClassifier
from streamdp.river.inference import PrivacyLeakWarning
from streamdp.river.service import ServiceClassifier
from streamdp.river.window import PrivateWindowClassifier

__all__ = [
    "PrivateForestClassifier",
    "PrivateWindowClassifier",
    "ServiceClassifier",
    "PrivacyLeakWarning",
    "UndeclaredValueWarning",
    "UnknownAttributesWarning",
]
