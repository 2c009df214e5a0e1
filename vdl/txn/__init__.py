"""Kafka transactions (KIP-98, KIP-447): the coordinator and the partition side."""
