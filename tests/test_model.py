"""The typed config after validation: immutable, with defaults and overrides applied."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.config.loader import Overrides, load_config, parse_config
from launcher.errors import ConfigError
from tests.conftest import RAY_EXAMPLES

BASE = """\
cluster_name: model
max_workers: 4
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 2}, max_workers: 0}
  small: {node_config: {}, resources: {CPU: 1}, min_workers: 1, max_workers: 2,
          initialization_commands: [echo small-init]}
  big: {node_config: {}, resources: {CPU: 8, GPU: 1}}
head_node_type: head
initialization_commands: [echo init]
"""


def test_config_is_frozen(write_config: Callable[[str], Path]) -> None:
    config = load_config(write_config(BASE))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_workers = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.node_types["x"] = config.head_type  # type: ignore[index]
    with pytest.raises(TypeError):
        config.head_type.resources["CPU"] = 3  # type: ignore[index]


def test_node_config_copy_is_mutable_and_detached(ray_examples: Path) -> None:
    config = load_config(ray_examples / "aws" / "example-full.yaml")
    head = config.head_type
    copy = head.node_config_copy()
    copy["InstanceType"] = "changed"
    copy["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] = 1
    assert head.node_config["InstanceType"] == "m5.large"
    assert head.node_config["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 100
    with pytest.raises(TypeError):
        head.node_config["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] = 2  # type: ignore[index]


def test_defaults_and_max_workers_per_type(write_config: Callable[[str], Path]) -> None:
    config = load_config(write_config(BASE))
    assert config.upscaling_speed == 1.0 and config.idle_timeout_minutes == 5
    assert config.node_types["big"].max_workers == 4  # defaults to the global cap
    assert config.node_types["head"].max_workers == 0
    assert config.commands_for("small", head=False).initialization == ("echo small-init",)
    assert config.commands_for("big", head=False).initialization == ("echo init",)
    assert config.commands_for("head", head=True).start_ray[0].startswith("ray start --head")


def test_overrides(write_config: Callable[[str], Path]) -> None:
    config = load_config(
        write_config(BASE), Overrides(cluster_name="other", max_workers=7, min_workers=2)
    )
    assert config.cluster_name == "other" and config.max_workers == 7
    assert config.node_types["small"].min_workers == 2
    assert config.node_types["head"].min_workers == 0
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(BASE), Overrides(max_workers=0))
    assert any("sum of min_workers" in p.message for p in caught.value.problems)


def test_legacy_form_converted(ray_examples: Path) -> None:
    config = load_config(ray_examples / "aws" / "example-subnets.yaml")
    assert config.head_node_type == "ray.head.default"
    assert config.head_type.node_config["SubnetIds"] == ("subnet-0000000",)
    worker = config.node_types["ray.worker.default"]
    assert worker.node_config["SubnetIds"] == ("subnet-fffffff",)
    assert worker.max_workers == 1


def test_warnings_travel_with_the_config(ray_examples: Path) -> None:
    config = load_config(ray_examples / "gcp" / "example-full.yaml")
    keys = {w.path[0] for w in config.warnings}
    assert {"initial_workers", "autoscaling_mode", "target_utilization_fraction"} <= keys
    assert all(w.line for w in config.warnings)


def test_parse_config_reports_all_problems_without_a_file() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("cluster_name: 5\nmax_workers: -1\nprovider: {type: localhost}\n", "inline")
    assert [p.line for p in caught.value.problems] == [1, 2]
    assert str(caught.value).startswith("inline:1: error: cluster_name")


def test_example_dir_exists() -> None:
    assert RAY_EXAMPLES.is_dir()
