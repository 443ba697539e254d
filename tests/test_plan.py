"""`plan`: nodes, resources, commands and cost, computed from the config alone."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.config.loader import load_config
from launcher.dryrun import make_plan
from launcher.pricing import load_prices
from launcher.providers.registry import SPECS
from tests.conftest import REPO, CliResult

PRICED = """\
cluster_name: priced
max_workers: 5
provider: {type: aws, region: us-east-1}
available_node_types:
  head:
    node_config: {InstanceType: m5.large}
    max_workers: 0
  cpu:
    node_config: {InstanceType: m5.xlarge}
    min_workers: 2
    max_workers: 3
  gpu-spot:
    node_config:
      InstanceType: p3.2xlarge
      InstanceMarketOptions: {MarketType: spot}
    max_workers: 1
head_node_type: head
"""


def _plan(path: Path):  # type: ignore[no-untyped-def]
    config = load_config(path)
    return make_plan(config, SPECS[config.provider.type], load_prices())


def test_counts_and_cost(write_config: Callable[[str], Path]) -> None:
    plan = _plan(write_config(PRICED))
    prices = load_prices()
    m5l = prices.machine("aws", "m5.large")
    m5xl = prices.machine("aws", "m5.xlarge")
    p3 = prices.machine("aws", "p3.2xlarge")
    assert m5l and m5xl and p3 and p3.price.spot
    assert plan.head.node_type.name == "head"
    assert [(g.node_type.name, g.at_start, g.at_most) for g in plan.workers] == [
        ("cpu", 2, 3),
        ("gpu-spot", 0, 1),
    ]
    cost = plan.cost
    assert cost.workers_at_start == 2 and cost.workers_at_max == 4
    assert cost.at_start == pytest.approx(m5l.price.on_demand + 2 * m5xl.price.on_demand)
    # At most: head + 3 cpu + 1 gpu, the gpu one at its spot price as configured.
    assert cost.at_max == pytest.approx(
        m5l.price.on_demand + 3 * m5xl.price.on_demand + p3.price.spot
    )
    assert cost.at_max_on_demand == pytest.approx(
        m5l.price.on_demand + 3 * m5xl.price.on_demand + p3.price.on_demand
    )
    assert cost.as_of == prices.dated("aws")


def test_global_cap_limits_the_costliest_mix(write_config: Callable[[str], Path]) -> None:
    plan = _plan(write_config(PRICED.replace("max_workers: 5", "max_workers: 3")))
    prices = load_prices()
    m5l, m5xl, p3 = (prices.machine("aws", t) for t in ("m5.large", "m5.xlarge", "p3.2xlarge"))
    assert m5l and m5xl and p3
    # 2 cpu are required; the one free slot goes to the priciest type, the GPU node.
    assert plan.cost.workers_at_max == 3
    assert plan.cost.at_max_on_demand == pytest.approx(
        m5l.price.on_demand + 2 * m5xl.price.on_demand + p3.price.on_demand
    )


def test_resources_filled_from_instance_size(write_config: Callable[[str], Path]) -> None:
    plan = _plan(write_config(PRICED))
    gpu = plan.workers[1].node_type
    assert gpu.resources["CPU"] == 8 and gpu.resources["GPU"] == 1
    assert gpu.resource_source.value == "instance table"


def test_unknown_instance_type_has_unknown_price(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    path = write_config(PRICED.replace("m5.xlarge", "x9.mystery"))
    plan = _plan(path)
    assert plan.cost.at_start is None
    assert plan.cost.unpriced_types == ("cpu",)
    result = cli_runner("plan", str(path))
    assert result.exit_code == 0
    assert "unknown" in result.stdout and "no price known for: cpu" in result.stdout


def test_bootstrap_resources_reuse_what_node_config_names(
    write_config: Callable[[str], Path],
) -> None:
    text = PRICED.replace(
        "node_config: {InstanceType: m5.large}",
        "node_config: {InstanceType: m5.large, IamInstanceProfile: {Name: mine}}",
    )
    plan = _plan(write_config(text))
    actions = {r.kind: r.action for r in plan.resources}
    assert actions["IAM instance profile"] == "reuse"
    assert actions["key pair"] == "create if missing"
    assert actions["security group"] == "create if missing"
    group = next(r for r in plan.resources if r.kind == "security group")
    assert "your own public address only" in group.detail


def test_localhost_plan_is_free_and_names_the_state_dir(
    cli_runner: Callable[..., CliResult],
) -> None:
    result = cli_runner("plan", "--json", str(REPO / "example-configs" / "local.yaml"))
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["cost_per_hour"]["billed"] is False
    assert any(r["kind"] == "state directory" for r in data["resources"])
    worker = data["nodes"][1]
    assert worker["resources"] == {"CPU": 4} and worker["count_at_start"] == 1


def test_plan_json_lists_commands_per_node(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    text = PRICED + (
        "initialization_commands: [echo init]\nsetup_commands: [echo common]\n"
        "head_setup_commands: [echo head]\nworker_setup_commands: [echo worker]\n"
    )
    text = text.replace(
        "    max_workers: 1\n", "    max_workers: 1\n    worker_setup_commands: [echo gpu]\n"
    )
    result = cli_runner("plan", "--json", str(write_config(text)))
    nodes = {
        n["node_type"] + "/" + n["role"]: n["commands"] for n in json.loads(result.stdout)["nodes"]
    }
    assert nodes["head/head"]["setup"] == ["echo common", "echo head"]
    assert nodes["cpu/worker"]["setup"] == ["echo common", "echo worker"]
    assert nodes["gpu-spot/worker"]["setup"] == ["echo gpu"]
    assert nodes["cpu/worker"]["initialization"] == ["echo init"]
    assert nodes["head/head"]["start_ray"][0] == "ray stop"


@pytest.mark.parametrize(
    "path",
    sorted([*(REPO / "example-configs").glob("*.yaml"), *(REPO / "examples").glob("*/*.yaml")]),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_our_examples_validate_and_plan(path: Path, cli_runner: Callable[..., CliResult]) -> None:
    assert cli_runner("validate", str(path)).exit_code == 0
    result = cli_runner("plan", str(path))
    assert result.exit_code == 0
    assert "Head node" in result.stdout
