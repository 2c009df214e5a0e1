"""Consumer groups and committed offsets, protocol-neutral.

`group`/`coordinator` are a sans-I/O state machine (time comes in as `now_ms`, held requests
come out as completions); `offsets` keeps committed cursors in the MetaStore; `service` is
the thin Trio driver both front ends call.
"""
