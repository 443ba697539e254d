"""The last up's bootstrap receipt (launcher/cluster/receipt.py): its key names the config
as given, the cluster and this launcher; tests/test_aws_cluster.py shows a no-op up skipping
the bootstrap on it, and `--no-config-cache` not."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cluster.receipt import bootstrap_key, read_receipt, write_receipt


def test_the_key_changes_with_the_config_text_and_the_cluster() -> None:
    key = bootstrap_key("cluster_name: a\n", "a")
    assert key == bootstrap_key("cluster_name: a\n", "a")
    assert key != bootstrap_key("cluster_name: a\n# a comment\n", "a")
    assert key != bootstrap_key("cluster_name: a\n", "b")  # -n NAME: another cluster


def test_a_receipt_reads_back_and_is_absent_until_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    assert read_receipt("c") is None
    write_receipt("c", "k1")
    assert read_receipt("c") == "k1"
    write_receipt("c", "k2")
    assert read_receipt("c") == "k2" and read_receipt("other") is None


def test_the_key_changes_with_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    key = bootstrap_key("cluster_name: a\n", "a")
    monkeypatch.setattr("launcher.cluster.receipt.package_digest", lambda: "another launcher")
    assert bootstrap_key("cluster_name: a\n", "a") != key
