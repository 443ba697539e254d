"""The `launcher` command (and `python -m launcher`). The CLI is imported inside `main`, so
Ctrl-C while it loads ends the run as Ctrl-C does anywhere else: one line, exit code 130."""

import sys


def main() -> None:
    try:
        from launcher.cli.main import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
