"""Edge cases found by review: odd shapes never crash, and Ray's leniencies are kept."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.config.loader import load_config
from launcher.dryrun import make_plan
from launcher.pricing import load_prices
from launcher.providers.registry import SPECS
from tests.conftest import CliResult

Write = Callable[[str], Path]
Run = Callable[..., CliResult]

K8S = "cluster_name: k\nprovider: {type: kubernetes, namespace: ray}\n"


@pytest.mark.parametrize(
    "node_config",
    [
        "{kind: Pod, spec: {containers: {name: ray}}}",
        "{kind: Pod, spec: {containers: 3}}",
        "{kind: Pod, spec: {containers: [{resources: {limits: 3}}]}}",
        "{kind: Pod, spec: {containers: [{resources: {limits: x}}]}}",
        "{kind: Pod, spec: {containers: [5]}}",
    ],
)
def test_odd_pod_shapes_never_crash(write_config: Write, cli_runner: Run, node_config: str) -> None:
    text = K8S + (
        "available_node_types:\n"
        f"  head: {{node_config: {node_config}, resources: {{CPU: 1}}}}\n"
        "head_node_type: head\n"
    )
    for command in ("validate", "plan"):
        result = cli_runner(command, str(write_config(text)))
        assert result.exception is None
        assert result.exit_code in (0, 2)
        assert "internal error" not in result.stderr


def test_pod_cpu_rounds_up_and_any_gpu_key_counts(write_config: Write) -> None:
    text = K8S + (
        "available_node_types:\n"
        "  head:\n"
        "    node_config:\n"
        "      kind: Pod\n"
        "      spec: {containers: [{resources: {requests: {cpu: 500m}, limits: {amd.com/gpu: 2}}}]}\n"
        "head_node_type: head\n"
    )
    config = load_config(write_config(text))
    assert config.head_type.resources["CPU"] == 1
    assert config.head_type.resources["GPU"] == 2
    plan = make_plan(config, SPECS["kubernetes"], load_prices())
    assert plan.cost.billed and plan.cost.unpriced_types == ("head",)  # a pod's price: unknown


def test_head_ip_of_wrong_type_is_reported_not_crashed(
    write_config: Write, cli_runner: Run
) -> None:
    text = "cluster_name: x\nprovider: {type: local, head_ip: [10.0.0.1], worker_ips: [10.0.0.2]}\n"
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 2
    assert "provider.head_ip: expected text" in result.stderr


def test_recursive_alias_is_refused(write_config: Write, cli_runner: Run) -> None:
    text = "cluster_name: x\nprovider: {type: localhost}\nmetadata: &m {self: *m}\n"
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 2
    assert "contains itself" in result.stderr


def test_alias_bomb_is_refused_quickly(write_config: Write, cli_runner: Run) -> None:
    lines = [
        "cluster_name: x",
        "provider: {type: localhost}",
        "a0: &a0 [x, x, x, x, x, x, x, x, x, x]",
    ]
    for level in range(1, 9):
        ref = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([ref] * 10)}]")
    started = time.monotonic()
    result = cli_runner("validate", str(write_config("\n".join(lines) + "\n")))
    assert result.exit_code == 2
    assert "aliases expand this file to more than" in result.stderr
    assert time.monotonic() - started < 30  # the unguarded walk takes minutes


def test_anchors_and_merge_keys_work(write_config: Write, cli_runner: Run) -> None:
    text = (
        "cluster_name: x\nmax_workers: 4\nprovider: {type: localhost}\n"
        "worker_base: &base {node_config: {}, resources: {CPU: 2}, max_workers: 2}\n"
        "available_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
        "  w1:\n    <<: *base\n    min_workers: 1\n"
        "  w2:\n    <<: *base\n    max_workers: -1\n"
        "head_node_type: head\n"
    )
    result = cli_runner("validate", str(write_config(text)))
    # The merged base is fine; only w2's own override is wrong, on its own line (12).
    assert result.exit_code == 2
    assert ":12: error: available_node_types.w2.max_workers" in result.stderr
    assert "worker_base" in result.stderr  # not a known top-level key


def test_declared_resources_keep_the_detected_gpu(write_config: Write) -> None:
    text = (
        "cluster_name: x\nprovider: {type: aws, region: us-east-1}\n"
        "available_node_types:\n"
        "  head: {node_config: {InstanceType: p3.2xlarge}, resources: {CPU: 4}}\n"
        "head_node_type: head\n"
    )
    resources = load_config(write_config(text)).head_type.resources
    assert resources["CPU"] == 4 and resources["GPU"] == 1 and resources["memory"] > 0


def test_whole_floats_count_as_integers(write_config: Write, cli_runner: Run) -> None:
    text = (
        "cluster_name: x\nmax_workers: 4.0\nprovider: {type: localhost}\n"
        "available_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
        "  w: {node_config: {}, resources: {CPU: 1.0}, min_workers: 1.0, max_workers: 3.0}\n"
        "head_node_type: head\n"
    )
    config = load_config(write_config(text))
    worker = config.node_types["w"]
    assert (worker.min_workers, worker.max_workers, config.max_workers) == (1, 3, 4)
    bad = text.replace("max_workers: 4.0", "max_workers: 0.0")
    result = cli_runner("validate", str(write_config(bad)))
    assert result.exit_code == 2


def test_on_prem_counts_capped_at_the_machines_listed(write_config: Write, cli_runner: Run) -> None:
    text = (
        "cluster_name: x\nmax_workers: 5\nprovider: {type: local, head_ip: a, worker_ips: [b, c]}\n"
        "auth: {ssh_user: me}\n"
    )
    result = cli_runner("plan", "--json", str(write_config(text)))
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["max_workers"] == 2
    assert any("more than the 2 machines" in w["message"] for w in data["warnings"])


def test_legacy_resources_move_to_the_node_type(write_config: Write) -> None:
    text = (
        "cluster_name: x\nprovider: {type: aws, region: us-east-1}\n"
        "head_node: {InstanceType: m5.2xlarge, resources: {CPU: 6}}\n"
    )
    head = load_config(write_config(text)).head_type
    assert head.resources["CPU"] == 6
    assert "resources" not in head.node_config
    assert head.node_config["InstanceType"] == "m5.2xlarge"


def test_hidden_character_in_a_key_is_named(write_config: Write, cli_runner: Run) -> None:
    text = "cluster_name: x\nprovider:\n  type: aws\n  \u00a0region: us-east-1\n"
    result = cli_runner("validate", str(write_config(text)))
    assert "U+00A0" in result.stderr and "`region`" in result.stderr
    assert result.stderr.isascii()


def test_bad_node_type_names_point_at_each_name(write_config: Write, cli_runner: Run) -> None:
    text = (
        "cluster_name: x\nprovider: {type: localhost}\navailable_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 1}}\n"
        '  "bad name": {node_config: {}}\n'
        '  "worse;name": {node_config: {}}\n'
        "head_node_type: head\n"
    )
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 2
    assert ':5: error: available_node_types["bad name"]: the name' in result.stderr
    assert ':6: error: available_node_types["worse;name"]: the name' in result.stderr


def test_number_written_as_text_gets_a_yaml_hint(write_config: Write, cli_runner: Run) -> None:
    result = cli_runner(
        "validate",
        str(write_config("cluster_name: x\nmax_workers: 1e3\nprovider: {type: localhost}\n")),
    )
    assert "YAML reads `1e3` as text" in result.stderr


def test_wrong_type_reported_once(write_config: Write, cli_runner: Run) -> None:
    result = cli_runner("validate", str(write_config("cluster_name: x\nprovider: {type: 5}\n")))
    assert result.exit_code == 2
    assert result.stderr.count("provider.type") == 1


def test_several_documents_hint(write_config: Write, cli_runner: Run) -> None:
    result = cli_runner(
        "validate", str(write_config("cluster_name: x\n---\nprovider: {type: localhost}\n"))
    )
    assert result.exit_code == 2
    assert "remove the extra `---`" in result.stderr


def test_plan_json_reports_problems_as_json(
    write_config: Write, cli_runner: Run, tmp_path: Path
) -> None:
    result = cli_runner("plan", "--json", str(write_config("cluster_name: x\n")))
    assert result.exit_code == 2
    assert json.loads(result.stdout)["valid"] is False
    missing = cli_runner("plan", "--json", str(tmp_path / "none.yaml"))
    assert missing.exit_code == 2
    assert "no such file" in json.loads(missing.stdout)["problems"][0]["message"]


def test_own_private_key_needs_key_name(
    write_config: Write, cli_runner: Run, tmp_path: Path
) -> None:
    key = tmp_path / "mykey.pem"
    key.write_text("k")
    text = f"cluster_name: x\nprovider: {{type: aws, region: us-east-1}}\nauth: {{ssh_private_key: {key}}}\n"
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 2
    assert "no KeyName" in result.stderr


def test_default_region_is_announced(write_config: Write, cli_runner: Run) -> None:
    result = cli_runner("validate", str(write_config("cluster_name: x\nprovider: {type: aws}\n")))
    assert result.exit_code == 0
    assert "warning: provider: no region set; using us-west-2" in result.stderr


def test_all_on_demand_bound_ranks_by_on_demand_price(write_config: Write) -> None:
    text = (
        "cluster_name: x\nmax_workers: 1\nprovider: {type: aws, region: us-east-1}\n"
        "available_node_types:\n"
        "  head: {node_config: {InstanceType: t3.medium}, max_workers: 0}\n"
        "  spot: {node_config: {InstanceType: m4.xlarge, InstanceMarketOptions: {MarketType: spot}}}\n"
        "  od: {node_config: {InstanceType: t3.xlarge}}\n"
        "head_node_type: head\n"
    )
    config = load_config(write_config(text))
    cost = make_plan(config, SPECS["aws"], load_prices()).cost
    prices = load_prices()
    head, m4, t3 = (prices.machine("aws", t) for t in ("t3.medium", "m4.xlarge", "t3.xlarge"))
    assert head and m4 and t3 and m4.price.spot
    assert cost.at_max_on_demand == pytest.approx(
        head.price.on_demand + max(m4.price.on_demand, t3.price.on_demand)
    )
    assert cost.at_max == pytest.approx(
        head.price.on_demand + max(m4.price.spot, t3.price.on_demand)
    )


def test_typo_does_not_cause_knock_on_errors(write_config: Write, cli_runner: Run) -> None:
    text = (
        "cluster_name: x\nmax_worker: 10\nprovider: {type: localhost}\n"
        "available_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
        "  w: {node_config: {}, resources: {CPU: 1}, min_workers: 4}\n"
        "head_node_type: head\n"
    )
    result = cli_runner("validate", str(write_config(text)))
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "did you mean `max_workers`?" in lines[0]
