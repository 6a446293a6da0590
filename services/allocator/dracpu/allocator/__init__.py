"""The allocator service: the only writer of the node's CPU allocation state.

In layers, each folder importing only the folders below it:

- the service itself at the top: `main` and `flags` (the command line), `runtime` (the service
  at run time), `servicer` (gRPC), `simulate` (the `dracpu simulate` command);
- `rpc`: the messages between gRPC and the domain, the topology service's client;
- `live`: the serialized live state (`node`) and its start-up, batched writes, container
  attachments and topology refreshes;
- `store`: claim records and CDI specs on disk, their atomic writes, recovery at start-up;
- `claims`: the allocation state as an immutable value and the prepare/attach/adopt rules;
- `domain`: the published device model, a claim's opaque parameters and quantities, isolated
  CPUs, device health;
- `algorithm`: the CPU placement, a pure function of the topology and the free CPUs.
"""
