"""The unit of privacy from the command line (real Redis): model create --privacy-id, push with the id column,
a worker, model show."""

from __future__ import annotations

import csv
import math
from importlib import resources

import numpy as np
import pytest

from streamdp.cli import main
from streamdp.records.datasets import load
from streamdp.service.connection import connect
from streamdp.service.keys import Keys
from streamdp.service.published import counts_from_bytes
from streamdp.service.registry import create_model, load_spec, show_model
from tests.conftest import purge_name

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.redis,
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
]
DS = load("congressional-voting")
SCHEMA = str(resources.files("streamdp").joinpath("data", "schemas", "congressional-voting.json"))


def test_model_create_says_the_unit_and_a_person_model_counts_k_per_person(
    redis_url, unique_name, tmp_path, capsys, monkeypatch
):
    key = tmp_path / "noise.key"
    key.write_bytes(bytes(range(64)))
    key.chmod(0o600)
    monkeypatch.setenv("STREAMDP_NOISE_KEY_FILE", str(key))
    u = ["--redis-url", redis_url]
    plain = unique_name + "p"
    try:
        assert main(u + ["model", "create", plain, "--schema", SCHEMA, "--trees", "2", "--height", "2",
                         "--epsilon", "1"]) == 0  # fmt: skip
        out = capsys.readouterr().out
        assert "unit of privacy: a record" in out
    finally:
        main(u + ["model", "delete", plain])
        purge_name(connect(redis_url), plain)  # (the ledger a delete keeps)
    name = unique_name
    # short windows: the worker run below waits until the window holding the last records is released
    args = ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "2", "--epsilon", "1",
            "--release", "window", "--privacy-id", "user", "--max-records-per-id", "3",
            "--release-every", "0.2", "--max-lag", "1"]  # fmt: skip
    assert main(u + args) == 0
    out = capsys.readouterr().out
    assert "unit of privacy: a person (column 'user'): at most 3 records" in out
    # the merge bar, said at creation (a person model's is K times a record model's): the show's own figure
    bar = show_model(connect(redis_url), name)["merge_bar"]
    assert f"a release is merged once its noisy record total stands above {bar:,.0f} (3 sd" in out
    assert main(u + ["model", "delete", name]) == 0
    purge_name(connect(redis_url), name)
    # the same model with exact counts, to check the bound (tests only: the service refuses epsilon=inf)
    create_model(redis_url, name, DS.schema, n_trees=2, height=2, epsilon=math.inf, not_private=True,
                 release="window", privacy_id="user", max_records_per_id=3, release_every=0.2, max_lag=1.0)  # fmt: skip
    data = tmp_path / "people.csv"
    with open(data, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["user", *DS.schema.names, "party"])
        for i in range(100):
            w.writerow([f"p{i % 10}", *DS.X[i], DS.y[i]])
        w.writerow(["", *DS.X[100], DS.y[100]])  # no id: dropped
    capsys.readouterr()
    assert main(u + ["push", name, str(data)]) == 0  # the record without its person is said at push, not only later
    out = capsys.readouterr().out
    assert "1 invalid record goes to the dead-letter stream (first: line 102: privacy id 'user' missing)" in out, out
    assert main(u + ["worker", name, "--until-drained"]) == 0
    assert main(u + ["model", "show", name]) == 0
    assert "unit            a person (column 'user'): at most 3 records per person" in capsys.readouterr().out
    r = connect(redis_url)
    spec = load_spec(r, name)
    pub = counts_from_bytes(r.hget(Keys(name).pub_model, "counts"), spec)
    assert int(pub[0].sum()) == 30  # tree 0 counts each of the 10 persons' first 3 records, nothing more
    assert math.isinf(spec.epsilon) and np.all(pub >= 0)


def test_a_person_model_states_its_epsilon_per_person_and_per_record_and_needs_a_key(
    redis_url, unique_name, tmp_path, capsys, monkeypatch
):
    from streamdp.service.ledger_store import RedisLedger

    u = ["--redis-url", redis_url]
    args = ["model", "create", unique_name, "--schema", SCHEMA, "--trees", "2", "--height", "2", "--epsilon", "1",
            "--release", "window", "--privacy-id", "user", "--max-records-per-id", "10"]  # fmt: skip
    monkeypatch.delenv("STREAMDP_NOISE_KEY_FILE", raising=False)
    try:
        assert main(u + args) == 2  # refused before anything is charged, saying how to make a key
        err = capsys.readouterr().err
        assert "head -c 32 /dev/urandom > noise.key && chmod 600 noise.key" in err and "nothing was charged" in err
        assert RedisLedger(connect(redis_url)).spent(unique_name)[0] == 0.0
        key = tmp_path / "noise.key"
        key.write_bytes(bytes(range(64)))
        key.chmod(0o600)
        monkeypatch.setenv("STREAMDP_NOISE_KEY_FILE", str(key))
        assert main(u + args) == 0
        said = "epsilon 1 per person (0.1 per record, K=10)"
        assert said in capsys.readouterr().out
        assert main(u + ["model", "list"]) == 0
        assert f"epsilon={said[8:]}" in capsys.readouterr().out
        assert main(u + ["model", "show", unique_name]) == 0
        assert f"epsilon, delta  {said[8:]}, 0" in capsys.readouterr().out
    finally:
        main(u + ["model", "delete", unique_name])
