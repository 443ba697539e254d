"""Template deployments (Microsoft.Resources/deployments) of a resource group, for
fakes/azure/server.py: what Ray's Azure provider uses to make its network and its VMs.

`PUT .../resourcegroups/{rg}/providers/Microsoft.Resources/deployments/{name}` with
`{"properties": {"mode": "Incremental", "template": {...}, "parameters": {...}}}`:
- the template and parameters are checked at once (templates.py): a bad one answers 400
  InvalidTemplate, as ARM's validation does, and nothing is made;
- else 201 (200 for a deployment of that name already there) with provisioningState
  Accepted and the fake's LRO headers (lro.py); a deployment of that name still running
  answers 409 DeploymentActive;
- the deployment engine (a thread per deployment) makes the template's resources through
  the fake's own handlers, as ARM's engine calls the resource providers: each starts once
  everything in its dependsOn is made, independent ones side by side; a resource's own
  long-running operation is waited for. These calls are in the call log with origin
  `deployment:{name}` (a client never sees them); capacity, quota and the other knobs
  apply to them as to any call;
- when a resource fails, nothing more is started, what is under way finishes, and the
  deployment ends Failed with ARM's `DeploymentFailed` error, whose `details` hold each
  inner resource's error (code, message, target: the resource's id) ; the resources made
  stay (incremental mode deletes nothing);
- `GET` answers the deployment (provisioningState, outputs once Succeeded, error once
  Failed, `outputResources`), 404 DeploymentNotFound if none.
Only `Incremental` mode is modelled (`Complete` is refused with 400 InvalidDeployment).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fakes.azure.faults import ArmError, Call
from fakes.azure.routes import Ctx, Reply, Target, find_handler, handles, operation_name, parse
from fakes.azure.store import now_text
from fakes.azure.templates import Instance, Scope, TemplateError, bind_parameters, dependencies
from fakes.azure.templates import outputs as template_outputs
from fakes.azure.templates import plan as template_plan

if TYPE_CHECKING:
    from fakes.azure.lro import Operation
    from fakes.azure.server import AzureServer

DEPLOYMENT = "Microsoft.Resources/deployments"
FAILED_MESSAGE = (
    "At least one resource deployment operation failed. Please list deployment operations "
    "for details. Please see https://aka.ms/arm-deployment-operations for usage details."
)


# ARM takes a body's property names without case; the fake's handlers read Azure's own
# casing, so the engine puts the names Ray's templates spell otherwise back into it.
CANONICAL = {
    k.lower(): k
    for k in (
        "publicIPAddress",
        "publicIPAllocationMethod",
        "publicIPAddressVersion",
        "privateIPAddress",
        "privateIPAllocationMethod",
        "networkSecurityGroup",
        "ipConfigurations",
        "networkInterfaces",
    )
}


def canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {CANONICAL.get(k.lower(), k): canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


@dataclass
class Deployment:
    id: str
    sub: str
    rg: str
    name: str
    location: str
    mode: str
    template: dict[str, Any]
    parameters: dict[str, Any]  # as given
    state: str = "Accepted"
    timestamp: str = field(default_factory=now_text)
    correlation: str = field(default_factory=lambda: str(uuid.uuid4()))
    outputs: dict[str, Any] | None = None
    error: ArmError | None = None
    made: list[str] = field(default_factory=list)  # ids of the resources it made

    def answer(self) -> dict[str, Any]:
        digest = hashlib.sha256(json.dumps(self.template, sort_keys=True).encode()).hexdigest()
        props: dict[str, Any] = {
            "templateHash": str(int(digest[:15], 16)),
            "parameters": {
                k: {"type": "String", "value": v.get("value")} for k, v in self.parameters.items()
            },
            "mode": self.mode,
            "provisioningState": self.state,
            "timestamp": self.timestamp,
            "duration": "PT0S",
            "correlationId": self.correlation,
            "dependencies": [],
            "outputResources": [{"id": i} for i in self.made],
        }
        if self.outputs is not None:
            props["outputs"] = self.outputs
        if self.error is not None:
            props["error"] = self.error.error()
        return {"id": self.id, "name": self.name, "type": DEPLOYMENT, "properties": props}


class Deployments:
    """The deployments the server holds (its lock guards them)."""

    def __init__(self, server: AzureServer) -> None:
        self.server = server
        self.by_key: dict[str, Deployment] = {}

    def reset(self) -> None:
        self.by_key.clear()


def _key(t: Target) -> str:
    return f"{t.sub}/{t.rg}/{t.name}".lower()


def _deployments(server: AzureServer) -> Deployments:
    found: Deployments = server._module("_deployments", Deployments)
    return found


@handles(DEPLOYMENT, "get")
def get_deployment(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    ctx.server.store.group(t.sub, t.rg)
    found = _deployments(ctx.server).by_key.get(_key(t))
    if found is None:
        raise ArmError(404, "DeploymentNotFound", f"Deployment '{t.name}' could not be found.")
    return Reply(200, found.answer())


@handles(DEPLOYMENT, "list:get")
def list_deployments(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg
    ctx.server.store.group(t.sub, t.rg)
    prefix = f"{t.sub}/{t.rg}/".lower()
    book = _deployments(ctx.server).by_key
    return Reply(200, {"value": [d.answer() for k, d in book.items() if k.startswith(prefix)]})


@handles(DEPLOYMENT, "put")
def put_deployment(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    group = server.store.live_group(t.sub, t.rg)
    book = _deployments(server)
    before = book.by_key.get(_key(t))
    if before is not None and before.state in ("Accepted", "Running"):
        raise ArmError(
            409,
            "DeploymentActive",
            f"Unable to edit or replace deployment '{t.name}': previous deployment from "
            f"'{before.timestamp}' is still active (current provisioning state: "
            f"{before.state}). Please see https://aka.ms/arm-deploy for usage details.",
        )
    props = (ctx.body or {}).get("properties")
    if not isinstance(props, dict) or not isinstance(props.get("template"), dict):
        raise ArmError(
            400,
            "InvalidRequestContent",
            "The request content was invalid and could not be deserialized: 'Required "
            "property 'template' or 'templateLink' not found in JSON.'",
        )
    mode = str(props.get("mode") or "")
    if mode.lower() != "incremental":
        raise ArmError(
            400,
            "InvalidDeployment",
            f"The deployment mode '{mode}' is not modelled by the fake ARM (Incremental only).",
        )
    template = copy.deepcopy(props["template"])
    given = copy.deepcopy(props.get("parameters") or {})
    group_view = {
        "id": group.id,
        "name": group.name,
        "type": "Microsoft.Resources/resourceGroups",
        "location": group.location,
        "tags": dict(group.tags),
        "properties": {"provisioningState": "Succeeded"},
    }
    deployment = Deployment(
        f"{group.id}/providers/{DEPLOYMENT}/{t.name}",
        t.sub,
        group.name,
        t.name,
        group.location,
        "Incremental",
        template,
        given,
    )
    engine = _Engine(server, deployment, ctx.call.principal)
    try:
        engine.validate(group_view)
    except TemplateError as error:
        raise ArmError(400, error.code, str(error)) from error
    book.by_key[_key(t)] = deployment
    op = server.begin(ctx, deployment.id, group.location)
    op.namespace = "Microsoft.Resources"
    engine.op = op
    if ctx.op_fault is not None:  # a fault fails the operation: nothing is made
        server.run_op(ctx, op, lambda _: None, engine.end)
    else:
        threading.Thread(target=engine.run, daemon=True, name=f"azure-fake-deploy-{t.name}").start()
    status = 200 if before is not None else 201
    return Reply(status, deployment.answer(), server.lro_headers(ctx, op, False))


class _Engine:
    """Makes one deployment's resources (see the module docstring)."""

    def __init__(self, server: AzureServer, deployment: Deployment, principal: str | None) -> None:
        self.server = server
        self.deployment = deployment
        self.principal = principal
        self.op: Operation | None = None
        self.scope: Scope | None = None
        self.instances: list[Instance] = []
        self.needs: dict[int, set[int]] = {}
        self.epoch = server._epoch  # a reset() ends the run

    def validate(self, group_view: dict[str, Any]) -> None:
        d = self.deployment
        params = bind_parameters(d.template, d.parameters)
        scope = Scope(d.sub, group_view, params, d.template.get("variables") or {}, self.lookup)
        for name in list(params):  # a default that is an expression
            value = params[name]
            if isinstance(value, str) and value.startswith("[") and not value.startswith("[["):
                from fakes.azure.templates import evaluate

                params[name] = evaluate(value, scope)
        self.instances = template_plan(d.template, scope)
        scope.names = {i.name: i.id for i in self.instances if i.enabled}
        self.needs = dependencies(self.instances)
        self.scope = scope

    def lookup(self, arm_id: str, full: bool) -> Any:
        """reference(): a resource's properties (its whole body when `full`)."""
        res = self.server.store.find(arm_id)
        if res is None:
            raise TemplateError(
                f"The Resource '{arm_id}' was not found (referenced by the template)."
            )
        body = res.answer()
        return body if full else body.get("properties", {})

    # -- the run (its own thread) --

    def run(self) -> None:
        try:
            self._run()
        except Exception as error:  # a bug of the fake: the deployment fails, not hangs
            with self.server.cond:
                self.server.errors.append(error)
                self.end(ArmError(500, "InternalServerError", f"fake ARM: {error!r}"))

    def _run(self) -> None:
        server = self.server
        assert self.scope is not None
        with server.cond:
            self.deployment.state = "Running"
            pending = {i.key for i in self.instances if i.enabled}
            running: dict[int, Operation | None] = {}
            done: set[int] = {i.key for i in self.instances if not i.enabled}
            errors: list[ArmError] = []
            while True:
                if not errors:
                    for key in sorted(pending):
                        if self.needs[key] <= done:
                            pending.discard(key)
                            started = self.start(self.instances[key], errors)
                            if not isinstance(started, bool):
                                running[key] = started
                finished = [k for k, op in running.items() if op is None or op.done]
                for key in finished:
                    op = running.pop(key)
                    if op is not None and op.status != "Succeeded":
                        errors.append(self.inner(self.instances[key], op.error))
                    else:
                        done.add(key)
                        self.deployment.made.append(self.instances[key].id)
                if finished:
                    continue
                if not running or server._epoch != self.epoch:
                    break
                server.cond.wait(1.0)
            if server._epoch != self.epoch:
                return
            if errors:
                self.end(
                    ArmError(
                        400,
                        "DeploymentFailed",
                        FAILED_MESSAGE,
                        details=[e.error() for e in errors],
                    )
                )
                return
            try:
                outs = template_outputs(self.deployment.template, self.scope)
            except TemplateError as error:
                self.end(ArmError(400, "InvalidTemplate", str(error)))
                return
            self.deployment.outputs = outs
            self.end(None)

    def inner(self, inst: Instance, error: ArmError | None) -> ArmError:
        error = error or ArmError(500, "InternalServerError", "The operation failed.")
        return ArmError(error.status, error.code, error.message, error.details, target=inst.id)

    def start(self, inst: Instance, errors: list[ArmError]) -> Operation | bool | None:
        """PUT one resource through the fake's handler. Its operation (None: made at once);
        False when it was refused (the error added to `errors`)."""
        assert self.scope is not None
        server = self.server
        try:
            body = inst.body(self.scope)
        except TemplateError as error:  # raised while deploying, as ARM's engine reports it
            errors.append(ArmError(400, "InvalidTemplate", str(error), target=inst.id))
            return False
        path = inst.id
        try:
            target = parse(path)
        except ArmError as error:
            errors.append(self.inner(inst, error))
            return False
        exists = server._exists(target)
        call = Call(
            server.next_seq(),
            "PUT",
            path,
            {"api-version": inst.api_version},
            body,
            operation_name(target, "PUT", exists),
            target.kind,
            target.child or target.name,
            target.rg,
            self.principal,
            f"deployment:{self.deployment.name}",
        )
        handler = find_handler(target, "PUT")
        if handler is None:
            missing = ArmError(
                400,
                "NoRegisteredProviderFound",
                f"No registered resource provider found for type '{inst.kind}' (fake ARM).",
            )
            server.record(call, missing.status, missing.code, False)
            errors.append(self.inner(inst, missing))
            return False
        ctx = Ctx(server, call, target, canonical(json.loads(json.dumps(body))), inst.api_version)
        try:
            reply = handler(ctx)
        except ArmError as error:
            server.record(call, error.status, error.code, False)
            errors.append(self.inner(inst, error))
            return False
        server.record(call, reply.status, None, False)
        status_url = reply.headers.get("Azure-AsyncOperation") or reply.headers.get("Location")
        if not status_url:
            return None
        op_id = status_url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[1]
        return server.ops.poll_status(op_id)

    def end(self, error: ArmError | None) -> None:
        d = self.deployment
        d.state = "Failed" if error is not None else "Succeeded"
        d.error = error
        if self.op is not None:
            if error is None:
                self.server.ops.succeed(self.op)
            else:
                self.server.ops.fail(self.op, error)
        self.server.cond.notify_all()
