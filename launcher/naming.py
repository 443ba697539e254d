"""Names derived from a cluster name, unique per exact name and valid for a cloud's rules.

A cloud's naming rules (each provider's `names.py` holds its `NameRule`s) often force a
changed form of the cluster name (GCE wants lowercase letters, digits and `-`; IAM compares
role names without case; every cloud caps the length).
Two clusters whose names differ only in what that change removes (`ml.prod`, `ml_prod`,
`ML-prod`) would then share one service account, role or firewall tag, and each could act
on, or delete, the other's. So: where the name a rule allows is not the cluster name itself,
a short hash of the exact cluster name is added, and the result always fits the length cap.

`derive` is pure; providers and their specs (for `plan`) call it alike, so `plan` prints the
names `up` creates.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

HASH_CHARS = 8
# A cluster name that ends as a changed name does (`ml-prod-00696b36`) is given a hash of its
# own too, so no plain name is ever another cluster's changed one.
_LOOKS_HASHED = re.compile(rf"[-_][0-9a-f]{{{HASH_CHARS}}}$")


def name_hash(exact: str, chars: int = HASH_CHARS) -> str:
    """A short, stable hash of the exact text (case and punctuation included)."""
    return hashlib.sha256(exact.encode()).hexdigest()[:chars]


@dataclass(frozen=True)
class NameRule:
    """What a cloud allows in one kind of name.

    `invalid` matches each run of characters the cloud refuses (replaced by `-`);
    `lowercase` when the cloud allows only lowercase letters; `ignores_case` when it allows
    both but compares names without case (AWS IAM); `start` and `end` are the characters a
    name may begin and end with (as character classes).
    """

    max_length: int
    invalid: str = r"[^A-Za-z0-9-]+"
    lowercase: bool = False
    ignores_case: bool = False
    start: str = "[A-Za-z]"
    end: str = "[A-Za-z0-9]"

    def valid(self, name: str) -> bool:
        if not 0 < len(name) <= self.max_length:
            return False
        if self.lowercase and name != name.lower():
            return False
        if re.search(self.invalid, name):
            return False
        return bool(re.match(self.start, name[0])) and bool(re.match(self.end, name[-1]))


def derive(prefix: str, cluster: str, rule: NameRule, suffix: str = "") -> str:
    """`PREFIX + CLUSTER + SUFFIX` as `rule` allows it.

    The plain form is kept when the rule accepts it as is (and, for a case-blind rule, the
    cluster name has no capitals); otherwise the cluster part is changed to what the rule
    allows, shortened to make room, and followed by a separator and a hash of the exact
    cluster name. A cluster name that itself ends in a separator and a hash's worth of hex
    digits is changed the same way, so a plain name is never another cluster's changed one:
    two different cluster names never give the same name, and the result is always valid.
    `prefix` and `suffix` must be valid characters for the rule.
    """
    for fixed in (prefix, suffix):
        if re.search(rule.invalid, fixed) or (rule.lowercase and fixed != fixed.lower()):
            raise ValueError(f"{fixed!r} has characters the name rule does not allow")
    plain = f"{prefix}{cluster}{suffix}"
    case_safe = not rule.ignores_case or cluster == cluster.lower()
    if rule.valid(plain) and case_safe and not _LOOKS_HASHED.search(cluster):
        return plain
    separator = "_" if re.search(rule.invalid, "-") else "-"
    stem = cluster.lower() if rule.lowercase or rule.ignores_case else cluster
    stem = re.sub(rule.invalid, separator, stem).strip(separator)
    lead = "" if prefix or not stem or re.match(rule.start, stem[0]) else "c"
    tail = f"{separator}{name_hash(cluster)}{suffix}"
    room = rule.max_length - len(prefix) - len(lead) - len(tail)
    if room < 0:
        raise ValueError(f"{prefix!r} and {suffix!r} leave no room in {rule.max_length}")
    stem = stem[:room].rstrip(separator)
    if not stem:
        return f"{prefix or 'c'}{name_hash(cluster)}{suffix}"
    return f"{prefix}{lead}{stem}{tail}"
