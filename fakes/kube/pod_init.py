"""Start one container of a fake pod: run as `python pod_init.py READY_FD SCRIPT ARGV...`.

Takes new mount, PID and UTS namespaces, forks, and the child, PID 1 of the new PID
namespace, runs `sh -c SCRIPT sh ARGV...` with READY_FD as its fd 3 (the script makes its
mounts, writes a byte to fd 3 once the container's filesystem is in place, and execs ARGV,
so the container's command is its PID 1, as in a real container). This process waits for
that PID 1 and ends as it did: the same exit code, or killed by the same signal, so the
kubelet reads the container's exit status from its own child. (util-linux 2.38's unshare
exits 1 when its child dies of a signal.)

The child dies with this process (PR_SET_PDEATHSIG), which dies with the kubelet thread
that started it: a test process that is killed leaves no container behind.

Standalone: no imports from the tests, as it runs in a fresh interpreter.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def main(argv: list[str]) -> int:
    ready_fd, script, command = int(argv[0]), argv[1], argv[2:]
    _die_with_parent()
    if os.getppid() == 1:  # the kubelet died before the line above
        return 1
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS) != 0:
        errno = ctypes.get_errno()
        print(f"pod_init: unshare: {os.strerror(errno)}", file=sys.stderr)
        return 126
    child = os.fork()
    if child == 0:
        try:
            _die_with_parent()  # (its parent, outside its PID namespace, shows as 0 here)
            if ready_fd != 3:
                os.dup2(ready_fd, 3)
                os.close(ready_fd)
            os.execvp("sh", ["sh", "-c", script, "sh", *command])
        except BaseException as error:
            print(f"pod_init: {error}", file=sys.stderr)
        os._exit(127)
    os.close(ready_fd)  # the kubelet sees EOF once the script has closed its copy
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, signal.SIG_IGN)  # signals are for the container, not for us
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        killer = os.WTERMSIG(status)
        if killer != signal.SIGKILL:
            signal.signal(killer, signal.SIG_DFL)
        os.kill(os.getpid(), killer)
        return 128 + killer  # a signal that does not kill (not expected)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
