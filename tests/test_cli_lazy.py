"""The CLI loads a command's module only when the command is asked for
(`launcher.cli.app.COMMAND_MODULES`): the table names every command, and each in the module
that defines it; a command runs without the others' modules loaded."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import launcher.cli
from launcher.cli.app import COMMAND_MODULES, cli


def test_every_command_is_in_the_table_with_the_module_that_defines_it() -> None:
    for module in pkgutil.iter_modules(launcher.cli.__path__):
        __import__(f"launcher.cli.{module.name}")  # whatever registers, registers now
    registered = set(cli.commands)
    assert registered == set(COMMAND_MODULES), registered ^ set(COMMAND_MODULES)
    for name, command in cli.commands.items():
        assert command.callback is not None
        assert command.callback.__module__ == f"launcher.cli.{COMMAND_MODULES[name]}", name


def test_a_command_loads_only_its_own_module() -> None:
    probe = (
        "import sys; from launcher.cli.main import main\n"
        "sys.argv = ['launcher', 'get-head-ip', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('launcher.cli.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = done.stdout.strip().splitlines()[-1]
    assert "launcher.cli.cluster_commands" in loaded
    for other in ("check_command", "jobs_commands", "dump_command", "records_commands"):
        assert f"launcher.cli.{other}" not in loaded, loaded
