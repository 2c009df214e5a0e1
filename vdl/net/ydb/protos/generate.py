"""Regenerate the ``*_pb2.py`` modules from the ``.proto`` files next to this script.

Usage: ``python -m vdl.net.ydb.protos.generate`` from the repository root (needs the
``protos`` extra: ``grpcio-tools``). The generated modules are committed; regenerate them
whenever a ``.proto`` changes.

Each module is rewritten to register its descriptors in the private pool of ``_pool.py``
instead of protobuf's default pool (see there why).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parents[3]  # the repository root: vdl/net/ydb/protos -> .
_DEFAULT_POOL = "_descriptor_pool.Default().AddSerializedFile("
_PRIVATE_POOL = "_pool.POOL.AddSerializedFile("
_POOL_IMPORT = "from vdl.net.ydb.protos import _pool\n"


def _use_private_pool(path: Path) -> None:
    text = path.read_text()
    if _DEFAULT_POOL not in text:
        raise SystemExit(f"{path.name}: generated code changed shape; update generate.py")
    text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL)
    marker = "# @@protoc_insertion_point(imports)\n"
    text = text.replace(marker, marker + _POOL_IMPORT, 1)
    path.write_text(text)


def main() -> int:
    from importlib.resources import files

    from grpc_tools import protoc

    protos = sorted(_HERE.glob("*.proto"))
    well_known = str(files("grpc_tools") / "_proto")
    for old in [*_HERE.glob("*_pb2.py"), *_HERE.glob("*_pb2.pyi")]:
        old.unlink()
    args = [
        "protoc",
        f"-I{_ROOT}",
        f"-I{well_known}",
        f"--python_out={_ROOT}",
        # Typed stubs, so mypy checks our use of the messages.
        f"--pyi_out={_ROOT}",
        *(str(p.relative_to(_ROOT)) for p in protos),
    ]
    if protoc.main(args) != 0:
        return 1
    for proto in protos:
        _use_private_pool(_HERE / f"{proto.stem}_pb2.py")
    print(f"generated {len(protos)} modules in {_HERE.relative_to(_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
