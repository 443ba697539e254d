"""Isolation for the `launcher check` tests: every provider's credential discovery sees
only temp directories and loopback, and every connection this process makes is recorded,
so a test can assert that none left the machine."""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

_connected: list[Any] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect":
        _connected.append(args[1])


sys.addaudithook(_audit)
_PREFIXES = ("AWS_", "GOOGLE_", "CLOUDSDK_", "GCE_", "AZURE_", "KUBE", "MSI_", "IDENTITY_")


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No credentials of any cloud, and every metadata service on a closed loopback port:
    a home of its own, no cloud variables from this machine."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    for name in list(os.environ):
        if name.startswith(_PREFIXES):
            monkeypatch.delenv(name)
    closed = "127.0.0.1:9"
    for name, value in {
        "HOME": str(home),
        "LAUNCHER_HOME": str(home / "launcher"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(home / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"),
        "CLOUDSDK_CONFIG": str(home / "gcloud"),
        "NO_GCE_CHECK": "True",
        "GCE_METADATA_HOST": closed,
        "GCE_METADATA_IP": closed,
        "GCE_METADATA_ROOT": closed,
        "KUBECONFIG": str(home / "kubeconfig"),
        "AZURE_CONFIG_DIR": str(home / "azure"),
        "AZURE_POD_IDENTITY_AUTHORITY_HOST": f"http://{closed}",
        "NO_PROXY": "127.0.0.0/8,localhost",
    }.items():
        monkeypatch.setenv(name, value)
    (home / "gcloud").mkdir(exist_ok=True)
    (home / "gcloud" / "gce").write_text("False")
    _connected.clear()
    return home


def outside() -> list[Any]:
    """The addresses connected to since `isolate` that are not loopback."""
    found = []
    for address in _connected:
        if isinstance(address, tuple):
            try:
                loopback = ipaddress.ip_address(address[0]).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                found.append(address)
    return found


def check(path: Path) -> tuple[int, dict[str, Any]]:
    """`launcher check PATH --json`: its exit code and answer."""
    from tests.conftest import run_cli

    result = run_cli("check", str(path), "--json")
    assert result.exception is None, result.exception
    return result.exit_code, json.loads(result.stdout)


def by_aspect(answer: dict[str, Any], aspect: str) -> list[dict[str, Any]]:
    """The findings of the answer's (one) provider about `aspect`."""
    return [f for f in answer["providers"][0]["findings"] if f["aspect"] == aspect]
