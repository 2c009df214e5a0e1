"""What a node's front ends share about security: users, ACLs, throttling, settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from vdl.security.acl import ALLOW_ALL, Authorizer
from vdl.security.acl_store import AclStore
from vdl.security.throttle import LoginThrottle
from vdl.security.users import UserStore


@dataclass(slots=True)
class Security:
    """``users`` None means authentication (and so authorization) is off."""

    users: UserStore | None = None
    acls: AclStore | None = None
    throttle: LoginThrottle = field(default_factory=LoginThrottle)
    sasl_mechanisms: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.users is not None

    @property
    def authorizer(self) -> Authorizer:
        # Read at every request: `vdl acl` changes apply to open connections too.
        return self.acls.authorizer if self.acls is not None else ALLOW_ALL


NO_SECURITY = Security()
