"""Where an SSH connection goes: a leaf module, so the SSH runner and the file-copy code that
both need it do not import each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SSHTarget:
    host: str
    user: str
    port: int = 22
    key_path: str | None = None
    proxy_command: str | None = None

    def __str__(self) -> str:
        port = "" if self.port == 22 else f":{self.port}"
        return f"{self.user}@{self.host}{port}"
