"""The launcher's page in a real browser (Debian's chromium, driven by Playwright) against a
real localhost Ray cluster: it lists the cluster, its plot of nodes grows when demand
arrives, a spot reclaim shows up, and the cluster shows as gone once taken down."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_helpers import env_with, kill_cluster, run, start

sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium")

NAME = "webpage"
CONFIG = f"""\
cluster_name: {NAME}
max_workers: 2
idle_timeout_minutes: 5
provider: {{type: localhost}}
available_node_types:
  head: {{node_config: {{}}, resources: {{CPU: 1}}, max_workers: 0}}
  spot: {{node_config: {{simulated_spot: true}}, resources: {{CPU: 2}}, min_workers: 0, max_workers: 2}}
head_node_type: head
"""
JOB = """\
import ray, time
ray.init()
@ray.remote(num_cpus=2)
def hold():
    time.sleep(600)
ray.get([hold.remote() for _ in range(2)])
"""
WAIT_MS = 180_000


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[tuple[Path, str, dict[str, str]]]:
    env = env_with(LAUNCHER_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    config = tmp_path / "cluster.yaml"
    config.write_text(CONFIG)
    server = start("dashboard", "--no-browser", "--port", "0", "--interval", "0.5", env=env)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "?token=" in line, line
        url = line.split()[3]
        yield config, url, env
    finally:
        server.terminate()
        server.wait(30)
        run("down", "-y", str(config), env=env)
        kill_cluster(NAME)


def test_the_page_follows_a_cluster_up_scaled_reclaimed_and_gone(
    page_server: tuple[Path, str, dict[str, str]], tmp_path: Path
) -> None:
    config, url, env = page_server
    up = run("up", "-y", str(config), env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{url}#{NAME}")
        page.wait_for_selector(
            f'#clusters tr[data-cluster="{NAME}"][data-state="up"]', timeout=WAIT_MS
        )
        page.wait_for_function(
            "document.querySelector('#plot').dataset.points > 0", timeout=WAIT_MS
        )
        before = int(page.get_attribute("#plot", "data-max-nodes") or 0)

        script = tmp_path / "job.py"
        script.write_text(JOB)
        job = start("submit", str(config), str(script), env=env)
        try:
            page.wait_for_function(
                f"Number(document.querySelector('#plot').dataset.maxNodes) > {before}",
                timeout=WAIT_MS,
            )
            page.wait_for_selector('#nodes tr[data-state="running"] >> text=spot', timeout=WAIT_MS)
            kill = run("kill-random-node", "-y", "--hard", str(config), env=env)
            assert kill.returncode == 0, kill.stdout + kill.stderr
            page.wait_for_selector('#reclaims tr[data-kind="reclaim"]', timeout=WAIT_MS)
            assert "spot" in page.inner_text("#reclaims tbody")
            assert page.inner_text("#summary-reclaims b") != "0"
        finally:
            job.kill()
            job.wait(30)
        down = run("down", "-y", str(config), env=env)
        assert down.returncode == 0, down.stdout + down.stderr
        page.wait_for_selector(
            f'#clusters tr[data-cluster="{NAME}"][data-state="gone"]', timeout=WAIT_MS
        )
        assert page.inner_text("#summary-state b") == "gone"
        browser.close()
