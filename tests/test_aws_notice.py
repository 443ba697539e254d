"""AWS's two-minute spot interruption notice, end to end against moto with instances as real
SSH hosts and a fake instance metadata service: the spot worker's watcher
(launcher/providers/notice_watch.py) sees the notice and reports it through Ray; the head's
autoscaler launches the on-demand fallback at once and stops the noticed node's Ray before
AWS takes the machine; the reclaim itself then counts as the same preemption."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fakes.aws.server import interrupt_spot, tag
from fakes.hosts.ssh import isolation_unavailable
from launcher.providers.notice_watch import parse_notice, read_notice
from tests.aws_clusters import AwsCluster, aws_config, running_cluster
from tests.cluster_helpers import wait_for


class Metadata:
    """A fake instance metadata service on 127.0.0.1: under /ip/<instance IP>/, IMDSv2's
    token and `spot/instance-action` (404 until `notice` is given for that IP)."""

    def __init__(self) -> None:
        self.notices: dict[str, str] = {}
        self.asked: set[str] = set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _reply(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                ok = self.path.endswith("/latest/api/token")
                self._reply(200 if ok else 404, "token" if ok else "")

            def do_GET(self) -> None:
                _, _, ip, rest = self.path.split("/", 3)
                outer.asked.add(ip)
                if rest != "latest/meta-data/spot/instance-action" or ip not in outer.notices:
                    self._reply(404, "Not Found")
                elif self.headers.get("X-aws-ec2-metadata-token") != "token":
                    self._reply(401, "")
                else:
                    self._reply(200, outer.notices[ip])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def notice(self, ip: str, at: float) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
        self.notices[ip] = json.dumps({"action": "terminate", "time": stamp})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_watcher_reads_an_imdsv2_notice() -> None:
    metadata = Metadata()
    try:
        base = f"{metadata.url}/ip/10.0.0.9"
        assert read_notice(base) is None  # 404: no notice
        metadata.notice("10.0.0.9", 1_800_000_000.0)
        assert read_notice(base) == 1_800_000_000.0
        assert read_notice("http://127.0.0.1:9") is None  # nothing answers: no notice
    finally:
        metadata.close()
    assert parse_notice('{"action": "stop", "time": "2026-11-26T01:02:03Z"}') == 1795654923.0
    assert parse_notice("<html>") is None


CONFIG = aws_config(
    """\
  head:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A]}
    resources: {CPU: 1}
    max_workers: 0
  spot:
    node_config:
      InstanceType: m5.large
      ImageId: AMI
      SubnetIds: [SUBNET_A]
      InstanceMarketOptions: {MarketType: spot}
    resources: {CPU: 1}
    min_workers: 1
    max_workers: 1
  ondemand:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A]}
    resources: {CPU: 1}
    max_workers: 2
""",
    extra="metadata: {launcher: {fallbacks: {spot: [ondemand]}}}\n",
)


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[tuple[AwsCluster, Metadata]]:
    reason = isolation_unavailable()
    if reason is not None:
        pytest.skip(reason)
    metadata = Metadata()

    def point_at_metadata(host: Any) -> None:
        with (host.home / ".aws" / "config").open("a") as config:
            config.write(f"ec2_metadata_service_endpoint = {metadata.url}/ip/{host.ip}\n")

    try:
        with running_cluster(tmp_path, CONFIG, on_boot=point_at_metadata) as cluster:
            yield cluster, metadata
    finally:
        metadata.close()


def _monitor(aws: AwsCluster) -> list[str]:
    return aws.run("monitor", "--no-follow", "--lines", "400", str(aws.path)).stdout.splitlines()


def test_a_spot_notice_launches_the_fallback_and_moves_off_before_aws_takes_the_machine(
    aws: tuple[AwsCluster, Metadata],
) -> None:
    cluster, metadata = aws
    up = cluster.run("up", "-y", str(cluster.path))
    assert up.returncode == 0, up.stdout + up.stderr
    (spot,) = [i for i in cluster.instances("running") if tag(i, "launcher-node-type") == "spot"]
    spot_id, spot_ip = spot["InstanceId"], spot["PrivateIpAddress"]
    wait_for(lambda: spot_ip in metadata.asked, 60, "the spot worker's watcher to ask")
    metadata.notice(spot_ip, time.time() + 40)
    lines: list[str] = []

    def acted() -> bool:
        nonlocal lines
        lines = _monitor(cluster)
        return any(f"{spot_id}: Ray stopped" in line for line in lines)

    wait_for(acted, 60, "the autoscaler to act on the notice")
    wait_for(
        lambda: any(
            tag(i, "launcher-node-status") == "up-to-date"
            for i in cluster.instances("running")
            if tag(i, "launcher-node-type") == "ondemand"
        ),
        120,
        "the on-demand fallback up",
    )
    text = "\n".join(lines)
    assert f"{spot_id} (spot): reclaim notice" in text, text
    assert "launch 1 x ondemand" in text or "falling back to ondemand" in text, text
    # AWS takes the machine: the same preemption, answered once; the fallback stays.
    interrupt_spot(cluster.server, spot_id, cluster.hosts)

    def answered() -> bool:
        nonlocal lines
        lines = _monitor(cluster)
        return any(f"terminate {spot_id}: preempted" in line for line in lines)

    wait_for(answered, 60, "the autoscaler to answer the reclaim")
    ondemand = [
        i for i in cluster.instances("running") if tag(i, "launcher-node-type") == "ondemand"
    ]
    assert len(ondemand) == 1, ondemand  # not launched a second time for the reclaim
