"""paramiko, imported without `invoke`.

paramiko's SSH config reader imports `invoke` (with what invoke imports, ~25 ms of CPU: a
tenth of what a no-op `up` spends importing) for one feature, `Match exec`, which the
launcher never uses: it reads no SSH config file through paramiko. So paramiko is imported
here with `invoke` held back for that import only (paramiko takes it as not installed and
would say so if `Match exec` were asked of it); `import invoke` anywhere else, before or
after, is untouched. Where paramiko was imported already, it is used as it is.

Launcher modules import paramiko from here: `from launcher.runners.paramiko_lib import
paramiko`.
"""

from __future__ import annotations

import sys

_held = "invoke" not in sys.modules and "paramiko" not in sys.modules
if _held:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # import invoke: ImportError
try:
    import paramiko
finally:
    if _held:
        del sys.modules["invoke"]

__all__ = ["paramiko"]
