from vdl.net.ydb.protos import ydb_topic_pb2 as _ydb_topic_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
