"""The localhost provider with a `docker:` section: each node is a real podman container
on this machine (`--net=host`, named after its node), with real Ray inside; the autoscaler
runs on this machine's host, as it does without containers.

The image is a tiny rootfs built here (fakes/hosts/podman.py: no registry is reachable);
the software comes from this machine, mounted read-only by the test's containers.conf, in
a podman store of the test's own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.hosts.podman import (
    PODMAN,
    image_tar,
    import_args,
    podman_unavailable,
    write_engine_config,
)
from tests.cluster_helpers import LAUNCHER

IMAGE = "localhost/launcher-test/ray:1"
CONFIG = f"""
cluster_name: boxed
max_workers: 2
provider: {{type: localhost}}
docker:
  image: {IMAGE}
  container_name: ray_box
  use_podman: true
  pull_before_run: false
  run_options: ["--env MARK=from-run-options"]
available_node_types:
  head: {{node_config: {{}}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {{}}, resources: {{CPU: 1}}, min_workers: 1, max_workers: 2}}
head_node_type: head
setup_commands:
  - echo "set up in $(cat /etc/test-image)" > ~/setup.txt
"""
COUNT = 'python -c \'import ray; ray.init(); print("alive", sum(n["Alive"] for n in ray.nodes()))\''


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "podman here needs root (no subordinate ids for rootless)"
    return podman_unavailable()


class Engine:
    """podman with a store and configuration of the test's own, and the test image in it."""

    def __init__(self, root: Path) -> None:
        self.env = {
            **os.environ,
            **write_engine_config(
                root / "conf",
                graphroot=str(root / "graph"),
                runroot=str(root / "run"),
                registry="localhost",
                env={},
            ),
            "LAUNCHER_HOME": str(root / "launcher-home"),
        }
        # The limits measured to work on these machines for podman run from this box's own
        # processes (podman refuses to give a container this process's own nproc limit).
        conf = Path(self.env["CONTAINERS_CONF"])
        conf.write_text(
            re.sub(
                r"(?m)^default_ulimits = .*$",
                'default_ulimits = ["nofile=1024:20000", "nproc=1024:1024"]',
                conf.read_text(),
            )
        )
        tar = image_tar(root / "image.tar", "image one")
        with tar.open("rb") as data:
            subprocess.run(
                [PODMAN, *import_args(IMAGE)], stdin=data, env=self.env, check=True,
                capture_output=True, timeout=300,
            )  # fmt: skip

    def podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PODMAN, *args], env=self.env, capture_output=True, text=True, timeout=300, check=False
        )

    def containers(self) -> dict[str, dict[str, object]]:
        listed = self.podman("ps", "-a", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        return {c["Names"][0]: c for c in json.loads(listed.stdout or "[]")}

    def launcher(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [LAUNCHER, *args], env=env or self.env, capture_output=True, text=True, timeout=400,
            check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("localhost-podman")
    made = Engine(root)
    yield made
    made.podman("rm", "-af", "-t", "0")
    made.podman("system", "reset", "-f")
    # The overlay driver mounts its directory on itself, here in this machine's namespace:
    # unmounted, so the test's directory can be deleted.
    with open("/proc/self/mountinfo") as mounts:
        points = [line.split()[4] for line in mounts]
    for point in sorted((p for p in points if p.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


def test_each_node_is_a_container_with_ray_inside(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG)
    try:
        up = engine.launcher("up", "-y", str(path))
        assert up.returncode == 0, up.stdout + up.stderr
        boxes = engine.containers()
        assert len(boxes) == 2 and all(name.startswith("ray_box-") for name in boxes), boxes
        assert {str(c["State"]) for c in boxes.values()} == {"running"}
        assert {str(c["Image"]) for c in boxes.values()} == {IMAGE}
        # Ray runs in the containers: the head's raylet is in the head's container.
        for name in boxes:
            top = engine.podman("top", name, "comm")
            assert "raylet" in top.stdout.split(), (name, top.stdout)
        inside = engine.launcher(
            "exec", str(path), 'echo "$MARK $(cat /etc/test-image)"; cat ~/setup.txt'
        )
        assert inside.returncode == 0, inside.stdout + inside.stderr
        assert "from-run-options image one" in inside.stdout
        assert "set up in image one" in inside.stdout
        alive = engine.launcher("exec", str(path), COUNT)
        assert alive.returncode == 0, alive.stdout + alive.stderr
        assert "alive 2" in alive.stdout
        again = engine.launcher("up", "-y", str(path))
        assert again.returncode == 0, again.stdout + again.stderr
        assert engine.containers().keys() == boxes.keys()  # kept, not replaced
        status = engine.launcher("status", str(path))
        assert status.returncode == 0, status.stdout + status.stderr
    finally:
        down = engine.launcher("down", "-y", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert engine.containers() == {}


def test_without_the_engine_up_refuses_with_one_line(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG)
    bare = {**engine.env, "PATH": str(Path(sys.executable).parent)}  # no podman on it
    refused = engine.launcher("up", "-y", str(path), env=bare)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "podman is not installed here" in line and "remove the docker section" in line
    assert engine.containers() == {}
    assert not (Path(engine.env["LAUNCHER_HOME"]) / "clusters" / "boxed" / "localhost").exists()
