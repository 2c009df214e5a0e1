"""ACL entries kept durably in a node's MetaStore, with the current Authorizer.

One key per entry (its JSON form under ``security/acl/``), so adding and removing are
single puts and deletes and a crash never leaves a half-written list.
"""

from __future__ import annotations

from collections.abc import Iterable

from vdl.backends.api import MetaStore
from vdl.security.acl import AclEntry, Authorizer

_PREFIX = b"security/acl/"


class AclStore:
    def __init__(self, meta: MetaStore, superusers: Iterable[str], *, enabled: bool) -> None:
        self._meta = meta
        self._superusers = tuple(superusers)
        self._enabled = enabled
        self.authorizer = self._build()

    def _build(self) -> Authorizer:
        return Authorizer(self.entries(), self._superusers, enabled=self._enabled)

    def entries(self) -> list[AclEntry]:
        return sorted(AclEntry.from_json(value) for _, value in self._meta.scan(_PREFIX))

    def add(self, entry: AclEntry) -> bool:
        key = _PREFIX + entry.to_json().encode()
        if self._meta.get(key) is not None:
            return False
        self._meta.put(key, entry.to_json().encode())
        self.authorizer = self._build()
        return True

    def remove(self, entry: AclEntry) -> bool:
        key = _PREFIX + entry.to_json().encode()
        if self._meta.get(key) is None:
            return False
        self._meta.delete(key)
        self.authorizer = self._build()
        return True
