"""Text rendering of a `ClusterPlan`: plain lines that read well at any terminal width."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from launcher.dryrun import ClusterPlan, NodeGroupPlan, describe_resources
from launcher.pricing import HourlyPrice
from launcher.runners.container import ContainerSpec


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.3f}"


def render_plan(console: Console, plan: ClusterPlan) -> None:
    config = plan.config
    console.print(
        f"[bold]Plan for cluster {escape(config.cluster_name)}[/bold] on "
        f"{config.provider.type}. Nothing is created by `plan`; this is what `up` "
        "would do."
    )
    console.print()
    console.print("[bold]Head node[/bold]")
    _group(console, plan, plan.head)
    console.print(
        f"[bold]Workers[/bold]: {plan.cost.workers_at_start} at start, at most "
        f"{plan.cost.workers_at_max} (max_workers {config.max_workers}); idle workers "
        f"are removed after {config.idle_timeout_minutes:g} min"
    )
    for group in plan.workers:
        _group(console, plan, group)
    if not plan.workers:
        console.print("  (no worker types)")
    console.print()
    console.print("[bold]Resources[/bold]")
    for item in plan.resources:
        detail = f" ({escape(item.detail)})" if item.detail else ""
        console.print(f"  {item.action}: {item.kind} {escape(item.name)}{detail}")
    console.print()
    _commands(console, plan)
    _cost(console, plan)


def _describe_container(spec: ContainerSpec) -> str:
    run = " ".join([f"{spec.engine} run --net=host", *spec.run_options])
    pull = (
        "image pulled before the container starts"
        if spec.pull_before_run
        else "image pulled only if missing"
    )
    detected = [
        what for what, on in (("GPUs", spec.detect_gpus), ("/dev/shm size", spec.detect_shm)) if on
    ]
    notes = [run, pull] + ([" and ".join(detected) + " detected on the host"] if detected else [])
    return f"{spec.name} from {spec.image} ({'; '.join(notes)})"


def _group(console: Console, plan: ClusterPlan, group: NodeGroupPlan) -> None:
    offer = group.offer
    count = "1" if group.role == "head" else f"{group.at_start} at start, up to {group.at_most}"
    market = ""
    if offer.billed:
        market = ", spot" if offer.spot else ", on-demand"
        if offer.price is None:
            market += " (price unknown)"
        else:
            spot = _money(offer.price.spot)
            market += f" (on-demand {_money(offer.price.on_demand)}/h, spot {spot}/h)"
    console.print(f"  {escape(group.node_type.name)}: {count}; {escape(offer.description)}{market}")
    if offer.billed and offer.price is not None:
        for line in price_sources(offer.price):
            console.print(f"    {escape(line)}")
    console.print(f"    resources: {escape(describe_resources(group.node_type))}")
    if group.container is not None:
        console.print(f"    container: {escape(_describe_container(group.container))}")


def price_sources(price: HourlyPrice) -> list[str]:
    """Where a node's prices come from: one line, or one per market where they differ."""
    on_demand, spot = price.on_demand_source, price.spot_source
    if not on_demand:
        return []
    if price.spot is None or spot == on_demand:
        return [f"prices: {on_demand}"]
    return [f"on-demand price: {on_demand}", f"spot price: {spot or 'unknown'}"]


def _commands(console: Console, plan: ClusterPlan) -> None:
    groups: dict[tuple[str, object], list[NodeGroupPlan]] = {}
    for group in (plan.head, *plan.workers):
        groups.setdefault((group.role, group.commands), []).append(group)
    for (role, _), members in groups.items():
        names = ", ".join(g.node_type.name for g in members)
        commands = members[0].commands
        console.print(f"[bold]Commands on {role} nodes[/bold] ({escape(names)})")
        inside = any(g.container for g in members)
        host, box = (" (on the host)", " (in the container)") if inside else ("", "")
        for stage, lines in (
            (f"initialization{host}", commands.initialization),
            (f"setup{box}", commands.setup),
            (f"start ray{box}", commands.start_ray),
        ):
            console.print(f"  {stage}:" + ("" if lines else " (none)"))
            for line in lines:
                console.print(f"    $ {escape(line)}")
        console.print()


def plan_is_live(plan: ClusterPlan) -> bool:
    """Every billed node's prices were read from the cloud."""
    priced = [g.offer.price for g in (plan.head, *plan.workers) if g.offer.billed]
    return bool(priced) and all(p is not None and p.live for p in priced)


def _cost(console: Console, plan: ClusterPlan) -> None:
    cost = plan.cost
    if not cost.billed:
        console.print(
            "[bold]Cost[/bold]: no per-node price; the nodes run on machines or a "
            "cluster you already have."
        )
        return
    where = (
        f"indicative {cost.reference_region} list prices as of {cost.as_of}; other regions differ"
        if cost.reference_region
        else "the price table has no prices for this provider: a node's price is unknown"
    )
    if plan_is_live(plan):
        where = "at the live prices shown for each node; list prices, not your bill"
    console.print(f"[bold]Estimated cost per hour[/bold] ({where})")
    if cost.live_note:
        console.print(f"  {escape(cost.live_note)}")
    console.print(
        f"  at start, 1 head + {cost.workers_at_start} workers: "
        f"{_money(cost.at_start)} as configured, "
        f"{_money(cost.at_start_on_demand)} all on-demand"
    )
    console.print(
        f"  at most, 1 head + {cost.workers_at_max} workers: "
        f"{_money(cost.at_max)} as configured, "
        f"{_money(cost.at_max_on_demand)} all on-demand"
    )
    if cost.unpriced_types:
        console.print("  no price known for: " + escape(", ".join(cost.unpriced_types)))
