"""The service's Redis keys (fakeredis)."""

from __future__ import annotations

import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service.keys import Keys, check_name  # noqa: E402


# -- keys / codec -------------------------------------------------------------------
def test_keys_share_the_hash_tag():
    k = Keys("votes")
    for key in (
        k.spec,
        k.pub_model,
        k.pub_events,
        k.records,
        k.state,
        k.merged,
        k.dead,
        k.stats,
        k.pub_version(3),
        k.delta("abc"),
    ):
        assert key.startswith("sdp:{votes}:")
    assert ":pub:" in k.pub_model and ":priv:" in k.records and ":priv:" in k.delta("x")
    for bad in ("", "a{b}", "a*", "a:b", "x" * 65, "-x", None):
        with pytest.raises(ValueError):
            check_name(bad)
