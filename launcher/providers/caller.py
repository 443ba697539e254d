"""Where the launcher runs from, as the internet sees it: the one address a cloud firewall
lets SSH in from by default."""

from __future__ import annotations

import ipaddress
import urllib.request

from launcher.errors import ProviderError

CHECKIP_URL = "https://checkip.amazonaws.com"


def public_address(timeout_s: float = 5.0) -> str:
    """This machine's public IPv4 address, as a /32."""
    try:
        with urllib.request.urlopen(CHECKIP_URL, timeout=timeout_s) as answer:
            text = answer.read().decode().strip()
        return f"{ipaddress.IPv4Address(text)}/32"
    except (OSError, ValueError) as exc:
        raise ProviderError(
            f"cannot find this machine's public address from {CHECKIP_URL} ({exc}); set "
            "provider.allow_ssh_from to the address ranges SSH may come from, such as "
            "[203.0.113.7/32]"
        ) from exc
