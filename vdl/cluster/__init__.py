"""Running as one node of a cluster: the metadata group (group 0), placement of partition
groups, and the node's raft transport."""
