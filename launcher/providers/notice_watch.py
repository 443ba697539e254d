"""Run on a spot worker (its source is sent as `python -c`; standard library and Ray only):
watch the instance metadata for the cloud's notice that it takes the machine back, and tell
the head's autoscaler through Ray's key-value store, then exit. `--cloud` says whose
metadata service it asks.

AWS (`--cloud aws`): `GET /latest/meta-data/spot/instance-action` (IMDSv2: a token from
`PUT /latest/api/token` first) answers 404 until a notice, then
`{"action": "terminate" | "stop" | "hibernate", "time": "2026-11-26T01:02:03Z"}`, about two
minutes ahead. The metadata endpoint is `$AWS_EC2_METADATA_SERVICE_ENDPOINT`, else
`ec2_metadata_service_endpoint` in ~/.aws/config (as botocore reads them), else
http://169.254.169.254.

Azure (`--cloud azure`): Scheduled Events, `GET /metadata/scheduledevents?api-version=...`
with `Metadata: true`, answers a document whose `Events` list a `Preempt` event naming this
VM in `Resources` about 30 s before a spot VM is evicted, with its `NotBefore` (an RFC 1123
date; empty once the event has begun). The metadata endpoint is
`$AZURE_POD_IDENTITY_AUTHORITY_HOST` (where azure-identity reads the instance metadata
service, when set), else http://169.254.169.254.

The key written is NOTICE_PREFIX + the node's id, its value the reclaim time (epoch seconds),
as launcher/autoscaler/observe/notice_keys.py says (the values are repeated here: this runs
where the launcher is not installed); `launcher.autoscaler.observe.ray_state` reads them
with Ray's demand.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from email.utils import parsedate_to_datetime

NOTICE_PREFIX = "launcher/reclaim/"
NOTICE_NAMESPACE = "launcher"
DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_TTL_S = "21600"
AZURE_EVENTS_API = "2020-07-01"
AZURE_EVICTIONS = ("Preempt",)


def endpoint() -> str:
    """AWS's instance metadata endpoint, as botocore finds it."""
    configured = os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
    if configured:
        return configured.rstrip("/")
    parser = configparser.ConfigParser()
    parser.read(os.path.expanduser("~/.aws/config"))
    value = parser.get("default", "ec2_metadata_service_endpoint", fallback="")
    return (value or DEFAULT_ENDPOINT).rstrip("/")


def parse_notice(body: str) -> float | None:
    """The reclaim time of an instance-action answer (None when it is not a notice)."""
    try:
        data = json.loads(body)
        return datetime.fromisoformat(str(data["time"]).replace("Z", "+00:00")).timestamp()
    except (ValueError, KeyError, TypeError):
        return None


def read_notice(base: str, timeout_s: float = 2.0) -> float | None:
    """The reclaim time the metadata service announces, or None (no notice, or no answer)."""
    headers = {}
    try:
        token_request = urllib.request.Request(
            f"{base}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": TOKEN_TTL_S},
        )
        with urllib.request.urlopen(token_request, timeout=timeout_s) as reply:
            headers["X-aws-ec2-metadata-token"] = reply.read().decode()
    except (urllib.error.URLError, OSError):
        pass  # IMDSv1 only: ask without a token
    request = urllib.request.Request(
        f"{base}/latest/meta-data/spot/instance-action", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return parse_notice(reply.read().decode())
    except (urllib.error.URLError, OSError):
        return None  # 404 until a notice; no answer is no notice either


def azure_endpoint() -> str:
    return (os.environ.get("AZURE_POD_IDENTITY_AUTHORITY_HOST") or DEFAULT_ENDPOINT).rstrip("/")


def parse_scheduled_events(body: str, vm_name: str, now: float) -> float | None:
    """The eviction time of a Scheduled Events document's Preempt event for `vm_name` (now,
    when the event has begun and has no NotBefore any more), or None."""
    try:
        events = json.loads(body).get("Events") or []
    except (ValueError, AttributeError):
        return None
    for event in events:
        if not isinstance(event, dict) or event.get("EventType") not in AZURE_EVICTIONS:
            continue
        resources = [str(r).lower() for r in event.get("Resources") or ()]
        if resources and vm_name.lower() not in resources:
            continue
        not_before = str(event.get("NotBefore") or "")
        try:
            return parsedate_to_datetime(not_before).timestamp() if not_before else now
        except (TypeError, ValueError):
            return now
    return None


def read_azure_notice(base: str, vm_name: str, timeout_s: float = 2.0) -> float | None:
    """The eviction time Azure's Scheduled Events announce for this VM, or None."""
    request = urllib.request.Request(
        f"{base}/metadata/scheduledevents?api-version={AZURE_EVENTS_API}",
        headers={"Metadata": "true"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return parse_scheduled_events(reply.read().decode(), vm_name, time.time())
    except (urllib.error.URLError, OSError):
        return None


def report(gcs_address: str, node_id: str, at: float) -> None:
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    client = GcsClient(address=gcs_address)
    client.internal_kv_put(
        (NOTICE_PREFIX + node_id).encode(), repr(at).encode(), True, NOTICE_NAMESPACE.encode()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="notice_watch")
    parser.add_argument("--gcs", required=True, help="the head's GCS, ip:port")
    parser.add_argument("--node-id", required=True, help="this node's id (its instance id)")
    parser.add_argument("--cloud", choices=("aws", "azure"), default="aws")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--label", help="names the process (to find it again); not used")
    args = parser.parse_args(argv)
    if args.cloud == "azure":
        base = azure_endpoint()

        def read() -> float | None:
            return read_azure_notice(base, args.node_id)
    else:
        base = endpoint()

        def read() -> float | None:
            return read_notice(base)

    while True:
        at = read()
        if at is not None:
            break
        time.sleep(args.interval)
    while True:  # the head must hear of it: until the GCS takes it
        try:
            report(args.gcs, args.node_id, at)
            return 0
        except Exception as exc:  # a GCS restarting, or busy
            print(f"could not report the notice yet: {exc}", file=sys.stderr)
            if time.time() > at:
                return 1
            time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
