"""The pieces every layer of the dra-plugin uses: the allocator's client and the requests built for
it, timings and metrics."""
