"""What the resource modules share: the answers that start long-running operations, ids
and references, and ARM's validation errors."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from fakes.azure.faults import ArmError
from fakes.azure.routes import Ctx, Reply
from fakes.azure.store import Resource, now_text, resource_id


def etag() -> str:
    return f'W/"{uuid.uuid4()}"'


def location_of(ctx: Ctx, body: dict[str, Any]) -> str:
    location = body.get("location")
    if not location:
        raise ArmError(
            400, "LocationRequired", "The location property is required for this definition."
        )
    return str(location).replace(" ", "").lower()


def new_resource(ctx: Ctx, body: dict[str, Any], kind: str | None = None) -> Resource:
    """A resource for the PUT of ctx's target (not stored yet), with `body`'s id, name, type."""
    t = ctx.target
    assert t.sub and t.rg and t.name
    kind = kind or t.kind
    assert kind
    arm_id = resource_id(t.sub, t.rg, kind, t.name)
    body = {"id": arm_id, "name": t.name, "type": kind, **body}
    res = Resource(arm_id, kind, t.sub, t.rg, t.name, body)
    res.extra["created_text"] = now_text()
    return res


def ref(obj: Any) -> str | None:
    """The id of a reference (`{"id": ...}`), if any."""
    if isinstance(obj, dict) and obj.get("id"):
        return str(obj["id"])
    return None


def invalid_reference(ref_id: str, by: str) -> ArmError:
    return ArmError(
        400,
        "InvalidResourceReference",
        f"Resource {ref_id} referenced by resource {by} was not found. Please make sure that "
        "the referenced resource exists, and that both resources are in the same region.",
    )


def begin_put(
    ctx: Ctx,
    res: Resource,
    created: bool,
    done: Callable[[], None] | None = None,
    failed: Callable[[ArmError], None] | None = None,
) -> Reply:
    """Answer a PUT with an LRO: 201 (created) / 200, provisioningState Creating/Updating,
    Azure-AsyncOperation; after lro_s the resource is Succeeded (`done`), or Failed when a
    fault fails the operation (`failed`)."""
    server = ctx.server
    res.state = "Creating" if created else "Updating"
    op = server.begin(ctx, res.id, res.body.get("location"))

    def work(op_: Any) -> None:
        if server.store.find(res.id) is res:
            res.state = "Succeeded"
            if done is not None:
                done()
        server.ops.succeed(op_)

    def fault(error: ArmError) -> None:
        res.state = "Failed"
        if failed is not None:
            failed(error)

    server.run_op(ctx, op, work, fault)
    return Reply(201 if created else 200, res.answer(), server.lro_headers(ctx, op, False))


def begin_delete(ctx: Ctx, res: Resource, remove: Callable[[], None]) -> Reply:
    """Answer a DELETE with an LRO (202, Location and Azure-AsyncOperation); after lro_s
    `remove()` runs, unless a fault fails the operation (the resource stays)."""
    server = ctx.server
    before = res.state
    res.state = "Deleting"
    op = server.begin(ctx, res.id, res.body.get("location"))

    def work(op_: Any) -> None:
        remove()
        server.ops.succeed(op_)

    def fault(_: ArmError) -> None:
        res.state = before

    server.run_op(ctx, op, work, fault)
    return Reply(202, None, server.lro_headers(ctx, op, True))


def tags_of(body: dict[str, Any]) -> dict[str, str]:
    tags = body.get("tags") or {}
    if not isinstance(tags, dict):
        raise ArmError(400, "InvalidRequestContent", "tags must be an object")
    if len(tags) > 50:
        raise ArmError(400, "InvalidTagCount", "A resource may have at most 50 tags.")
    for key in tags:
        if len(key) > 512 or any(c in key for c in "<>%&\\?/"):
            raise ArmError(
                400, "InvalidTagNameCharacters", f"The tag name '{key}' has invalid characters."
            )
    return {str(k): str(v) for k, v in tags.items()}
