"""The client side of the pipeline: the wire format (record kinds, schema version, batch envelope), the
durable outbox and the transport that sends batches to the collector."""
