"""``vdl user add|remove|passwd``: edit a node's users file in place (no node needed).

The node re-reads the file within a second of a change, so edits apply to a running node.
Every node has its own users file; users shared by a cluster are managed online instead
(`vdl user ... --endpoint`, `vdl.net.ydb.user_admin`), which overrides the files.
Passwords come from a prompt, or from stdin with ``--password-stdin`` (for scripts); they
are hashed here and never written anywhere.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

from vdl.security.users import (
    UsersFileError,
    check_user_name,
    new_user,
    read_users_file,
    write_users_file,
)


def read_new_password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("New password: ")
        if getpass.getpass("Repeat it: ") != password:
            raise UsersFileError("the passwords do not match")
    if not password:
        raise UsersFileError("the password is empty")
    return password


def user_add(path: Path, name: str, password: str) -> str:
    check_user_name(name)
    users = read_users_file(path) if path.exists() else {}
    if name in users:
        raise UsersFileError(f"user {name!r} already exists (use `vdl user passwd`)")
    users[name] = new_user(name, password)
    write_users_file(path, users.values())
    return f"added user {name} to {path}"


def user_passwd(path: Path, name: str, password: str) -> str:
    users = read_users_file(path)
    if name not in users:
        raise UsersFileError(f"no user {name!r} in {path}")
    users[name] = new_user(name, password)
    write_users_file(path, users.values())
    return f"changed the password of {name}"


def user_remove(path: Path, name: str) -> str:
    users = read_users_file(path)
    if users.pop(name, None) is None:
        raise UsersFileError(f"no user {name!r} in {path}")
    write_users_file(path, users.values())
    return f"removed user {name}"


def user_list(path: Path) -> list[str]:
    return sorted(read_users_file(path))
