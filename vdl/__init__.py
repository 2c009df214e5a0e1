"""VDL: a Raft-replicated distributed log serving Kafka and YDB topic clients."""
