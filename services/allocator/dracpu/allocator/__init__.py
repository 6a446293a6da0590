"""The allocator service: the only writer of the node's CPU allocation state.

Pure core: `algorithm` (placement), `devices` (the published device model), `opaque` and
`quantity` (claim inputs), `claims` (state and the prepare/attach/adopt rules), `recovery`
(start-up reconciliation). Edges: `cdi` and `records` (durable files, via `durable`; the old
single-file `checkpoint` is only read, to migrate), `node` (the serialized live state, the
facade of `live_state`, `startup`, `batches`, `attachments` and `topology_refresh`),
`servicer` (gRPC) and `wire` (its messages), `topology_client`, `runtime` (the service at run
time), `flags` and `main` (the command line).
"""
