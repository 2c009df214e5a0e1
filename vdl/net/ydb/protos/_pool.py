"""The descriptor pool our generated YDB modules register in.

The official ``ydb`` SDK registers the same message names (``Ydb.Topic.*`` ...) in
protobuf's default pool; a process that imports both (our tests do) would fail with
"duplicate symbol" if ours went there too. A private pool keeps the two apart while the
wire format stays identical.
"""

from google.protobuf import (
    any_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    timestamp_pb2,
)

POOL = descriptor_pool.DescriptorPool()
for _well_known in (any_pb2, duration_pb2, empty_pb2, timestamp_pb2):
    POOL.AddSerializedFile(_well_known.DESCRIPTOR.serialized_pb)
