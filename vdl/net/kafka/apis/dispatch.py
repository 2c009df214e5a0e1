"""From a request header to the handler of its API, within the advertised version ranges."""

from __future__ import annotations

from collections.abc import Callable

from vdl.net.kafka.apis.acls_admin import (
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
)
from vdl.net.kafka.apis.cluster_admin import handle_describe_cluster, handle_describe_log_dirs
from vdl.net.kafka.apis.configs_admin import (
    handle_alter_configs,
    handle_incremental_alter_configs,
)
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.apis.delete_records import handle_delete_records
from vdl.net.kafka.apis.describe_configs import handle_describe_configs
from vdl.net.kafka.apis.describe_producers import handle_describe_producers
from vdl.net.kafka.apis.elect_leaders import handle_elect_leaders
from vdl.net.kafka.apis.fetch import handle_fetch
from vdl.net.kafka.apis.find_coordinator import handle_find_coordinator
from vdl.net.kafka.apis.groups import (
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_sync_group,
)
from vdl.net.kafka.apis.groups_admin import (
    handle_delete_groups,
    handle_describe_groups,
    handle_list_groups,
    handle_offset_delete,
)
from vdl.net.kafka.apis.init_producer_id import handle_init_producer_id
from vdl.net.kafka.apis.leader_epoch import handle_offset_for_leader_epoch
from vdl.net.kafka.apis.list_offsets import handle_list_offsets
from vdl.net.kafka.apis.metadata import handle_metadata
from vdl.net.kafka.apis.offsets_commit import handle_offset_commit, handle_offset_fetch
from vdl.net.kafka.apis.produce import handle_produce
from vdl.net.kafka.apis.scram_admin import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from vdl.net.kafka.apis.topics_admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from vdl.net.kafka.apis.txn_coordinator import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_transactions,
    handle_end_txn,
    handle_list_transactions,
    handle_txn_offset_commit,
)
from vdl.net.kafka.control_codec import api_versions_response
from vdl.net.kafka.versions import ADVERTISED, SASL_ADVERTISED, SERVED_PRODUCE_MIN, ApiKey

Handler = Callable[[RequestContext], Pending]


class UnsupportedRequest(Exception):
    """An API or version this node does not serve; Kafka closes the connection for these."""


def _api_versions(ctx: RequestContext) -> Pending:
    # Only what is served: librdkafka uses any API it sees advertised.
    served = {key: ADVERTISED[key] for key in HANDLERS}
    if ctx.sasl:
        served.update(SASL_ADVERTISED)
    return ready(api_versions_response(ctx.header, served))


HANDLERS: dict[int, Handler] = {
    ApiKey.API_VERSIONS: _api_versions,
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
}


def served_range(api_key: int) -> tuple[int, int] | None:
    """The versions of api_key that this node both advertises and serves."""
    if api_key not in HANDLERS:
        return None
    low, high = ADVERTISED[api_key]
    if api_key == ApiKey.PRODUCE:
        # v0-2 are advertised only so old librdkafka keeps compression on; never served.
        low = SERVED_PRODUCE_MIN
    return low, high


def dispatch(ctx: RequestContext) -> Pending:
    key, version = ctx.header.api_key, ctx.header.api_version
    if key == ApiKey.API_VERSIONS:
        # Any version gets an answer: unknown ones the KIP-511 fallback.
        return _api_versions(ctx)
    versions = served_range(key)
    if versions is None:
        raise UnsupportedRequest(f"API key {key} is not served")
    if not versions[0] <= version <= versions[1]:
        raise UnsupportedRequest(
            f"API key {key} version {version} is outside {versions[0]}..{versions[1]}"
        )
    return HANDLERS[key](ctx)
