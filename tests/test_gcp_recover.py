"""A recovering run on GCP, end to end: `submit --recover --start --stop` against the fake GCE
(fakes/gce/server.py), whose instances are real SSH hosts running real Ray (fakes/gce/hosts.py).
Mid-run the head instance is deleted (`kill-random-node --head --hard`); the supervisor
brings up a new head instance, keeps the worker instance (its Ray started again against the
new head, no new machine), starts the driver again, which resumes from the run's storage,
and `--stop` leaves no instance behind."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.gce.server import PROJECT
from fakes.hosts.ssh import isolation_unavailable, ray_start_commands
from tests.cluster_helpers import start, wait_for
from tests.gcp_clusters import GcpCluster, running_gcp_cluster
from tests.test_gcp_cluster import NODE

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

NAME = "gcp-recover"
# Ray's GCS listens on every address: a port of its own (not Ray's default 6379), so another
# cluster's GCS on this machine is never taken for this one's.
START_RAY = ray_start_commands(num_cpus=1).replace("6379", "6479")
CONFIG = (
    f"""
cluster_name: {NAME}
max_workers: 1
idle_timeout_minutes: 5
provider:
  type: gcp
  region: us-west1
  availability_zone: us-west1-a
  project_id: {PROJECT}
  use_internal_ips: true
  allow_ssh_from: [127.0.0.0/8]
auth:
  ssh_user: root
available_node_types:
  head:
    node_config: {NODE}
    resources: {{CPU: 1}}
    max_workers: 0
  worker:
    node_config: {NODE}
    resources: {{CPU: 1}}
    min_workers: 1
    max_workers: 1
head_node_type: head
"""
    + START_RAY
)

STEPS = 30
# The driver: counts steps, keeping its count in the run's storage, and resumes from it.
# Each attempt first waits for its two Ray nodes (after a recovery the driver starts as
# soon as the new head is up, while the kept worker rejoins) and says which it sees
# (address -> node id). The first attempt steps slowly, so that the head is lost mid-run;
# the next ones quickly.
DRIVER = """
import json, os, time
import ray

storage = os.environ["LAUNCHER_STORAGE_PATH"]
attempt = int(os.environ["LAUNCHER_RUN_ATTEMPT"])
ray.init()
deadline = time.monotonic() + 300
while True:
    alive = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
    if len(alive) >= 2 or time.monotonic() > deadline:
        break
    time.sleep(0.5)
print(f"attempt {attempt} on {json.dumps(alive)}", flush=True)
path = os.path.join(storage, "count.json")
kept = json.load(open(path)) if os.path.exists(path) else {"count": 0, "resumed": []}
count, resumed = kept["count"], kept["resumed"]
if count:
    print(f"resumed at {count}", flush=True)
    resumed.append(count)
while count < STEPS:
    time.sleep(1.0 if attempt == 1 else 0.05)
    count += 1
    with open(path + ".partial", "w") as f:
        json.dump({"count": count, "resumed": resumed}, f)
    os.replace(path + ".partial", path)
print(f"done at {count}", flush=True)
""".replace("STEPS", str(STEPS))


@pytest.fixture
def gcp(tmp_path: Path) -> Iterator[GcpCluster]:
    with running_gcp_cluster(tmp_path, CONFIG, name=NAME) as cluster:
        yield cluster


def _count(storage: Path) -> int:
    try:
        return int(json.loads((storage / "count.json").read_text())["count"])
    except (OSError, ValueError, KeyError):
        return 0


def _nodes_seen(output: str, attempt: int) -> dict[str, str]:
    """The Ray nodes (address -> node id) attempt `attempt` of the driver saw."""
    found = re.search(rf"attempt {attempt} on (\{{.*\}})", output)
    assert found, output[-5000:]
    nodes: dict[str, str] = json.loads(found.group(1))
    return nodes


def _of_kind(gcp: GcpCluster, kind: str) -> list[str]:
    return sorted(
        i.name
        for i in gcp.instances()
        if i.labels.get("launcher-node-kind") == kind and i.status == "RUNNING"
    )


def test_a_run_survives_its_head_instance_deleted_keeping_its_worker(
    gcp: GcpCluster, shared_dir: Path, tmp_path: Path
) -> None:
    storage = shared_dir
    script = tmp_path / "counter.py"
    script.write_text(DRIVER)
    process = start(
        "submit", str(gcp.path), str(script), "--start", "--stop", "--recover",
        "--recover-storage", str(storage), env=gcp.env,
    )  # fmt: skip
    try:
        wait_for(
            lambda: _count(storage) >= 2 or process.poll() is not None,
            300,
            "the driver's second step",
        )
        assert process.poll() is None, process.communicate()[0][-5000:]
        (old_head,) = _of_kind(gcp, "head")
        workers = _of_kind(gcp, "worker")
        assert len(workers) == 1
        (head_ip,) = [i.ip for i in gcp.instances() if i.name == old_head]
        (worker,) = [i for i in gcp.instances() if i.name == workers[0]]
        killed = gcp.run("kill-random-node", str(gcp.path), "--head", "--hard", "-y")
        assert killed.returncode == 0, killed.stdout + killed.stderr
        assert f"Terminated head {old_head}" in killed.stdout, killed.stdout
        assert old_head not in {i.name for i in gcp.instances()}  # deleted from GCE
        deleted = gcp.server.calls("compute.instances.delete")
        assert {c.call.params["instance"] for c in deleted} == {old_head}
        assert _count(storage) < STEPS  # the head was lost mid-run
        output, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output[-5000:]
    assert f"head {old_head} lost" in output, output[-5000:]

    # The driver resumed from its storage on the new head, the kept worker's Ray with it.
    counted = json.loads((storage / "count.json").read_text())
    assert counted["count"] == STEPS
    assert counted["resumed"] and min(counted["resumed"]) > 0, counted
    first, second = (_nodes_seen(output, n) for n in (1, 2))
    assert set(first) == {head_ip, worker.ip}
    assert len(second) == 2 and worker.ip in second  # the new head and the kept worker
    # The worker's Ray was started again, against the new head: a new Ray node.
    assert second[worker.ip] != first[worker.ip]

    runs = gcp.run("jobs", "list", "--json", str(gcp.path))
    assert runs.returncode == 0, runs.stderr
    (ended,) = json.loads(runs.stdout)
    assert ended["state"] == "succeeded" and ended["attempts"] == 2, ended
    (detail,) = ended["recoveries_detail"]
    assert detail["lost_head"] == old_head
    assert detail["new_head"] and detail["new_head"] != old_head
    assert detail["new_head_type"] == "head"
    assert list(detail["kept_workers"]) == workers  # the same instance, no new one
    # Every instance the run had is gone: --stop took the cluster down.
    assert gcp.server.instances() == []
    made = {c.call.body["name"] for c in gcp.server.calls("compute.instances.insert")}
    assert made == {old_head, *workers, detail["new_head"]}  # no new worker was bought
