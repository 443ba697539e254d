"""One harness per provider for the contract suite: how to make a provider for a cluster of
a given name against a backend the test owns, how to make its capacity run out, and what is
left of a cluster after it was taken down.

A new provider adds a harness here (and its name to HARNESSES); tests/contract/ itself is not
edited. Harnesses share one backend per test module (moto's server, sshd hosts), so each
test uses cluster names of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from fakes.aws.server import LoopbackVpc, MotoServer, loopback_vpc
from fakes.gce.server import PROJECT, GceServer
from fakes.hosts.ssh import IsolatedHost, isolated_hosts, make_key
from fakes.kube import resources as kube_resources
from fakes.kube.server import KubeServer
from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.paths import cluster_dir
from launcher.providers.base import NodeKind, NodeProvider
from launcher.providers.factory import make_provider
from launcher.providers.registry import provider_spec


@dataclass(frozen=True)
class Types:
    """The node type names of a harness's configs."""

    head: str
    worker: str


def derived_names(config: ClusterConfig) -> dict[str, str]:
    """The names `up` gives what it creates for `config`'s cluster (its provider's spec)."""
    spec = provider_spec(config.provider.type)
    assert spec is not None
    return spec.derived_names(config)


class Harness(Protocol):
    name: str
    types: Types

    def provider(self, cluster: str) -> NodeProvider:
        """A provider for cluster `cluster` as the user's machine has it, bootstrapped."""
        ...

    def exhaust(self, provider: NodeProvider) -> str:
        """Make capacity run out for a worker type of `provider`'s cluster; returns it."""
        ...

    def restore(self) -> None:
        """Undo `exhaust`."""
        ...

    def leftovers(self, cluster: str) -> list[str]:
        """What the backend still holds of `cluster` (empty once it is wholly gone)."""
        ...


TYPES_TEXT = """
available_node_types:
  head: {node_config: NODE, resources: {CPU: 1}, max_workers: 0}
  worker: {node_config: NODE, resources: {CPU: 1}, max_workers: 8}
  scarce: {node_config: SCARCE, resources: {CPU: 1}, max_workers: 8}
head_node_type: head
"""


class LocalhostHarness:
    name = "localhost"
    types = Types("head", "worker")

    def __init__(self, home: Path) -> None:
        self.home = home

    def config(self, cluster: str) -> ClusterConfig:
        text = f"cluster_name: {cluster}\nmax_workers: 8\nprovider: {{type: localhost}}\n"
        text += TYPES_TEXT.replace("SCARCE", "{simulated_capacity: 0}").replace("NODE", "{}")
        return parse_config(text, f"{cluster}.yaml", Overrides())

    def provider(self, cluster: str) -> NodeProvider:
        provider = make_provider(self.config(cluster))
        provider.bootstrap()
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        return "scarce"  # simulated_capacity: 0

    def restore(self) -> None:
        return None

    def leftovers(self, cluster: str) -> list[str]:
        state = cluster_dir(cluster) / "localhost"
        return [str(p) for p in state.rglob("node.json")] if state.exists() else []


class OnPremHarness:
    """Three isolated sshd machines: a head and two workers, shared by every cluster."""

    name = "local"
    types = Types("ray.head.default", "ray.worker.default")

    def __init__(self, key: Path, hosts: list[IsolatedHost]) -> None:
        self.key = key
        self.head, *self.workers = hosts

    def config(self, cluster: str) -> ClusterConfig:
        ips = ", ".join(h.ip for h in self.workers)
        text = (
            f"cluster_name: {cluster}\n"
            f"provider: {{type: local, head_ip: {self.head.ip}, worker_ips: [{ips}]}}\n"
            f"auth: {{ssh_user: root, ssh_private_key: {self.key}}}\n"
        )
        return parse_config(text, f"{cluster}.yaml", Overrides())

    def provider(self, cluster: str) -> NodeProvider:
        provider = make_provider(self.config(cluster))
        provider.bootstrap()
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        # The listed machines are the whole pool: claim every one of them.
        worker = provider.config.node_types[self.types.worker]
        free = len(self.workers) - len(provider.workers())
        if free:
            provider.create_nodes(worker, NodeKind.WORKER, free, {})
        return self.types.worker

    def restore(self) -> None:
        return None

    def leftovers(self, cluster: str) -> list[str]:
        records = self.head.path(f"~/.launcher/onprem/{cluster}")
        return [str(p) for p in records.glob("*.json")] if records.exists() else []


