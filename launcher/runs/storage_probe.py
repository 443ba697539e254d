"""Checks, on a Ray cluster's head, that a run's storage path is writable there and shared
by every node of the cluster. Copied to the head and run there, with RAY_ADDRESS set:

    python storage_probe.py PATH TIMEOUT_S

The head writes a file holding a random token under PATH/.launcher-probe-TOKEN/; then one
task per alive Ray node, pinned to it, reads that token (with PATH as that node sees it:
`~` is each node's own home) and writes a file of its own; the head then reads every
node's file, and removes the probe directory. Every wait is bounded by TIMEOUT_S.

Self-contained (the standard library and ray; pyarrow for a URI such as s3://...): no
launcher imports. Prints one line, MARK and a JSON object:
    {"checked": bool, "nodes": N, "workers": N, "problems": [...], "warnings": [...],
     "unchecked": null or why the path could not be checked}
each problem {"kind": ..., "node": {"ip", "id", "host", "head"} or null, "detail": ...}.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import secrets
import sys
import time
from typing import Any
from urllib.parse import urlparse

MARK = "launcher-storage-probe "
PROBE_PREFIX = ".launcher-probe-"
HEAD_FILE = "head"
# A file another node just wrote may take a moment to show on a network file system.
SEE_WAIT_S = 2.0


def describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= 240 else text[:237] + "..."


def is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


class Unchecked(Exception):
    """The path cannot be checked from this node (not that it is unusable)."""


def unknown_scheme(error: BaseException) -> bool:
    return "Unrecognized filesystem" in str(error) or "NotImplemented" in type(error).__name__


class LocalStore:
    """PATH as a directory of this node (`~` expanded with this node's home)."""

    def __init__(self, path: str) -> None:
        local = urlparse(path).path if path.startswith("file://") else path
        self.root = os.path.expanduser(local)
        if not os.path.isabs(self.root):
            raise ValueError(f"{path} is not an absolute path on this node")
        self.made: list[str] = []  # directories above the probe that this check made

    def prepare(self, probe: str) -> None:
        missing, folder = [], self.root
        while folder and not os.path.exists(folder) and folder != os.path.dirname(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        self.made = missing  # deepest first
        os.makedirs(os.path.join(self.root, probe))

    def write(self, name: str, text: str) -> None:
        with open(os.path.join(self.root, name), "w", encoding="utf-8") as out:
            out.write(text)

    def read(self, name: str) -> str | None:
        try:
            with open(os.path.join(self.root, name), encoding="utf-8") as source:
                return source.read()
        except FileNotFoundError:
            return None

    def remove(self, probe: str) -> None:
        import shutil

        shutil.rmtree(os.path.join(self.root, probe), ignore_errors=True)
        for folder in self.made:
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                continue
            except OSError:
                return


class ArrowStore:
    """PATH as a URI, through pyarrow's file systems (fsspec's where pyarrow has none)."""

    def __init__(self, path: str) -> None:
        try:
            pafs = importlib.import_module("pyarrow.fs")
        except ImportError as error:
            raise Unchecked(f"pyarrow is not importable ({error})") from None
        self.pafs = pafs
        try:
            self.fs, self.root = pafs.FileSystem.from_uri(path)
        except Exception as error:
            if not unknown_scheme(error):
                raise
            try:  # what Ray Train falls back to for the schemes pyarrow lacks
                fs, root = importlib.import_module("fsspec.core").url_to_fs(path)
            except Exception:
                raise error from None
            self.fs, self.root = pafs.PyFileSystem(pafs.FSSpecHandler(fs)), root
        self.root = self.root.rstrip("/")

    def _at(self, name: str) -> str:
        return f"{self.root}/{name}"

    def prepare(self, probe: str) -> None:
        self.fs.create_dir(self._at(probe), recursive=True)

    def write(self, name: str, text: str) -> None:
        with self.fs.open_output_stream(self._at(name)) as out:
            out.write(text.encode())

    def read(self, name: str) -> str | None:
        if self.fs.get_file_info(self._at(name)).type == self.pafs.FileType.NotFound:
            return None
        with self.fs.open_input_stream(self._at(name)) as source:
            data: bytes = source.read()
        return data.decode()

    def remove(self, probe: str) -> None:
        with contextlib.suppress(Exception):
            self.fs.delete_dir(self._at(probe))


def open_store(path: str) -> LocalStore | ArrowStore:
    return ArrowStore(path) if is_uri(path) else LocalStore(path)


def read_soon(store: LocalStore | ArrowStore, name: str) -> str | None:
    """The file's text, waiting a little (SEE_WAIT_S) for it to show; None if it does not."""
    deadline, delay = time.monotonic() + SEE_WAIT_S, 0.1
    while (text := store.read(name)) is None and time.monotonic() + delay < deadline:
        time.sleep(delay)
        delay *= 2
    return text


def node_check(path: str, probe: str, token: str, key: str) -> dict[str, Any]:
    """On one node: does it see the head's token, and can it write its own file there?"""
    try:
        store = open_store(path)
    except Unchecked as error:
        return {"kind": "unchecked", "detail": str(error)}
    except Exception as error:
        return {"kind": "open", "detail": describe(error)}
    try:
        seen = read_soon(store, f"{probe}/{HEAD_FILE}")
    except Exception as error:
        return {"kind": "read", "detail": describe(error)}
    if seen != token:
        where = getattr(store, "root", path)
        return {"kind": "unseen", "detail": f"{path} is {where} there"}
    try:
        store.write(f"{probe}/{key}", token + key)
    except Exception as error:
        return {"kind": "write", "detail": describe(error)}
    return {"kind": "ok"}


def node_info(node: dict[str, Any], head_id: str) -> dict[str, Any]:
    return {
        "ip": node.get("NodeManagerAddress", "?"),
        "id": node["NodeID"],
        "host": node.get("NodeManagerHostname", "?"),
        "head": node["NodeID"] == head_id,
    }


def run_node_checks(
    ray: Any, path: str, probe: str, token: str, deadline: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run node_check on every alive node, pinned there. Returns the nodes, and each one's
    outcome: {"kind" ("ok" when it passed), "node", "detail"}."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head_id = ray.get_runtime_context().get_node_id()
    nodes = [node_info(n, head_id) for n in ray.nodes() if n.get("Alive")]
    check = ray.remote(num_cpus=0, max_retries=0)(node_check)
    refs = {
        check.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["id"], soft=False)
        ).remote(path, probe, token, node["id"]): node
        for node in nodes
    }
    ready, waiting = ray.wait(
        list(refs), num_returns=len(refs), timeout=max(1.0, deadline - time.monotonic())
    )
    results = []
    for ref in ready:
        try:
            outcome = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
        except Exception as error:
            outcome = {"kind": "failed", "detail": describe(error)}
        results.append({**outcome, "node": refs[ref]})
    for ref in waiting:
        ray.cancel(ref, force=True)
        results.append({"kind": "unanswered", "node": refs[ref], "detail": ""})
    # Workers first, by address: the problem named first is a worker's where one has any.
    results.sort(key=lambda r: (r["node"]["head"], r["node"]["ip"], r["node"]["id"]))
    return nodes, results


def check(path: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    report: dict[str, Any] = {
        "checked": False,
        "nodes": 0,
        "workers": 0,
        "problems": [],
        "warnings": [],
        "unchecked": None,
    }
    try:
        store = open_store(path)
    except Unchecked as error:
        report["unchecked"] = f"{error} on the head"
        return report
    except Exception as error:
        report["problems"].append({"kind": "open", "node": None, "detail": describe(error)})
        return report
    token = secrets.token_hex(8)
    probe = PROBE_PREFIX + token
    try:
        try:
            store.prepare(probe)
            store.write(f"{probe}/{HEAD_FILE}", token)
        except Exception as error:
            report["problems"].append({"kind": "write", "node": None, "detail": describe(error)})
            return report
        check_nodes(report, store, path, probe, token, deadline)
    finally:
        store.remove(probe)
    return report


def check_nodes(
    report: dict[str, Any],
    store: LocalStore | ArrowStore,
    path: str,
    probe: str,
    token: str,
    deadline: float,
) -> None:
    import ray

    try:
        ray.init(logging_level=logging.ERROR, log_to_driver=False)
        nodes, results = run_node_checks(ray, path, probe, token, deadline)
    except Exception as error:
        report["problems"].append({"kind": "ray", "node": None, "detail": describe(error)})
        return
    report["nodes"] = len(nodes)
    report["workers"] = sum(1 for n in nodes if not n["head"])
    for result in results:
        kind, node = result["kind"], result["node"]
        if kind == "ok":
            seen = read_soon(store, f"{probe}/{node['id']}")
            if seen != token + node["id"]:
                report["problems"].append({"kind": "head-unseen", "node": node, "detail": ""})
        elif kind == "unchecked":
            report["warnings"].append({"kind": kind, "node": node, "detail": result["detail"]})
        else:
            report["problems"].append({"kind": kind, "node": node, "detail": result["detail"]})
    report["checked"] = True
    with contextlib.suppress(Exception):
        ray.shutdown()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: storage_probe.py PATH TIMEOUT_S", file=sys.stderr)
        return 2
    report = check(argv[1], float(argv[2]))
    sys.stdout.write(MARK + json.dumps(report, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
