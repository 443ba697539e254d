"""The `launcher` command (and `python -m launcher`). The CLI is imported inside `main`, so
Ctrl-C while it loads ends the run as Ctrl-C does anywhere else: one line, exit code 130.

A command that has finished ends the process at once (`_leave`): the interpreter's
teardown, freeing every module and object one by one, takes ~45 ms once botocore,
paramiko and rich are loaded, a tenth of a no-op `up`."""

import sys


def main() -> None:
    try:
        from launcher.cli.main import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            _leave(done.code or 0)
        raise
    _leave(0)


def _leave(code: int) -> None:
    """End the process with `code` now, without the interpreter's teardown, when nothing is
    left to finish: no thread runs but daemon ones (a thread still at work is waited for by
    the usual exit). The atexit functions run first (logging's flush, paramiko's closing of
    its connections, temporary directories' removal), then the standard streams are
    flushed; a stream that cannot be (a closed pipe) leaves the usual exit to say so."""
    import atexit
    import os
    import threading

    here = threading.current_thread()
    if any(t is not here and t.is_alive() and not t.daemon for t in threading.enumerate()):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    main()
