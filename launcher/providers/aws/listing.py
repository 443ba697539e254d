"""An EC2 client for DescribeInstances alone, made in a fraction of the full client's time.

botocore builds an EC2 client from its whole EC2 model (a 4.5 MB JSON document of 862
operations, parsed and turned into methods on every client made): ~0.1 s of CPU, most of a
no-op `up`, which calls DescribeInstances once and nothing else. This client's model is
botocore's own, cut down to DescribeInstances and the shapes it refers to (its paginator
and the endpoint rules as they are): cut once per botocore version and kept in
`$LAUNCHER_HOME/botocore/`, then read in ~1 ms. Requests and answers are what the full
client's would be: the same operation model, serializer, parser, endpoint rules, retries
and credentials.

Where the user gives botocore models of their own (AWS_DATA_PATH, the `data_path`
setting, or ~/.aws/models) none is kept: the full client is used. The kept file names the
model file it was cut from (its path, size and mtime); a model file that changed is cut
again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from launcher.files import write_whole
from launcher.paths import launcher_home

SERVICE = "ec2"
OPERATIONS = ("DescribeInstances",)
_FORMAT = 1  # of the kept file; another format is cut again


def _stamp(path: str) -> list[int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_size, info.st_mtime_ns]


def cut_model(model: dict[str, Any], operations: tuple[str, ...]) -> dict[str, Any]:
    """`model` (a botocore service model) with only `operations` and the shapes they use."""
    shapes = model["shapes"]
    keep: set[str] = set()
    todo: list[str] = []
    for name in operations:
        operation = model["operations"][name]
        todo += [operation[part]["shape"] for part in ("input", "output") if part in operation]
        todo += [error["shape"] for error in operation.get("errors", [])]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        shape = shapes[name]
        todo += [shape[part]["shape"] for part in ("member", "key", "value") if part in shape]
        todo += [member["shape"] for member in shape.get("members", {}).values()]
    return {
        **model,
        "operations": {name: model["operations"][name] for name in operations},
        "shapes": {name: shapes[name] for name in sorted(keep)},
    }


def _kept_path() -> Path:
    import botocore

    return launcher_home() / "botocore" / f"{SERVICE}-listing-{botocore.__version__}.json"


def _own_models_in_use(session: Any) -> bool:
    from botocore.loaders import Loader

    return bool(session.get_config_variable("data_path")) or os.path.isdir(
        Loader.CUSTOMER_DATA_PATH
    )


def _read_kept(path: Path) -> dict[str, Any] | None:
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("format") != _FORMAT:
        return None
    stamp = _stamp(str(kept.get("source", "")))
    if stamp is None or stamp != kept.get("stamp"):
        return None  # botocore's model file changed (or moved) since it was cut
    return kept


def _cut(path: Path) -> dict[str, Any]:
    """Cut botocore's models for the listing, and keep them at `path` (best effort)."""
    from botocore.loaders import Loader

    loader = Loader()
    version = loader.determine_latest_version(SERVICE, "service-2")
    _, found = loader.load_data_with_path(f"{SERVICE}/{version}/service-2")
    # The file as found (botocore names it without its extension: .json.gz or .json).
    source = next((found + e for e in (".json.gz", ".json") if os.path.exists(found + e)), found)
    model = loader.load_service_model(SERVICE, "service-2", version)
    pages = loader.load_service_model(SERVICE, "paginators-1", version)["pagination"]
    kept = {
        "format": _FORMAT,
        "api_version": version,
        "source": source,
        "stamp": _stamp(source),
        "models": {
            "service-2": cut_model(model, OPERATIONS),
            "paginators-1": {"pagination": {n: pages[n] for n in OPERATIONS if n in pages}},
            "endpoint-rule-set-1": loader.load_service_model(
                SERVICE, "endpoint-rule-set-1", version
            ),
        },
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps(kept))
    except OSError:
        pass  # cut again next time
    return kept


def listing_client(config: Any) -> Any | None:
    """A botocore EC2 client that has describe_instances (and its paginator) only, with
    `config` (a botocore Config naming the region); None where the user's own botocore
    models are in use, or botocore's could not be cut (make the full client then)."""
    import botocore.session
    from botocore.loaders import Loader

    session = botocore.session.Session()
    if _own_models_in_use(session):
        return None
    path = _kept_path()
    try:
        kept = _read_kept(path) or _cut(path)
        version: str = kept["api_version"]
        models: dict[str, Any] = kept["models"]
    except Exception:  # a botocore whose models are laid out otherwise: the full client
        return None

    class _ListingLoader(Loader):  # type: ignore[misc]
        """botocore's loader, with the cut EC2 models in place of the whole ones."""

        def load_service_model(
            self, service_name: str, type_name: str, api_version: str | None = None
        ) -> Any:
            if service_name == SERVICE and type_name in models and api_version in (None, version):
                return models[type_name]
            return super().load_service_model(service_name, type_name, api_version)

    session.register_component("data_loader", _ListingLoader())
    return session.create_client(SERVICE, config=config)
