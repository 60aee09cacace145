"""The CLI's shared helpers."""

from __future__ import annotations


def test_cli_redacts_passwords():
    from streamdp.cli.common import redact

    assert redact("redis://worker:s3cret@host:6380/0") == "redis://worker:***@host:6380/0"
    assert redact("rediss://:pw@h/1") == "rediss://:***@h/1"
    assert redact("redis://localhost:6379/0") == "redis://localhost:6379/0"
