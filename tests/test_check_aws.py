"""`launcher check` against moto's EC2/STS/Service Quotas server (fakes/aws): boto3's
credentials, DryRun launches (DryRunOperation allowed, UnauthorizedOperation refused, as
EC2 answers) and the vCPU quotas of the config's instance families."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.aws.server import LoopbackVpc, MotoServer, amazon_image, loopback_vpc
from launcher.check.aws import quota_key
from tests.check_env import by_aspect as findings
from tests.check_env import check, isolate, outside
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as running:
        yield running


@pytest.fixture
def vpc(server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LoopbackVpc:
    server.reset()
    isolate(monkeypatch, tmp_path)
    server.apply_env(monkeypatch)
    return loopback_vpc(server.client("ec2"))


def quotas(monkeypatch: pytest.MonkeyPatch, values: dict[str, float]) -> None:
    """EC2's quotas as Service Quotas would answer them (moto 5 knows only VPC's)."""
    from moto.servicequotas.exceptions import NoSuchResource
    from moto.servicequotas.models import ServiceQuotasBackend

    def get_service_quota(self: Any, service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code != "ec2" or quota_code not in values:
            raise NoSuchResource
        return {"ServiceCode": "ec2", "QuotaCode": quota_code, "Value": values[quota_code]}

    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", get_service_quota)


def write(server: MotoServer, vpc: LoopbackVpc, tmp_path: Path, workers: int = 10) -> Path:
    a = vpc.subnet_ids[0]
    ami = amazon_image(server)
    path = tmp_path / "aws.yaml"
    path.write_text(f"""
cluster_name: chk
max_workers: {workers}
provider: {{type: aws, region: us-west-2, use_internal_ips: true}}
auth: {{ssh_user: root}}
available_node_types:
  head:
    node_config: {{InstanceType: m5.large, ImageId: {ami}, SubnetIds: [{a}]}}
  spot:
    node_config:
      InstanceType: m5.large
      ImageId: {ami}
      SubnetIds: [{a}]
      InstanceMarketOptions: {{MarketType: spot}}
    min_workers: 1
    max_workers: {workers}
head_node_type: head
""")
    return path


def test_quota_codes_follow_the_instance_family_and_market() -> None:
    assert quota_key("m5.large", False, "r") is not None
    assert quota_key("m5.large", False, "r").code == "L-1216C47A"  # type: ignore[union-attr]
    assert quota_key("m5.large", True, "r").code == "L-34B43A08"  # type: ignore[union-attr]
    assert quota_key("g5.xlarge", True, "r").code == "L-3819A6DF"  # type: ignore[union-attr]
    assert quota_key("p4d.24xlarge", False, "r").code == "L-417A185B"  # type: ignore[union-attr]
    assert quota_key("dl1.24xlarge", False, "r").code == "L-6E869C2A"  # type: ignore[union-attr]
    assert quota_key("x2idn.16xlarge", True, "r").code == "L-E3A00192"  # type: ignore[union-attr]
    assert quota_key("trn1.32xlarge", True, "r").code == "L-6B0D517C"  # type: ignore[union-attr]
    assert quota_key("hpc7g.16xlarge", True, "r") is None  # HPC has no spot market
    assert quota_key("u-6tb1.metal", False, "r") is None  # high memory: not known here


def test_ready_with_room_for_max_workers_exits_0(
    server: MotoServer, vpc: LoopbackVpc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quotas(monkeypatch, {"L-1216C47A": 64, "L-34B43A08": 64})
    code, answer = check(write(server, vpc, tmp_path))
    assert code == 0 and answer["ready"] is True
    report = answer["providers"][0]
    assert report["provider"] == "aws" and report["status"] == "ok", report
    assert "account 123456789012" in findings(answer, "credentials")[0]["detail"]
    assert findings(answer, "permissions")[0]["status"] == "ok"
    actions = [c.action for c in server.calls()]
    assert actions.count("RunInstances") == 2  # one DryRun per node type
    assert server.instances() == []  # a DryRun launches nothing
    spot = [f for f in findings(answer, "quota") if "spot" in f["detail"]]
    assert spot and "64 of 64 vCPUs left" in spot[0]["detail"], spot
    assert outside() == []


def test_max_workers_beyond_the_quota_warns_and_the_start_beyond_it_fails(
    server: MotoServer, vpc: LoopbackVpc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quotas(monkeypatch, {"L-1216C47A": 64, "L-34B43A08": 8})
    code, answer = check(write(server, vpc, tmp_path))  # 1 to 10 spot m5.large: 2 to 20
    assert code == 0 and answer["providers"][0]["status"] == "warning"
    warned = [f for f in findings(answer, "quota") if f["status"] == "warning"]
    assert "lower max_workers of spot" in warned[0]["fix"]

    quotas(monkeypatch, {"L-1216C47A": 1, "L-34B43A08": 8})  # the head's 2 do not fit
    code, answer = check(write(server, vpc, tmp_path))
    assert code == 1 and answer["ready"] is False
    assert any(f["status"] == "problem" for f in findings(answer, "quota"))


def test_a_policy_that_refuses_run_instances_is_not_ready_with_the_fix(
    server: MotoServer, vpc: LoopbackVpc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quotas(monkeypatch, {"L-1216C47A": 64, "L-34B43A08": 64})
    server.faults.add("RunInstances", "UnauthorizedOperation")
    result = run_cli("check", str(write(server, vpc, tmp_path)))
    assert result.exit_code == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith("aws") and "NOT READY" in first
    assert "not allowed: ec2:RunInstances (head)" in first and "IAM policy" in first


def test_unknown_quota_is_said_and_does_not_fail(
    server: MotoServer, vpc: LoopbackVpc, tmp_path: Path
) -> None:
    code, answer = check(write(server, vpc, tmp_path))  # moto: no EC2 quotas at all
    assert code == 0
    assert [f["status"] for f in findings(answer, "quota")] == ["unknown"]


def test_no_credentials_says_how_to_give_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolate(monkeypatch, tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text("cluster_name: c\nprovider: {type: aws, region: us-west-2}\n")
    result = run_cli("check", str(path))
    assert result.exit_code == 1
    assert "no AWS credentials found" in result.stdout and "aws configure" in result.stdout
    assert outside() == []


def test_validate_and_plan_warn_when_the_provider_extra_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_boto3(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "boto3" or name.startswith("boto3."):
            raise ModuleNotFoundError("No module named 'boto3'", name="boto3")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(__import__("sys").modules, "boto3", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_boto3)
    path = tmp_path / "c.yaml"
    path.write_text("cluster_name: c\nprovider: {type: aws, region: us-west-2}\n")
    for verb in ("validate", "plan"):
        result = run_cli(verb, str(path))
        assert result.exit_code == 0, result.stderr
        assert "boto3 is not installed" in result.stderr and "pip install" in result.stderr
    result = run_cli("check", str(path))
    assert result.exit_code == 1 and "NOT READY: boto3 is not installed" in result.stdout
