"""What a client of fakes/gce/server.py needs: the service-account key file, the environment
of processes here and on instances, gcloud runs, googleapiclient clients (a mixin of
GceServer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from fakes.gce.routes import APIS


class ClientSide:
    """GceServer's addresses and client-facing helpers (they need its project,
    account_email, dir and bound port)."""

    project: str
    account_email: str
    dir: Path
    _port: int
    _gcloud_ready: bool

    @property
    def port(self) -> int:
        return int(self._port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def compute_url(self) -> str:
        return f"{self.url}/compute/v1/"

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    @property
    def key_file(self) -> Path:
        return self.dir / "key.json"

    def endpoint(self, api: str) -> str:
        return self.url + APIS[api][1]

    def _write_key(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        info = {
            "type": "service_account",
            "project_id": self.project,
            "private_key_id": uuid.uuid4().hex,
            "private_key": pem,
            "client_email": self.account_email,
            "client_id": "100000000000000000001",
            "auth_uri": f"{self.url}/auth",
            "token_uri": self.token_uri,
            "auth_provider_x509_cert_url": f"{self.url}/certs",
            "client_x509_cert_url": f"{self.url}/certs/{self.account_email.split('@')[0]}",
            "universe_domain": "googleapis.com",
        }
        self.key_file.write_text(json.dumps(info, indent=2))
        self.key_file.chmod(0o600)

    def env(self) -> dict[str, str]:
        """Variables that send google-auth, googleapiclient users and gcloud here, offline:
        the endpoint overrides, the key file, a gcloud config directory of the server's
        own, the project, no prompts, no usage reporting, no update checks, no metadata
        server (google-auth and gcloud would otherwise probe 169.254.169.254)."""
        return {
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": self.endpoint("compute"),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM": self.endpoint("iam"),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER": self.endpoint(
                "cloudresourcemanager"
            ),
            "GOOGLE_APPLICATION_CREDENTIALS": str(self.key_file),
            "CLOUDSDK_CONFIG": str(self.dir / "gcloud"),
            "CLOUDSDK_CORE_PROJECT": self.project,
            "GOOGLE_CLOUD_PROJECT": self.project,
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true",
            "CLOUDSDK_SURVEY_DISABLE_PROMPTS": "true",
            "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false",
            "NO_GCE_CHECK": "True",
            "GCE_METADATA_HOST": f"127.0.0.1:{self.port}",
            "GCE_METADATA_ROOT": f"127.0.0.1:{self.port}",
            "GCE_METADATA_IP": f"127.0.0.1:{self.port}",
        }

    def metadata_host(self, instance_id: str) -> str:
        """GCE_METADATA_HOST for instance `instance_id`: its metadata server here."""
        return f"127.0.0.1:{self.port}/meta/{instance_id}"

    def host_env(self, instance_id: str) -> dict[str, str]:
        """The variables of a session on instance `instance_id` (GceHosts sets them through
        sshd's SetEnv): the endpoint overrides, and the instance's metadata server for
        google-auth (GCE_METADATA_HOST, GCE_METADATA_IP) and gcloud (GCE_METADATA_ROOT), from
        which google.auth.default() gets the project and the instance's service account
        token, as on GCE."""
        metadata = self.metadata_host(instance_id)
        return {
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": self.endpoint("compute"),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM": self.endpoint("iam"),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER": self.endpoint(
                "cloudresourcemanager"
            ),
            "GCE_METADATA_HOST": metadata,
            "GCE_METADATA_IP": metadata,
            "GCE_METADATA_ROOT": metadata,
        }

    def write_google_files(self, home: Path, key: bool = False) -> None:
        """In `home`/.config/gcloud: a gcloud configuration with the endpoint overrides and,
        given `key`, the fake's service-account key as application default credentials
        (which google.auth.default() prefers to the metadata server)."""
        config = home / ".config" / "gcloud"
        (config / "configurations").mkdir(parents=True, exist_ok=True)
        if key:
            shutil.copyfile(self.key_file, config / "application_default_credentials.json")
            (config / "application_default_credentials.json").chmod(0o600)
        (config / "active_config").write_text("default")
        (config / "gce").write_text("False" if key else "True")
        (config / "configurations" / "config_default").write_text(
            "[core]\ndisable_usage_reporting = true\n"
            "[component_manager]\ndisable_update_check = true\n"
            f"[api_endpoint_overrides]\ncompute = {self.endpoint('compute')}\n"
            f"iam = {self.endpoint('iam')}\n"
            f"cloudresourcemanager = {self.endpoint('cloudresourcemanager')}\n"
        )

    def gcloud(
        self, *args: str, timeout: float = 180, prefix: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """Run the real gcloud against this server (this process's own Google/gcloud
        variables dropped), capturing its output; the first call activates the key file
        (`gcloud auth activate-service-account --key-file`). `prefix` goes before the
        command (e.g. strace)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CLOUDSDK_", "GOOGLE_", "GCE_")) and k != "VIRTUAL_ENV"
        }
        env.update(self.env())
        if not self._gcloud_ready and args[:2] != ("auth", "activate-service-account"):
            done = self.gcloud("auth", "activate-service-account", "--key-file", str(self.key_file))
            if done.returncode != 0:
                raise RuntimeError(f"gcloud could not activate the fake's key: {done.stderr}")
        if args[:2] == ("auth", "activate-service-account"):
            self._gcloud_ready = True
        return subprocess.run(
            [*prefix, shutil.which("gcloud") or "gcloud", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def credentials(self) -> Any:
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            str(self.key_file), scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )

    def client(self, api: str = "compute", credentials: Any = None) -> Any:
        """A googleapiclient resource for `api` (compute, iam, cloudresourcemanager) with
        the static discovery document, sent here, authorised by the key file's account."""
        from googleapiclient import discovery

        version = "v1"
        return discovery.build(
            api,
            version,
            static_discovery=True,
            credentials=credentials or self.credentials(),
            client_options={"api_endpoint": self.endpoint(api)},
            cache_discovery=False,
        )
