"""One secret for YDB login tokens on every node, agreed through the metadata group.

The YDB SDK logs in on one node and then, after discovery, sends that token to whichever
node serves a call; a token signed with a secret only its issuing node knows would be
refused elsewhere. So the first leader of group 0 proposes a random secret once:

    {"op": "token_key", "secret": "<64 hex digits>"}

The first such command in the log wins on every node (a later one, proposed by a leader
that had not yet applied the first, is ignored), is kept in each node's MetaStore and is
handed to the node's token signer. The secret sits in group 0's log like every other
command, so the raft port deserves the same protection as the data directories (raft TLS,
`peer_tls.py`).

With `--token-secret-file` (the same file on every node, as Kafka's
`delegation.token.secret.key`) none of this runs: the key comes from the file
(`load_token_secret`) and never enters the log.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable
from pathlib import Path

import trio

from vdl.backends.api import MetaStore
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.cluster.metadata_group import MetadataGroup
from vdl.config import ConfigError
from vdl.consensus.errors import ConsensusError

log = logging.getLogger(__name__)

TOKEN_KEY = "token_key"
CLUSTER_SECRET_KEY = b"cluster/token-secret"
_SECRET_BYTES = 32
# How often a leader looks whether the cluster still lacks a secret.
_CHECK_S = 1.0
# A secret file holds at least this many characters (say `openssl rand -hex 32`).
MIN_SECRET_FILE_CHARS = 32


def load_token_secret(path: Path) -> bytes:
    """The token-signing key from a secret file: SHA-256 of its content without the
    surrounding whitespace. ConfigError (one line) for a file that cannot serve."""
    try:
        content = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read token-secret-file {path}: {exc.strerror}") from None
    if len(content) < MIN_SECRET_FILE_CHARS:
        raise ConfigError(
            f"token-secret-file {path} holds {len(content)} characters; it needs at least "
            f"{MIN_SECRET_FILE_CHARS} (e.g. openssl rand -hex 32)"
        )
    return hashlib.sha256(b"vdl token secret\0" + content).digest()


class ReplicatedTokenKey:
    def __init__(self, metadata: MetadataGroup, meta: MetaStore) -> None:
        self._metadata = metadata
        self._meta = meta
        self.secret: bytes | None = meta.get(CLUSTER_SECRET_KEY)
        # Told the secret once it is agreed (the node's token signer).
        self.on_secret: list[Callable[[bytes], None]] = []

    def register(self, state: MetadataState) -> None:
        """Before group 0 starts applying its log: its commands must find their handler."""
        state.handlers[TOKEN_KEY] = self._apply

    def _apply(self, command: Command) -> Outcome:
        secret = bytes.fromhex(command["secret"])
        if len(secret) != _SECRET_BYTES:
            raise ValueError("a token secret is 32 bytes")
        if self.secret is None:
            # Unsynced is not enough here: the signer issues tokens with it at once.
            self._meta.put(CLUSTER_SECRET_KEY, secret)
            self.secret = secret
            for listener in self.on_secret:
                listener(secret)
        return Outcome()

    async def run(self) -> None:
        """While this node leads group 0 and no secret is agreed yet, propose one."""
        while self.secret is None:
            driver = self._metadata.driver
            if driver is not None and driver.is_leader:
                command: Command = {
                    "op": TOKEN_KEY,
                    "secret": secrets.token_bytes(_SECRET_BYTES).hex(),
                }
                try:
                    await self._metadata.propose(command)
                except ConsensusError as exc:
                    log.debug("token secret not agreed yet: %s", type(exc).__name__)
            await trio.sleep(_CHECK_S)
