"""Security shared by both front ends: users and credentials, SASL, ACLs, login throttling.

Everything here is pure (no sockets, no clock of its own, no event loop), so the Kafka and
YDB front ends apply exactly the same rules and the rules are unit-tested in isolation.
"""
