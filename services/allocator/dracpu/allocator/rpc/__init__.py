"""The gRPC shell's parts: the allocator's messages to and from the domain (`wire`) and its client
of the topology service."""
