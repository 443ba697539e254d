"""What a cluster needs on AWS before its first node, found or created: subnets, key pair,
security group, the head's IAM instance profile and images.

`up` runs this with `create=True` (creating only what is missing; `plan` lists the same
steps); the autoscaler on the head runs it with `create=False`, which only looks things up
(the head's IAM role may not create any of them).
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.config.model import ClusterConfig
from launcher.errors import ProviderError
from launcher.providers.aws import iam, images, keys, network
from launcher.providers.aws.clients import AwsClients
from launcher.providers.aws.launch import LaunchContext, needs_image, subnet_ids
from launcher.providers.aws.spec import (
    AwsProviderConfig,
    group_name,
    makes_head_role,
    own_key_name,
    passed_profiles,
)

__all__ = ["group_name", "own_key_name", "resolve"]


def resolve(
    clients: AwsClients,
    config: ClusterConfig,
    *,
    create: bool,
    ssh_from: Callable[[str], list[str]],
) -> tuple[dict[str, LaunchContext], list[str]]:
    """What launches of each node type need. `ssh_from(vpc_id)` gives the address ranges
    SSH may come from. Returns it, per node type, and what was created (for the user)."""
    provider = config.provider
    assert isinstance(provider, AwsProviderConfig)
    done: list[str] = []
    subnets = _subnets(clients, config, provider)
    head_role = makes_head_role(config) and create
    # Before anything is made: a profile that cannot be resolved stops `up` here.
    passed = iam.profile_roles(clients, passed_profiles(config)) if head_role else []
    key_name = own_key_name(config)
    if key_name is not None and create:
        what = keys.ensure_key_pair(clients, key_name, config.cluster_name)
        done += [what] if what else []
    vpcs = {s.vpc_id for chosen in subnets.values() for s in chosen}
    vpc_id = next(iter(vpcs)) if len(vpcs) == 1 else None
    group_id = _group(clients, config, provider, vpc_id, vpcs, create, ssh_from, done)
    head_profile: str | None = None
    if head_role:
        head_profile, made = iam.ensure_head_profile(
            clients, config.cluster_name, provider.region, passed
        )
        done += made
    images_by_type = _images(clients, config, provider.region, done if create else [])
    # The head's profile goes with every type: a head may be of another type than
    # head_node_type (its fallback, when a recovering run replaces a reclaimed spot head)
    # and runs the autoscaler all the same; create_nodes leaves it off workers.
    contexts = {
        type_name: LaunchContext(
            placements=network.placements(subnets[type_name]),
            image_id=images_by_type.get(type_name),
            key_name=key_name,
            security_group_id=group_id,
            instance_profile_arn=head_profile,
        )
        for type_name in config.node_types
    }
    return contexts, done


def _subnets(
    clients: AwsClients, config: ClusterConfig, provider: AwsProviderConfig
) -> dict[str, list[network.Subnet]]:
    named = {name: subnet_ids(t.node_config) for name, t in config.node_types.items()}
    wanted = sorted({s for ids in named.values() for s in ids})
    known = network.describe_subnets(clients, wanted) if wanted else {}
    default: list[network.Subnet] | None = None
    subnets: dict[str, list[network.Subnet]] = {}
    for name, ids in named.items():
        missing = [s for s in ids if s not in known]
        if missing:
            raise ProviderError(f"{name}: subnet {missing[0]} not found in {provider.region}")
        if ids:
            subnets[name] = [known[s] for s in ids]
            continue
        if default is None:
            default = network.default_subnets(clients, provider.region, provider.availability_zones)
        subnets[name] = default
    return subnets


def _group(
    clients: AwsClients,
    config: ClusterConfig,
    provider: AwsProviderConfig,
    vpc_id: str | None,
    vpcs: set[str],
    create: bool,
    ssh_from: Callable[[str], list[str]],
    done: list[str],
) -> str | None:
    """The id of the launcher's own security group, when some node type names none."""
    name = group_name(config)
    if name is None:
        return None
    if vpc_id is None:
        raise ProviderError(
            f"the node types' subnets are in {len(vpcs)} VPCs ({', '.join(sorted(vpcs))}); "
            "a security group belongs to one: name groups with node_config.SecurityGroupIds"
        )
    if create:
        group_id, made = network.ensure_group(
            clients,
            name,
            vpc_id,
            config.cluster_name,
            ssh_from(vpc_id),
            provider.security_group_rules,
        )
        done += made
        return group_id
    found = network.find_group(clients, name, vpc_id)
    if found is None:
        raise ProviderError(f"security group {name} is missing; run `launcher up` again")
    return str(found["GroupId"])


def _images(
    clients: AwsClients, config: ClusterConfig, region: str, done: list[str]
) -> dict[str, str]:
    """Image ids for the node types that need one looked up (one lookup per kind and
    architecture)."""
    chosen: dict[tuple[str, str], str] = {}
    found: dict[str, str] = {}
    for type_name, node_type in config.node_types.items():
        if not needs_image(node_type.node_config):
            continue
        query = images.query_for(node_type.node_config)
        instance_type = node_type.node_config.get("InstanceType")
        arch = images.architecture(
            clients, instance_type if isinstance(instance_type, str) else None
        )
        if (query.what, arch) not in chosen:
            image = images.newest_image(clients, query, arch, region)
            chosen[(query.what, arch)] = image
            done.append(f"image for {arch}: {image} ({query.what})")
        found[type_name] = chosen[(query.what, arch)]
    return found
