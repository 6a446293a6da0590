"""One typed client per dracpu gRPC service, shared by every service that calls it.

- `base.ServiceClient`: the channel to a unix socket, one call or one retried until a deadline
  (`dracpu.core.retry`), errors mapped by `dracpu.core.rpc`, and Health and Info, which every
  dracpu server carries;
- `allocator.AllocatorClient`: the allocator (the dra-plugin, the nri-plugin, the api);
- `topology.TopologyClient`: the topology service (the allocator, the api);
- `nri_plugin.NRIPluginClient`: the nri-plugin's view (the dra-plugin, the api);
- `dra_plugin.DRAPluginClient`: the dra-plugin's view (the api).
"""
