"""Inputs a careless or hostile user gives (issue 25): every one refused at validate time with
one line naming the problem and the fix, exit code 2, never a hang or an internal error."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.config import loader, yamlsource
from launcher.config.loader import MAX_CONFIG_BYTES, load_config, read_config_file
from launcher.config.yamlsource import MAX_NESTING, parse_yaml
from launcher.errors import UsageError
from tests.conftest import CliResult

Write = Callable[[str], Path]
Run = Callable[..., CliResult]

BASE = (
    "cluster_name: x\n"
    "provider: {type: localhost}\n"
    "available_node_types:\n"
    "  head: {node_config: {}, resources: {CPU: 2}, max_workers: 0}\n"
    "  w: {node_config: {}, resources: {CPU: 1}, max_workers: 2}\n"
    "head_node_type: head\n"
)
K8S = BASE.replace("{type: localhost}", "{type: kubernetes, namespace: ray}")


def _refused(result: CliResult, *expected: str) -> str:
    """The one error line of a refused config, checked for what it must say."""
    assert result.exception is None, result.exception
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


# -- numbers -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "path", "what"),
    [
        ("upscaling_speed: .nan", "upscaling_speed", "not a number (.nan)"),
        ("upscaling_speed: .inf", "upscaling_speed", "infinite (.inf)"),
        ("idle_timeout_minutes: -.inf", "idle_timeout_minutes", "infinite (-.inf)"),
        ("upscaling_speed: 1.0e+400", "upscaling_speed", "infinite (.inf)"),
        ("metadata: {mine: [1, .NaN]}", "metadata.mine[1]", "not a number (.nan)"),
    ],
)
def test_non_finite_numbers_are_refused_anywhere(
    write_config: Write, cli_runner: Run, line: str, path: str, what: str
) -> None:
    for verb in ("validate", "plan"):
        result = cli_runner(verb, str(write_config(BASE + line + "\n")))
        error = _refused(result, f":7: error: {path}: ", what, "finite number")
        assert error.count(path) == 1  # said once, not also as a failed minimum or type


def test_non_finite_in_a_node_config_names_its_path(write_config: Write, cli_runner: Run) -> None:
    pod = "{kind: Pod, spec: {terminationGracePeriodSeconds: .inf}}"
    text = K8S.replace("head: {node_config: {}", "head: {node_config: " + pod)
    _refused(
        cli_runner("validate", str(write_config(text))),
        ":4: error: available_node_types.head.node_config.spec.terminationGracePeriodSeconds: ",
        "infinite (.inf)",
    )


@pytest.mark.parametrize(
    ("old", "new", "path", "limit"),
    [
        ("CPU: 2}", "CPU: 1.0e+308}", "available_node_types.head.resources.CPU", "1e+15"),
        ("max_workers: 2}", "max_workers: 1000000}", "available_node_types.w.max_workers", "10000"),
        (
            "head_node_type: head",
            "head_node_type: head\nmax_workers: 99999999",
            ":7: error: max_workers",
            "10000",
        ),
        (
            "head_node_type: head",
            "head_node_type: head\nupscaling_speed: 1.0e+300",
            "upscaling_speed",
            "1000000",
        ),
        (
            "head_node_type: head",
            "head_node_type: head\nidle_timeout_minutes: 1.0e+12",
            "idle_timeout_minutes",
            "1000000",
        ),
    ],
)
def test_absurd_numbers_are_refused_with_the_maximum(
    write_config: Write, cli_runner: Run, old: str, new: str, path: str, limit: str
) -> None:
    text = BASE.replace(old, new)
    error = _refused(cli_runner("validate", str(write_config(text))), "more than the maximum")
    assert path in error and limit in error


def test_sane_large_numbers_stay_valid(write_config: Write) -> None:
    text = BASE.replace("CPU: 1}", "CPU: 96, memory: 2000000000000, GPU: 8}").replace(
        "head_node_type: head", "head_node_type: head\nupscaling_speed: 9999\nmax_workers: 2"
    )
    config = load_config(write_config(text))
    assert config.node_types["w"].resources["memory"] == 2_000_000_000_000
    assert config.upscaling_speed == 9999


def test_a_five_thousand_digit_integer_is_named(write_config: Write, cli_runner: Run) -> None:
    text = BASE + "max_workers: " + "9" * 5000 + "\n"
    error = _refused(cli_runner("validate", str(write_config(text))), ":7: error: ")
    assert "5000 digits" in error and "quote it" in error
    assert len(error) < 300


# -- the file itself -----------------------------------------------------------------------
def test_a_silent_fifo_is_refused_without_waiting_for_ever(
    tmp_path: Path, cli_runner: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "PIPE_WAIT_S", 0.5)
    fifo = tmp_path / "cluster.yaml"
    os.mkfifo(fifo)
    outcome: list[CliResult] = []
    worker = threading.Thread(
        target=lambda: outcome.append(cli_runner("validate", str(fifo))), daemon=True
    )
    worker.start()
    worker.join(20)
    if worker.is_alive():  # the old code blocks in open(): unblock it so the test ends
        with fifo.open("w") as writer:
            writer.write("")
        worker.join(20)
        pytest.fail("validate waited for a writer on a FIFO")
    _refused(outcome[0], str(fifo), "nothing came through it for 0.5 s")


def test_a_config_written_to_a_pipe_is_read(tmp_path: Path, cli_runner: Run) -> None:
    """As `launcher up <(envsubst < cluster.yaml)` or `... | launcher up /dev/stdin` give it."""
    fifo = tmp_path / "cluster.yaml"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("w") as writer:
            writer.write(BASE)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = cli_runner("validate", str(fifo))
    writer.join(20)
    assert result.exit_code == 0, result.stdout + result.stderr


def test_an_endless_device_is_refused(cli_runner: Run) -> None:
    started = time.monotonic()
    _refused(cli_runner("validate", "/dev/zero"), "/dev/zero", "more than the 4 MiB")
    assert time.monotonic() - started < 10


def test_a_file_too_large_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "cluster.yaml"
    with big.open("wb") as out:
        out.truncate(MAX_CONFIG_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(UsageError, match=r"is 4\.0 MiB, more than the 4 MiB"):
        read_config_file(big)


def test_deep_nesting_is_named_with_its_line(write_config: Write, cli_runner: Run) -> None:
    text = BASE + "metadata:\n  deep: " + "[" * 10_000 + "]" * 10_000 + "\n"
    error = _refused(cli_runner("validate", str(write_config(text))), ":8: error: ")
    assert f"more than {MAX_NESTING} levels deep" in error


def test_nesting_through_aliases_is_bounded_too() -> None:
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 2 * MAX_NESTING)]
    document, problems = parse_yaml("\n".join(lines) + "\n")
    assert document is None
    assert problems[0].line == MAX_NESTING  # a63 there holds 63 lists, in 2 open ones
    assert problems[0].message == f"aliases here nest the data more than {MAX_NESTING} levels deep"


def test_kubernetes_depth_is_far_below_the_limit(write_config: Write) -> None:
    pod = "{kind: Pod, spec: {containers: [{resources: {limits: {cpu: 2, memory: 4G}}}]}}"
    text = K8S.replace("head: {node_config: {}", "head: {node_config: " + pod)
    assert load_config(write_config(text)).cluster_name == "x"


def test_many_plain_commands_are_refused_without_blaming_aliases(
    write_config: Write, cli_runner: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 250,000 commands against the real cap take 7 s to read: the same refusal, scaled down.
    monkeypatch.setattr(yamlsource, "MAX_EXPANDED_VALUES", 1_000)
    text = BASE + "setup_commands:\n" + "- echo hi\n" * 1_500
    error = _refused(
        cli_runner("validate", str(write_config(text))), ":975: error: ", "more than 1000 values"
    )
    assert "alias" not in error and "script" in error
    aliased = BASE + "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: [" + ", ".join(["*a"] * 150) + "]\n"
    _refused(cli_runner("validate", str(write_config(aliased))), "aliases expand this file")


# -- names and paths -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "verb",
    [
        "status",
        "up",
        "down",
        "exec",
        "submit",
        "attach",
        "rsync-up",
        "rsync-down",
        "get-head-ip",
        "get-worker-ips",
        "monitor",
        "autostop",
        "cluster-dump",
        "kill-random-node",
        "dashboard",
    ],
)
def test_a_bad_cluster_name_flag_is_blamed_on_the_flag(
    write_config: Write, cli_runner: Run, verb: str
) -> None:
    path = str(write_config(BASE))
    extra = {"exec": ["true"], "submit": ["x.py"], "rsync-up": ["a", "b"], "rsync-down": ["a", "b"]}
    result = cli_runner(verb, path, *extra.get(verb, []), "-n", "../../x")
    error = _refused(result, "--cluster-name '../../x'", "use 1 to 63 letters")
    assert path not in error  # the file is not at fault


@pytest.mark.parametrize(
    ("target", "means"),
    [
        ("~/../../etc/x", "outside the home directory"),
        ("/home/u/../../etc", "/etc"),
        ("~/a/../../b", "outside the home directory"),
    ],
)
def test_file_mount_targets_may_not_climb_with_dotdot(
    write_config: Write, cli_runner: Run, tmp_path: Path, target: str, means: str
) -> None:
    text = BASE + f'file_mounts: {{"{target}": {tmp_path}}}\n'
    error = _refused(cli_runner("validate", str(write_config(text))), ":7: error: ", means)
    assert "without `..`" in error


@pytest.mark.parametrize("target", ["~/a/../b", "/opt/x/../y", "/home/u/a/../b"])
def test_dotdot_that_stays_inside_is_a_warning(
    write_config: Write, cli_runner: Run, tmp_path: Path, target: str
) -> None:
    """Ray takes these; they stay where they say unless a symlink on the node moves them."""
    text = BASE + f'file_mounts: {{"{target}": {tmp_path}}}\n'
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert ":7: warning: " in result.stdout + result.stderr


def test_plain_file_mount_targets_stay_valid(write_config: Write, tmp_path: Path) -> None:
    text = BASE + f'file_mounts: {{"/etc/x": {tmp_path}, "~/code": {tmp_path}}}\n'
    assert set(load_config(write_config(text)).file_mounts) == {"/etc/x", "~/code"}


def test_a_name_ending_in_a_newline_is_refused(write_config: Write, cli_runner: Run) -> None:
    # Python's `$` matches before a final newline: the schema's patterns end at the text's end.
    text = BASE.replace("cluster_name: x", 'cluster_name: "x\\n"')
    _refused(cli_runner("validate", str(write_config(text))), ":1: error: cluster_name: ")
    flag = cli_runner("status", str(write_config(BASE)), "-n", "x\n")
    _refused(flag, "--cluster-name 'x\\n' is not a valid cluster name")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["cost-report", "--days", "nan"], "--days"),
        (["cost-report", "--days", "inf"], "--days"),
        (["kill-random-node", "{path}", "--hard", "--notice", "nan", "-y"], "--notice"),
        (["simulate", "{path}", "--trace", "t.jsonl", "--launch-delay-s", "inf"], "--launch-delay"),
        (["simulate", "{path}", "--trace", "t.jsonl", "--preempt-rate", "nan"], "--preempt-rate"),
        (["up", "{path}", "--max-workers", "99999999", "-y"], "--max-workers"),
        (["up", "{path}", "--min-workers", "99999999", "-y"], "--min-workers"),
    ],
)
def test_number_flags_refuse_nan_inf_and_absurd_counts(
    write_config: Write, cli_runner: Run, args: list[str], flag: str
) -> None:
    path = str(write_config(BASE))
    result = cli_runner(*[a.replace("{path}", path) for a in args])
    assert result.exit_code == 2, result.stdout + result.stderr
    assert f"Invalid value for '{flag}" in result.stderr, result.stderr
    assert path not in result.stderr  # the file is not at fault