class AwsHarness:
    """moto's EC2/IAM server, one loopback VPC with three subnets (three zones)."""

    name = "aws"
    types = Types("head", "worker")

    def __init__(self, server: MotoServer, vpc: LoopbackVpc) -> None:
        self.server, self.vpc = server, vpc
        ec2 = server.client("ec2")
        self.image = str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])

    def config(self, cluster: str) -> ClusterConfig:
        subnets = ", ".join(self.vpc.subnet_ids)
        node = f"{{InstanceType: m5.large, ImageId: {self.image}, SubnetIds: [{subnets}]}}"
        text = (
            f"cluster_name: {cluster}\nmax_workers: 8\n"
            "provider: {type: aws, region: us-west-2, use_internal_ips: true}\n"
            "auth: {ssh_user: root}\n"
        )
        text += TYPES_TEXT.replace("SCARCE", node).replace("NODE", node)
        return parse_config(text, f"{cluster}.yaml", Overrides())

    def provider(self, cluster: str) -> NodeProvider:
        provider = make_provider(self.config(cluster))
        provider.bootstrap()
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        self.server.faults.add("RunInstances", "InsufficientInstanceCapacity")
        return "scarce"

    def restore(self) -> None:
        self.server.faults.clear()

    def leftovers(self, cluster: str) -> list[str]:
        ec2 = self.server.client("ec2")
        live = ec2.describe_instances(
            Filters=[
                {"Name": "tag:launcher-cluster", "Values": [cluster]},
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped"],
                },
            ]
        )["Reservations"]
        found = [i["InstanceId"] for r in live for i in r["Instances"]]
        names = derived_names(self.config(cluster))
        groups = ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [names["security group"]]}]
        )["SecurityGroups"]
        found += [g["GroupId"] for g in groups]
        keys = ec2.describe_key_pairs()["KeyPairs"]
        found += [k["KeyName"] for k in keys if k["KeyName"] == names["key pair"]]
        roles = self.server.client("iam").list_roles()["Roles"]
        found += [r["RoleName"] for r in roles if r["RoleName"] == names["head IAM role"]]
        return found


class GcpHarness:
    """The fake GCE (fakes/gce/server.py): two zones of us-west1, stopped workers kept."""

    name = "gcp"
    types = Types("head", "worker")

    def __init__(self, server: GceServer) -> None:
        self.server = server

    def config(self, cluster: str) -> ClusterConfig:
        image = "projects/debian-cloud/global/images/family/debian-12"
        node = (
            "{machineType: n1-standard-2, disks: [{boot: true, autoDelete: true, "
            f"initializeParams: {{sourceImage: {image}}}}}]}}"
        )
        text = (
            f"cluster_name: {cluster}\nmax_workers: 8\n"
            "provider: {type: gcp, region: us-west1, availability_zone: 'us-west1-a,us-west1-b',"
            f" project_id: {PROJECT}, use_internal_ips: true, cache_stopped_nodes: true,"
            " allow_ssh_from: [127.0.0.0/8]}\n"
            "auth: {ssh_user: root}\n"
        )
        text += TYPES_TEXT.replace("SCARCE", node).replace("NODE", node)
        return parse_config(text, f"{cluster}.yaml", Overrides())

    def provider(self, cluster: str) -> NodeProvider:
        provider = make_provider(self.config(cluster))
        provider.bootstrap()
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        self.server.faults.no_capacity()
        return "scarce"

    def restore(self) -> None:
        self.server.faults.clear()

    def leftovers(self, cluster: str) -> list[str]:
        found = [
            f"instance {i.name}"
            for i in self.server.instances()
            if i.labels.get("launcher-cluster") == cluster
        ]
        names = derived_names(self.config(cluster))
        rules = {names["SSH firewall rule"], names["internal firewall rule"]}
        firewalls = self.server.client("compute").firewalls()
        listed = firewalls.list(project=PROJECT).execute().get("items") or []
        found += [f"firewall {f['name']}" for f in listed if f["name"] in rules]
        accounts = self.server.client("iam").projects().serviceAccounts()
        listed = accounts.list(name=f"projects/{PROJECT}").execute().get("accounts") or []
        account = names["head service account"] + "@"
        return found + [f"account {a['email']}" for a in listed if a["email"].startswith(account)]


