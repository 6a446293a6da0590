"""The dra-plugin service: the kubelet's DRA plugin and the node's ResourceSlices.

In layers, each folder importing only the folders below it:

- the service itself at the top: `main`, `flags` and `paths` (the command line), `runtime`
  (the service at run time), `servicer` (the kubelet's and the status view's gRPC);
- `publishing`: the ResourceSlices built from the allocator's devices, written and watched;
- `kubelet`: NodePrepareResources and NodeUnprepareResources, registration, device health,
  the device metadata files;
- `cluster`: the API server (or the local folder standing in for it), claims read and their
  status written;
- `common`: the allocator's client, the requests built for it, timings and metrics.
"""
