"""Topic administration through the client, the ListDirectory addition (also checked with
the official YDB SDK), and TLS."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
import ydb

import vdl.client
from tests.integration.node_process import NodeProcess
from vdl.client import ConnectError, YdbStatusError


async def test_create_describe_alter_list_drop(node: NodeProcess) -> None:
    async with vdl.client.connect(f"grpc://{node.grpc_address}") as client:
        admin = client.admin
        await admin.create_topic("a", partitions=3, consumers=["c1"], retention_ms=3_600_000)
        await admin.create_topic("/local/b")
        # As YDB: creating an existing topic succeeds and leaves it as it was.
        await admin.create_topic("a", partitions=1)
        assert await admin.list_topics() == ["a", "b"]
        info = await admin.describe_topic("a")
        assert [p.partition for p in info.partitions] == [0, 1, 2]
        assert info.consumers == ["c1"]
        assert info.retention_ms == 3_600_000
        await admin.alter_topic("a", add_consumers=["c2"], drop_consumers=["c1"])
        assert (await admin.describe_topic("a")).consumers == ["c2"]
        consumer = await admin.describe_consumer("a", "c2")
        assert [p.committed_offset for p in consumer.partitions] == [0, 0, 0]
        await admin.drop_topic("b")
        assert await admin.list_topics() == ["a"]
        with pytest.raises(YdbStatusError, match="SCHEME_ERROR"):
            await admin.describe_topic("b")
        [me] = await admin.list_nodes()
        assert (me.host, me.port, me.tls) == ("127.0.0.1", node.grpc_port, False)


def test_the_official_sdk_lists_the_database(node: NodeProcess) -> None:
    config = ydb.DriverConfig(
        endpoint=f"grpc://{node.grpc_address}", database="/local", disable_discovery=True
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        driver.topic_client.create_topic("/local/listed")
        listing = driver.scheme_client.list_directory("/local")  # type: ignore[no-untyped-call]
        assert [(c.name, c.type) for c in listing.children] == [
            ("listed", ydb.SchemeEntryType.TOPIC)
        ]
        with pytest.raises(ydb.SchemeError):
            driver.scheme_client.list_directory("/local/listed")  # type: ignore[no-untyped-call]
    finally:
        driver.stop(timeout=10)


async def test_tls_endpoint_with_a_ca_file(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file, ca_file = tmp_path / "n.pem", tmp_path / "n.key", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    with NodeProcess(
        tmp_path / "data", "--tls-cert", str(cert_file), "--tls-key", str(key_file)
    ) as node:
        endpoint = f"grpcs://localhost:{node.grpc_port}"
        async with vdl.client.connect(endpoint, ca_file=str(ca_file)) as client:
            assert await client.admin.list_topics() == []
        # Without the CA the certificate cannot be verified: a clear connect error.
        async with vdl.client.connect(endpoint, fail_fast=True) as client:
            with pytest.raises(ConnectError, match="cannot reach"):
                await client.admin.list_topics()
