"""Every option of Ray's cluster verbs, read from the `ray` installed here, is one the
launcher's verb of the same name accepts, taking a value where Ray's takes one; and the
flags that mean the same on every verb (`--log-style`, `--log-color`, `-v` after the verb,
`--disable-usage-stats`) and the verb-specific ones do what Ray's do, or are refused in one
line that says why."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from launcher.cli import submit_command
from launcher.cli.app import Settings
from launcher.cli.main import cli
from launcher.cli.output import Output
from launcher.cluster import ops
from launcher.cluster.dump_plan import info_script
from launcher.cluster.head import HeadSession
from launcher.config.loader import parse_config
from launcher.errors import UsageError
from launcher.providers.base import NodeKind, NodeState
from launcher.testing import MemoryProvider
from tests.conftest import CliResult

ray_scripts = pytest.importorskip("ray.scripts.scripts", reason="needs Ray's CLI (the ray extra)")

# Ray's verbs that act on a cluster from its config (and `status`, `dashboard`).
VERBS = (
    "up",
    "down",
    "submit",
    "exec",
    "attach",
    "rsync-up",
    "rsync-down",
    "get-head-ip",
    "get-worker-ips",
    "monitor",
    "kill-random-node",
    "cluster-dump",
    "dashboard",
    "status",
)

LOCAL = """
cluster_name: compat
provider: {type: localhost}
"""


def _options(command: click.Command) -> dict[str, bool]:
    """Each option string of `command` -> whether it takes a value."""
    return {
        name: not (param.is_flag or param.count)
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    }


def _ray_command(verb: str) -> click.Command:
    group = ray_scripts.cli
    ctx = click.Context(group)
    found = group.get_command(ctx, verb) or group.get_command(ctx, verb.replace("-", "_"))
    assert found is not None, f"ray has no verb {verb}"
    return found


@pytest.mark.parametrize("verb", VERBS)
def test_every_option_of_rays_verb_is_accepted(verb: str) -> None:
    ours_command = cli.get_command(click.Context(cli), verb)
    assert ours_command is not None, f"launcher has no verb {verb}"
    theirs, ours = _options(_ray_command(verb)), _options(ours_command)
    missing = sorted(set(theirs) - set(ours))
    assert missing == [], f"`ray {verb}` options the launcher lacks: {missing}"
    differ = sorted(name for name in theirs if theirs[name] != ours[name])
    assert differ == [], f"`ray {verb}` options taking a value in one and not the other: {differ}"


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
        elif command is not None:
            found.append((f"{prefix}{name}", command))
    return found


def test_no_verb_gives_one_option_string_two_meanings() -> None:
    clashes = []
    for name, command in _commands(cli):
        seen: dict[str, str] = {}
        for param in command.params:
            for opt in getattr(param, "opts", []) + getattr(param, "secondary_opts", []):
                if opt in seen and seen[opt] != param.name:
                    clashes.append(f"{name}: {opt} is {seen[opt]} and {param.name}")
                seen[opt] = str(param.name)
    assert clashes == []


def test_an_unknown_option_before_the_script_is_no_such_option(
    cli_runner: Callable[..., CliResult], write_config: Callable[[str], Path], tmp_path: Path
) -> None:
    config = write_config(LOCAL)
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    result = cli_runner("submit", str(config), "--stpo", str(script))
    assert result.exit_code == 2
    assert "No such option '--stpo'" in result.stderr
    assert "no such file" not in result.stderr.lower()


def test_options_after_the_script_are_its_own_and_args_splits_as_a_shell(
    cli_runner: Callable[..., CliResult],
    write_config: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(LOCAL)
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    seen: list[tuple[tuple[str, ...], dict[str, str]]] = []

    def submit_script(*args: Any, **_: Any) -> tuple[int, None]:
        _config, _script, script_args, options, _echo = args
        seen.append((tuple(script_args), dict(options.extra_env)))
        return 0, None

    monkeypatch.setattr(ops, "submit_script", submit_script)
    assert submit_command.ops is ops
    done = cli_runner("submit", str(config), str(script), "--lr", "0.1", "--stpo")
    assert done.exit_code == 0, done.stderr
    flags = cli_runner(
        "submit", str(config), str(script), "--args", "--lr 0.1 'a b'", "--disable-usage-stats"
    )
    assert flags.exit_code == 0, flags.stderr
    assert seen == [
        (("--lr", "0.1", "--stpo"), {}),
        (("--lr", "0.1", "a b"), {"RAY_USAGE_STATS_ENABLED": "0"}),
    ]
    both = cli_runner("submit", str(config), str(script), "x", "--args", "y")
    assert both.exit_code != 0 and "either after SCRIPT or with --args" in both.stderr
    screen = cli_runner("submit", str(config), str(script), "--extra-screen-args", "-L")
    assert screen.exit_code != 0 and "--extra-screen-args goes with --screen" in screen.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("up", "--use-normal-shells", "-y"), "--use-normal-shells is not supported"),
        (("status", "--address", "10.0.0.1:6379"), "--address is not supported"),
        (("cluster-dump", "--host", "10.0.0.1"), "--host: not supported"),
        (("cluster-dump", "-U", "me", "-d", "c"), "--ssh-user, --docker: not supported"),
    ],
)
def test_what_cannot_apply_is_refused_in_one_line(
    cli_runner: Callable[..., CliResult],
    write_config: Callable[[str], Path],
    args: tuple[str, ...],
    says: str,
) -> None:
    config = write_config(LOCAL)
    verb, *rest = args
    result = cli_runner(verb, str(config), *rest)
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_verbose_after_the_verb_shows_the_traceback(
    cli_runner: Callable[..., CliResult], tmp_path: Path
) -> None:
    missing = str(tmp_path / "nope.yaml")
    quiet = cli_runner("get-head-ip", missing)
    loud = cli_runner("monitor", missing, "-v", "--log-style", "record", "--log-color", "false")
    assert quiet.exit_code != 0 and "Traceback" not in quiet.stderr
    assert loud.exit_code != 0 and "Traceback" in loud.stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colors_follow_the_terminal_no_color_and_log_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Output().colors(_Tty()) and not Output().colors(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not Output().colors(_Tty())
    assert Output(color=True).colors(io.StringIO())  # --log-color true
    monkeypatch.delenv("NO_COLOR")
    assert not Output(color=False).colors(_Tty())  # --log-color false
    assert Output(live=False).live_view() is False and Output().live_view() is None


def test_log_options_set_the_runs_output(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(verbose=False, output=Output())

    @click.command()
    @submit_command.log_options
    def probe() -> None:
        pass

    probe.main(
        ["--log-style", "record", "--log-color", "true", "-vv"],
        standalone_mode=False,
        obj=settings,
    )
    assert settings.verbose and settings.output.live is False and settings.output.color is True


def _session(provider: MemoryProvider) -> HeadSession:
    config = provider.config
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    workers = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 2, {})
    for index, node in enumerate([head, *workers]):
        provider.update(node.id, state=NodeState.RUNNING, ip=f"127.0.0.{20 + index}")
    listed = {n.id: n for n in provider.nodes()}
    runner: Any = object()
    env = {"RAY_ADDRESS": "127.0.0.20:6379"}
    return HeadSession(config, provider, listed[head.id], runner, env, runner)


def test_attach_node_ip_picks_the_node_or_names_the_ones_there(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    reached: list[str] = []

    def node_runner(provider: Any, config: Any, node: Any, log: Path) -> Any:
        reached.append(node.id)
        return object()

    monkeypatch.setattr(ops, "node_runner", node_runner)
    config = parse_config(
        textwrap.dedent(
            """
            cluster_name: compat
            provider: {type: localhost}
            available_node_types:
              head: {node_config: {}, resources: {CPU: 1}}
              worker: {node_config: {}, resources: {CPU: 1}, max_workers: 2}
            head_node_type: head
            """
        ),
        "inline",
    )
    provider = MemoryProvider(config)
    session = _session(provider)
    moved = ops._on_node(session, "127.0.0.22")
    assert moved.head.ip == "127.0.0.22" and moved.env["RAY_ADDRESS"] == "127.0.0.20:6379"
    assert reached == [moved.head.id]
    with pytest.raises(UsageError, match=r"--node-ip 10\.9\.9\.9: no node .* 127\.0\.0\.20"):
        ops._on_node(session, "10.9.9.9")
    with pytest.raises(UsageError, match="--run-env docker: the head runs no container"):
        ops._runner_for(session, "docker")
    assert ops._runner_for(session, "host") is session.runner


def test_a_nodes_info_is_its_packages_and_processes_in_full() -> None:
    script = info_script(pip=True, processes=True, verbose=True)
    assert "pip list --format=freeze" in script and "ps -ww -eo" in script and "args" in script
    assert "ps" not in info_script(pip=True, processes=False, verbose=True)
    assert "pip" not in info_script(pip=False, processes=True, verbose=False)


def test_disable_usage_stats_reaches_the_heads_ray_start(
    cli_runner: Callable[..., CliResult],
    write_config: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`up --disable-usage-stats` hands the head's start commands RAY_USAGE_STATS_ENABLED=0
    (the CLI's part, then the updater's, on a localhost node whose start command records it)."""
    from launcher.cli import cluster_commands
    from launcher.cluster import lifecycle
    from launcher.providers.localhost.provider import LocalhostProvider
    from launcher.updater.updater import NodeUpdater, UpdateOptions

    given: list[dict[str, str]] = []

    def up(path: str, overrides: Any, options: lifecycle.UpOptions, *_: Any) -> Any:
        given.append(dict(options.extra_env))
        raise UsageError("stopped here by the test")

    monkeypatch.setattr(cluster_commands.lifecycle, "up", up)
    config_path = write_config(LOCAL)
    cli_runner("up", "-y", "--disable-usage-stats", str(config_path))
    cli_runner("up", "-y", str(config_path))
    assert given == [{"RAY_USAGE_STATS_ENABLED": "0"}, {}]

    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    config = parse_config(
        LOCAL + "head_start_ray_commands: ['echo \"[$RAY_USAGE_STATS_ENABLED]\" > ~/usage']\n",
        "inline",
    )
    provider = LocalhostProvider(config)
    (head,) = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})
    try:
        options = UpdateOptions(cwd=tmp_path, extra_env={"RAY_USAGE_STATS_ENABLED": "0"})
        NodeUpdater(provider, config, head, None, options, lambda _: None).run()
        usage = provider.nodes_dir / head.id / "home" / "usage"
        assert usage.read_text().strip() == "[0]"
    finally:
        provider.terminate_nodes([head.id])
