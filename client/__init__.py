"""The client side of the pipeline: the wire format (record kinds, schema version, batch envelope), the
durable outbox, the transport that sends batches to the collector, and the state directory (the outbox's file,
the pids of running metrics, the CFI cache)."""
