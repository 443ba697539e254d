"""The EC2 client for listing (launcher/providers/aws/listing.py): cut from botocore's own
model to DescribeInstances, kept per botocore version, answering as the full client does
(against moto's EC2 server); the user's own botocore models get the full client. And the
provider's SDK is looked up, not imported, when a provider is made (factory.py)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.loaders import Loader

from fakes.aws.server import MotoServer, amazon_image, loopback_vpc
from launcher.config.loader import parse_config
from launcher.errors import UsageError
from launcher.providers.aws import listing
from launcher.providers.aws.clients import AwsClients
from launcher.providers.factory import make_provider

REGION = "us-west-2"


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as running:
        yield running


@pytest.fixture
def cloud(server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> MotoServer:
    server.reset()
    server.apply_env(monkeypatch)
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    # No ~/.aws/models of this machine's user (botocore's customer data path).
    monkeypatch.setattr(Loader, "CUSTOMER_DATA_PATH", str(tmp_path / ".aws" / "models"))
    return server


def launch(server: MotoServer, count: int, cluster: str) -> list[str]:
    ec2 = server.client("ec2")
    vpc = loopback_vpc(ec2)
    made = ec2.run_instances(
        ImageId=amazon_image(server),
        InstanceType="m5.large",
        MinCount=count,
        MaxCount=count,
        SubnetId=vpc.subnet_ids[0],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "launcher-cluster", "Value": cluster}]}
        ],
    )
    return sorted(i["InstanceId"] for i in made["Instances"])


def cloud_home() -> str:
    return os.environ["LAUNCHER_HOME"]


def listed(client: Any, cluster: str) -> list[dict[str, Any]]:
    pages = client.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "tag:launcher-cluster", "Values": [cluster]}]
    )
    found = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    return sorted(found, key=lambda i: str(i["InstanceId"]))


def test_the_listing_client_answers_as_the_full_client_and_has_no_other_call(
    cloud: MotoServer,
) -> None:
    ids = launch(cloud, 3, "c")
    launch(cloud, 1, "other")
    clients = AwsClients(REGION)
    small = clients.ec2_listing
    assert [i["InstanceId"] for i in listed(small, "c")] == ids
    full = AwsClients(REGION).ec2
    assert listed(small, "c") == listed(full, "c")  # every field, as botocore parses it
    assert hasattr(full, "run_instances") and not hasattr(small, "run_instances")
    assert clients.ec2_listing is small  # made once
    # Once the full client is made, listing uses it (no second client per process).
    made = clients.ec2
    assert clients.ec2_listing is made


def test_the_cut_model_is_kept_and_read_back(cloud: MotoServer) -> None:
    launch(cloud, 1, "c")
    listing.listing_client(AwsClients(REGION)._config(1))
    kept = list((Path(cloud_home()) / "botocore").glob("ec2-listing-*.json"))
    assert len(kept) == 1
    data = json.loads(kept[0].read_text())
    assert list(data["models"]["service-2"]["operations"]) == ["DescribeInstances"]
    # Read back without cutting again: a marked kept file is what the client is made of.
    data["models"]["paginators-1"]["pagination"]["DescribeInstances"]["limit_key"] = "Nope"
    kept[0].write_text(json.dumps(data))
    client = listing.listing_client(AwsClients(REGION)._config(1))
    assert client.get_paginator("describe_instances")._limit_key == "Nope"


def test_a_model_file_that_changed_is_cut_again(cloud: MotoServer) -> None:
    listing.listing_client(AwsClients(REGION)._config(1))
    (kept,) = (Path(cloud_home()) / "botocore").glob("ec2-listing-*.json")
    data = json.loads(kept.read_text())
    data["stamp"] = [0, 0]  # as if botocore's ec2 model had changed since
    data["models"]["service-2"]["operations"] = {}
    kept.write_text(json.dumps(data))
    client = listing.listing_client(AwsClients(REGION)._config(1))
    assert hasattr(client, "describe_instances")
    assert json.loads(kept.read_text())["stamp"] != [0, 0]


def test_the_users_own_botocore_models_get_the_full_client(
    cloud: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path / "models"))
    assert listing.listing_client(AwsClients(REGION)._config(1)) is None
    clients = AwsClients(REGION)
    assert hasattr(clients.ec2_listing, "run_instances")
    monkeypatch.delenv("AWS_DATA_PATH")
    (tmp_path / ".aws" / "models").mkdir(parents=True)  # ~/.aws/models, as the fixture has it
    assert listing.listing_client(AwsClients(REGION)._config(1)) is None


def test_the_cut_keeps_every_shape_the_operation_reaches_and_no_other() -> None:
    model = Loader().load_service_model("ec2", "service-2")
    cut = listing.cut_model(model, ("DescribeInstances",))
    shapes = cut["shapes"]
    assert "DescribeInstancesRequest" in shapes and "RunInstancesRequest" not in shapes

    def refs(shape: dict[str, Any]) -> list[str]:
        named = [shape[p]["shape"] for p in ("member", "key", "value") if p in shape]
        return named + [m["shape"] for m in shape.get("members", {}).values()]

    assert all(ref in shapes for shape in shapes.values() for ref in refs(shape))
    assert len(shapes) < len(model["shapes"]) / 10


def test_a_provider_s_missing_sdk_is_named_with_its_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    text = "cluster_name: c\nprovider: {type: aws, region: us-west-2}\nauth: {ssh_user: ubuntu}\n"
    config = parse_config(text, "c.yaml", cwd=tmp_path)
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if not installed
    with pytest.raises(UsageError, match=r"needs boto3; install it with pip install '.*\[aws\]'"):
        make_provider(config)
