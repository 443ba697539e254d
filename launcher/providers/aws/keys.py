"""The EC2 key pair the launcher logs in with, when the config names none.

Its private key is kept at `$LAUNCHER_HOME/keys/NAME.pem` (mode 0600, written once, never
overwritten). The key is made here and saved before EC2 hears of it (ImportKeyPair), so an
`up` interrupted at any point leaves either no key pair, or a private key that the next `up`
imports, or both: never a key pair in EC2 whose private key is lost (as CreateKeyPair,
which answers with the only copy of the private key, could). A key pair that exists in EC2
whose private key is not on this machine cannot be used: the message says how to go on.
"""

from __future__ import annotations

from launcher.errors import ProviderError
from launcher.providers.aws.clients import (
    AwsClients,
    boto_errors,
    error_code,
    error_message,
    is_not_found,
)
from launcher.providers.aws.instances import aws_tags
from launcher.providers.aws.names import default_key_name
from launcher.providers.base import TAG_CLUSTER
from launcher.providers.keyfiles import key_path, new_private_key, public_key, write_private

__all__ = ["default_key_name", "delete_key_pair", "ensure_key_pair", "key_pair_exists"]


def key_pair_exists(clients: AwsClients, key_name: str) -> bool:
    try:
        clients.ec2.describe_key_pairs(KeyNames=[key_name])
    except boto_errors() as exc:
        if is_not_found(exc):
            return False
        raise ProviderError(f"cannot read key pair {key_name}: {error_message(exc)}") from exc
    return True


def ensure_key_pair(clients: AwsClients, key_name: str, cluster_name: str) -> str:
    """Make sure EC2 has `key_name` and this machine its private key (at `key_path`).
    Returns what was done ("" when both existed)."""
    path = key_path(key_name)
    exists = key_pair_exists(clients, key_name)
    if exists and path.exists():
        return ""
    if exists:
        raise ProviderError(
            f"key pair {key_name} exists in EC2 but its private key is not at {path}; copy it "
            "there from the machine that created it, or name your own key with "
            "auth.ssh_private_key and node_config.KeyName"
        )
    done = f"imported key pair {key_name} from {path}"
    if not path.exists():
        # Saved first: if what follows is interrupted, the next `up` imports this key.
        write_private(path, new_private_key())
        done = f"created key pair {key_name} (private key {path}, mode 0600)"
    ours = public_key(path)
    tags = [{"ResourceType": "key-pair", "Tags": aws_tags({TAG_CLUSTER: cluster_name})}]
    try:
        clients.ec2.import_key_pair(
            KeyName=key_name, PublicKeyMaterial=ours.encode(), TagSpecifications=tags
        )
    except boto_errors() as exc:
        # An earlier `up` killed after sending its ImportKeyPair may see it carried out
        # after this one looked: the key pair is then ours if it holds our public key.
        if error_code(exc) == "InvalidKeyPair.Duplicate" and held_key(clients, key_name) == ours:
            return f"key pair {key_name} found holding the public key of {path}"
        raise ProviderError(f"cannot create key pair {key_name}: {error_message(exc)}") from exc
    return done


def held_key(clients: AwsClients, key_name: str) -> str:
    """`TYPE BASE64` of the public key EC2 holds under `key_name` ("" when it cannot say)."""
    try:
        found = clients.ec2.describe_key_pairs(KeyNames=[key_name], IncludePublicKey=True)
    except boto_errors():
        return ""
    for pair in found.get("KeyPairs", []):
        words = str(pair.get("PublicKey", "")).split()
        if len(words) >= 2:
            return f"{words[0]} {words[1]}"
    return ""


def delete_key_pair(clients: AwsClients, key_name: str) -> list[str]:
    """Remove the key pair from EC2 (`down --purge`); the private key file stays, since it
    is the user's only copy of a credential that may still open other machines."""
    if not key_pair_exists(clients, key_name):
        return []
    try:
        clients.ec2.delete_key_pair(KeyName=key_name)
    except boto_errors() as exc:
        raise ProviderError(f"cannot delete key pair {key_name}: {error_message(exc)}") from exc
    return [f"key pair {key_name} (its private key stays at {key_path(key_name)})"]
