"""A run's storage path is checked on the cluster before the run starts: writable from the
head, and shared by every node. One real localhost cluster (a head and one worker, each with
a home of its own) serves the whole module."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from launcher.cluster.head import HeadSession, connect
from launcher.config.loader import load_config
from launcher.errors import LauncherError, UsageError
from launcher.runs.storage import check_storage, verdict
from tests.cluster_helpers import kill_cluster, run

NAME = "tstorage"
CONFIG = (
    f"cluster_name: {NAME}\n"
    "max_workers: 1\n"
    "provider: {type: localhost}\n"
    "available_node_types:\n"
    "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
    "  worker: {node_config: {}, resources: {CPU: 1}, min_workers: 1, max_workers: 1}\n"
    "head_node_type: head\n"
)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadSession]:
    root = tmp_path_factory.mktemp("storage-cluster")
    path = root / "cluster.yaml"
    path.write_text(CONFIG)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAUNCHER_HOME", str(root / "launcher-home"))
        # Every node's Ray reaches the test's S3 (moto) with these.
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        try:
            up = run("up", "-y", str(path), timeout=300)
            assert up.returncode == 0, up.stdout + up.stderr
            yield connect(load_config(path))
        finally:
            run("down", "-y", str(path), timeout=120)
            kill_cluster(NAME)


def _probes(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".launcher-probe-")]


def test_a_shared_absolute_directory_passes_and_the_probe_is_removed(
    session: HeadSession, tmp_path: Path
) -> None:
    storage = tmp_path / "shared"
    storage.mkdir()
    (storage / "kept.txt").write_text("the user's")
    line = check_storage(session, str(storage))
    assert line == f"storage {storage} is shared by the head and 1 worker and writable"
    assert [p.name for p in storage.iterdir()] == ["kept.txt"]
    # A path that did not exist yet: the directories the check made are gone again.
    deeper = tmp_path / "new" / "results"
    assert "shared by the head and 1 worker" in check_storage(session, str(deeper))
    assert not (tmp_path / "new").exists()


def test_a_home_path_is_refused_naming_the_worker(session: HeadSession) -> None:
    (worker,) = session.provider.workers()
    with pytest.raises(UsageError) as refused:
        check_storage(session, "~/results")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("storage path ~/results is not shared by every node: ")
    assert f"the worker at {worker.ip} (Ray node " in message
    assert "does not see what the head wrote there" in message
    assert "s3://BUCKET/PATH" in message and "--recover-storage" in message
    # Nothing is left in the head's home: not the probe, nor the directory it made.
    assert not Path(session.runner.remote_path("~/results")).exists()


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    """A real S3 endpoint (moto's server) on this machine, with a bucket `runs`."""
    boto3 = pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        _host, port = server.get_host_and_port()
        endpoint = f"127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
        client.create_bucket(Bucket="runs")
        yield endpoint
    finally:
        server.stop()


def test_an_s3_uri_every_node_reaches_passes_and_the_probe_is_removed(
    session: HeadSession, s3_endpoint: str
) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=f"http://{s3_endpoint}", region_name="us-east-1")
    client.put_object(Bucket="runs", Key="results/kept.txt", Body=b"the user's")
    uri = f"s3://runs/results?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    line = check_storage(session, uri)
    assert line == f"storage {uri} is shared by the head and 1 worker and writable"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="runs")["Contents"]]
    assert "results/kept.txt" in keys
    assert not [key for key in keys if ".launcher-probe-" in key]


def test_a_uri_no_node_shares_is_refused(session: HeadSession) -> None:
    # pyarrow's mock:// file system lives in each process's memory: shared by no one.
    with pytest.raises(UsageError, match=r"^storage path mock:///results is not shared by"):
        check_storage(session, "mock:///results")


def test_a_path_under_a_file_is_refused_as_not_writable(
    session: HeadSession, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    storage = tmp_path / "a-file" / "results"
    with pytest.raises(UsageError) as refused:
        check_storage(session, str(storage))
    message = str(refused.value)
    assert message.startswith(f"storage path {storage} is not writable from the head (")
    assert "NotADirectoryError" in message and "--recover-storage" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever a directory's mode says")
def test_a_directory_the_user_cannot_write_is_refused(session: HeadSession, tmp_path: Path) -> None:
    storage = tmp_path / "read-only"
    storage.mkdir(mode=0o500)
    try:
        with pytest.raises(UsageError) as refused:
            check_storage(session, str(storage))
    finally:
        storage.chmod(0o700)
    message = str(refused.value)
    assert message.startswith(f"storage path {storage} is not writable from the head (")
    assert "PermissionError" in message
    assert list(storage.iterdir()) == []


class _Untouchable:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the cluster was touched ({name})")


@pytest.mark.parametrize("path", ["results", "./results", "results/run-1", "", "s3:/bucket"])
def test_a_relative_path_is_refused_without_touching_the_cluster(path: str) -> None:
    with pytest.raises(UsageError) as refused:
        check_storage(cast(HeadSession, _Untouchable()), path)
    message = str(refused.value)
    assert "give an absolute path or a URI such as s3://bucket/path" in message
    assert "\n" not in message


def test_what_cannot_be_checked_is_said_not_refused() -> None:
    report = {"unchecked": "pyarrow is not importable (No module named 'pyarrow') on the head"}
    line = verdict("s3://bucket/runs", report)
    assert line.startswith("cannot check storage s3://bucket/runs: pyarrow is not importable")


def test_a_worker_whose_file_the_head_does_not_see_is_named() -> None:
    node = {"ip": "10.0.0.7", "id": "ab" * 28, "host": "w7", "head": False}
    report = {"problems": [{"kind": "head-unseen", "node": node, "detail": ""}], "workers": 1}
    with pytest.raises(
        UsageError, match=re.escape("the head does not see what the worker at 10.0.0.7")
    ):
        verdict("/mnt/runs", report)
    stuck = {"problems": [{"kind": "unanswered", "node": node, "detail": ""}], "workers": 1}
    with pytest.raises(LauncherError, match="did not answer in time") as failed:
        verdict("/mnt/runs", stuck)
    assert not isinstance(failed.value, UsageError)  # the check failed, not the path
