"""Bad configs: every problem reported at once, one line each, with the path, the line and a fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

GOOD = """\
cluster_name: demo
max_workers: 4
provider:
  type: aws
  region: us-west-2
available_node_types:
  head:
    node_config: {InstanceType: m5.large}
    resources: {CPU: 2}
    max_workers: 0
  cpu:
    node_config: {InstanceType: m5.xlarge}
    min_workers: 1
    max_workers: 3
head_node_type: head
setup_commands:
  - echo hello
"""

FIVE_MISTAKES = """\
cluster_name: demo
max_worker: 4
provider:
  type: aws
  region: us-west-2
available_node_types:
  head:
    node_config: {InstanceTyp: m5.large}
    resources: {CPU: -2}
    max_workers: 0
  cpu:
    node_config: {InstanceType: m5.xlarge}
    min_workers: 5
    max_workers: 3
head_node_type: hed
setup_commands:
  - 42
"""


def _lines(result: CliResult) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def test_good_config_is_valid(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner("validate", str(write_config(GOOD)))
    assert result.exit_code == 0, result.stderr
    assert "valid" in result.stdout


def test_five_independent_mistakes_are_all_reported(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    path = write_config(FIVE_MISTAKES)
    result = cli_runner("validate", str(path))
    assert result.exit_code == 2
    assert result.exception is None
    lines = _lines(result)
    text = "\n".join(lines)
    assert "Traceback" not in result.stderr + result.stdout
    expected = [
        (":2:", "max_worker", "did you mean `max_workers`?"),
        (
            ":8:",
            "available_node_types.head.node_config.InstanceTyp",
            "did you mean `InstanceType`?",
        ),
        (":9:", "available_node_types.head.resources.CPU", "less than the minimum of 0"),
        (
            ":14:",
            "available_node_types.cpu.max_workers",
            "min_workers (5) is more than max_workers (3)",
        ),
        (":15:", "head_node_type", "did you mean `head`?"),
        (":17:", "setup_commands[0]", "expected text"),
    ]
    for where, yaml_path, what in expected:
        matching = [line for line in lines if where in line and yaml_path in line and what in line]
        assert matching, f"no line with {where} {yaml_path} {what!r} in:\n{text}"
    # One line per problem, each starting with the file name.
    assert all(line.startswith(f"{path}:") for line in lines)
    assert len(lines) == len(expected)


def test_json_output_lists_problems(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner("validate", "--json", str(write_config(FIVE_MISTAKES)))
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["valid"] is False
    paths = {p["path"] for p in data["problems"]}
    assert {"max_worker", "head_node_type", "setup_commands[0]"} <= paths
    assert all(p["line"] for p in data["problems"])


def test_yaml_syntax_error_names_line_and_column(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    path = write_config(
        "cluster_name: demo\nprovider:\n  type: aws\n  region: [us-west-2\nmax_workers: 2\n"
    )
    result = cli_runner("validate", str(path))
    assert result.exit_code == 2
    lines = _lines(result)
    assert len(lines) == 1
    assert "YAML syntax error at line" in lines[0] and "column" in lines[0]


def test_tab_indentation_is_explained(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner(
        "validate", str(write_config("cluster_name: demo\nprovider:\n\ttype: aws\n"))
    )
    assert result.exit_code == 2
    assert "tabs" in result.stderr


def test_empty_file(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    for text in ("", "# only a comment\n", "---\n"):
        result = cli_runner("validate", str(write_config(text)))
        assert result.exit_code == 2
        assert "the file is empty" in result.stderr
        assert "cluster_name" in result.stderr


def test_top_level_not_a_mapping(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    for text, what in (
        ("- a\n- b\n", "a list"),
        ("just text\n", "the string"),
        ("42\n", "the number"),
    ):
        result = cli_runner("validate", str(write_config(text)))
        assert result.exit_code == 2
        assert f"the top level is {what}" in result.stderr
        assert "not a mapping" in result.stderr


def test_duplicate_keys_are_a_warning(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    # Ray accepts them (YAML keeps the last value), so we warn rather than refuse.
    result = cli_runner("validate", str(write_config(GOOD + "max_workers: 9\n")))
    assert result.exit_code == 0
    assert "warning: max_workers: key appears twice (lines 2 and 18)" in result.stderr


def test_missing_provider(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner("validate", str(write_config("cluster_name: demo\n")))
    assert result.exit_code == 2
    assert "`provider` is missing" in result.stderr


def test_unknown_provider_type_suggests(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner(
        "validate", str(write_config("cluster_name: demo\nprovider: {type: gpc}\n"))
    )
    assert result.exit_code == 2
    assert "provider.type" in result.stderr and "did you mean `gcp`?" in result.stderr
    result = cli_runner(
        "validate", str(write_config("cluster_name: demo\nprovider: {type: oracle}\n"))
    )
    assert "not a provider the launcher supports" in result.stderr
    assert "localhost" in result.stderr


def test_provider_key_typo_is_an_error_unknown_key_a_warning(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    typo = GOOD.replace("region: us-west-2", "region: us-west-2\n  use_internal_ip: true")
    result = cli_runner("validate", str(write_config(typo)))
    assert result.exit_code == 2
    assert (
        "provider.use_internal_ip: unknown key; did you mean `use_internal_ips`?" in result.stderr
    )
    other = GOOD.replace("region: us-west-2", "region: us-west-2\n  my_own_setting: 1")
    result = cli_runner("validate", str(write_config(other)))
    assert result.exit_code == 0
    assert "warning: provider.my_own_setting" in result.stderr


def test_sum_of_min_workers_over_max(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    text = GOOD.replace("max_workers: 4", "max_workers: 0")
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 2
    assert "max_workers: 0 is less than the sum of min_workers over node types (1)" in result.stderr


def test_unsafe_cluster_name(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    for name in ('"my cluster"', '"a;rm -rf /"', '"../up"', '"x' + "y" * 70 + '"', '"-dash"'):
        result = cli_runner(
            "validate",
            str(write_config(GOOD.replace("cluster_name: demo", f"cluster_name: {name}"))),
        )
        assert result.exit_code == 2, name
        assert "cluster_name" in result.stderr and "letters, digits" in result.stderr


def test_head_node_type_missing_with_own_types(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner("validate", str(write_config(GOOD.replace("head_node_type: head\n", ""))))
    assert result.exit_code == 2
    assert (
        "head_node_type: is not set; name the head node's type, one of: head, cpu" in result.stderr
    )


def test_missing_local_files(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult], tmp_path: Path
) -> None:
    text = (
        GOOD
        + "file_mounts:\n  /data: ./nowhere\n  relative/path: "
        + str(tmp_path)
        + "\nauth:\n  ssh_private_key: ~/no-such-key.pem\n"
    )
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 2
    assert "local path ./nowhere does not exist" in result.stderr
    assert "remote path is relative" in result.stderr
    # The key may be on the machine the cluster runs from: a warning, not among the errors.
    assert "no-such-key.pem" not in result.stderr


def test_missing_file_and_directory(tmp_path: Path, cli_runner: Callable[..., CliResult]) -> None:
    result = cli_runner("validate", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "no such file" in result.stderr
    result = cli_runner("plan", str(tmp_path))
    assert result.exit_code == 2


def test_keys_are_the_text_written(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    # `on:` and `123:` are keys as written, not YAML 1.1 booleans or numbers.
    result = cli_runner("validate", str(write_config(GOOD + "123: x\non: true\n")))
    assert result.exit_code == 2
    assert ':18: error: ["123"]: unknown key' in result.stderr
    assert ":19: error: on: unknown key" in result.stderr


def test_legacy_error_reported_at_the_old_key(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    text = (
        "cluster_name: old\nprovider: {type: aws, region: us-west-2}\n"
        "min_workers: -1\nhead_node:\n  InstanceTyp: m5.large\n"
    )
    result = cli_runner("validate", str(write_config(text)))
    assert result.exit_code == 2
    assert ":3: error: min_workers: -1 is less than the minimum of 0" in result.stderr
    assert (
        ":5: error: head_node.InstanceTyp: unknown key; did you mean `InstanceType`?"
        in result.stderr
    )


def test_docker_image_is_accepted(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner(
        "validate", str(write_config(GOOD + "docker:\n  image: rayproject/ray:2.60.0\n"))
    )
    assert result.exit_code == 0
    assert "docker" not in result.stderr


def test_case_of_ray_resources(
    write_config: Callable[[str], Path], cli_runner: Callable[..., CliResult]
) -> None:
    result = cli_runner(
        "validate", str(write_config(GOOD.replace("resources: {CPU: 2}", "resources: {cpu: 2}")))
    )
    assert result.exit_code == 0
    assert "`cpu` is a custom resource, not Ray's `CPU`" in result.stderr


ON_PREM_WITH_KEY = """\
cluster_name: keyless
provider: {type: local, head_ip: 127.0.9.1, worker_ips: [127.0.9.2]}
auth: {ssh_user: ubuntu, ssh_private_key: ~/.ssh/not-here.pem}
"""


def test_a_key_missing_here_is_a_warning_for_validate_and_plan_and_refused_by_up(
    tmp_path: Path,
    fake_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_runner: Callable[..., CliResult],
) -> None:
    # Nothing may be contacted: AWS calls would go to a closed loopback port.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "launcher-home"))
    aws = (
        GOOD.replace("InstanceType: m5.large}", "InstanceType: m5.large, KeyName: mine}").replace(
            "InstanceType: m5.xlarge}", "InstanceType: m5.xlarge, KeyName: mine}"
        )
        + "auth: {ssh_user: ubuntu, ssh_private_key: ~/.ssh/not-here.pem}\n"
    )
    for text in (ON_PREM_WITH_KEY, aws):
        path = tmp_path / "cluster.yaml"
        path.write_text(text)
        for verb in ("validate", "plan"):
            checked = cli_runner(verb, str(path))
            assert checked.exit_code == 0, checked.stderr
            assert "~/.ssh/not-here.pem is not on this machine" in checked.stderr
        for verb in (["up", "-y"], ["exec"], ["down", "-y"], ["get-head-ip"], ["rsync-up"]):
            extra = {"exec": ["ray status"], "rsync-up": ["a", "b"]}.get(verb[0], [])
            refused = cli_runner(*verb, str(path), *extra)
            assert refused.exit_code == 2, (verb, refused.stdout, refused.stderr)
            assert refused.exception is None
            (line,) = refused.stderr.strip().splitlines()
            assert "auth.ssh_private_key: ~/.ssh/not-here.pem is not on this machine" in line
            assert "copy the key here or fix the path" in line
        # Nothing was made: no lock, no cluster directory, no generated key.
        assert not (tmp_path / "launcher-home").exists() or not any(
            (tmp_path / "launcher-home").rglob("*")
        )
    (fake_home / ".ssh" / "not-here.pem").write_text("key")
    path = tmp_path / "cluster.yaml"
    path.write_text(ON_PREM_WITH_KEY)
    assert "not on this machine" not in cli_runner("validate", str(path)).stderr