class KubernetesHarness:
    """The fake API server (fakes/kube/server.py) with its stand-in kubelet (pods are
    marked Running; nothing runs in them: the contract is about the API), three 4-cpu
    nodes, and the namespace `ray`. A `scarce` pod asks for more CPU than any node has."""

    name = "kubernetes"
    types = Types("head", "worker")

    def __init__(self, server: KubeServer) -> None:
        self.server = server
        server.create("namespaces", {"metadata": {"name": "ray"}})

    def config(self, cluster: str) -> ClusterConfig:
        def pod(cpu: str) -> str:
            return (
                "{apiVersion: v1, kind: Pod, spec: {containers: [{name: ray-node, image: "
                f"rayproject/ray, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}}}"
            )

        text = (
            f"cluster_name: {cluster}\nmax_workers: 8\n"
            "provider: {type: kubernetes, namespace: ray, scheduling_timeout_s: 3}\n"
        )
        text += TYPES_TEXT.replace("SCARCE", pod("64")).replace("NODE", pod("100m"))
        return parse_config(text, f"{cluster}.yaml", Overrides())

    def provider(self, cluster: str) -> NodeProvider:
        provider = make_provider(self.config(cluster))
        provider.bootstrap()
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        return "scarce"  # no node has 64 CPUs: its pods stay unschedulable

    def restore(self) -> None:
        return None

    def leftovers(self, cluster: str) -> list[str]:
        found = [
            f"pod {p['metadata']['name']}"
            for p in self.server.pods("ray", f"launcher-cluster={cluster}")
        ]
        for plural, group in (
            ("services", ""),
            ("serviceaccounts", ""),
            ("roles", "rbac.authorization.k8s.io"),
            ("rolebindings", "rbac.authorization.k8s.io"),
        ):
            resource = kube_resources.find(group, plural)
            assert resource is not None
            for obj in self.server.store.list(resource, "ray")[0]:
                metadata = obj["metadata"]
                users = (metadata.get("annotations") or {}).get("launcher.clusters", "")
                labels = metadata.get("labels") or {}
                if cluster in users.split(",") or labels.get("launcher-cluster") == cluster:
                    found.append(f"{plural} {metadata['name']}")
        return found


HARNESSES = ("localhost", "local", "aws", "gcp", "kubernetes")


@contextlib.contextmanager
def harness_for(name: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp / "launcher-home"))
    if name == "localhost":
        yield LocalhostHarness(tmp)
    elif name == "local":
        key = make_key(tmp / "id_ed25519")
        with isolated_hosts(key, "127.0.8.40", 3) as hosts:
            yield OnPremHarness(key, hosts)
    elif name == "gcp":
        with GceServer() as gce:
            for variable, value in gce.env().items():
                monkeypatch.setenv(variable, value)
            yield GcpHarness(gce)
    elif name == "kubernetes":
        with KubeServer() as kube:
            monkeypatch.setenv("KUBECONFIG", str(kube.write_kubeconfig(tmp / "kubeconfig")))
            yield KubernetesHarness(kube)
    elif name == "aws":
        with MotoServer() as server:
            server.apply_env(monkeypatch)
            yield AwsHarness(server, loopback_vpc(server.client("ec2")))
    else:
        raise ValueError(f"no harness named {name}")
