"""The wire to the container runtime: ttrpc over one multiplexed socket, the NRI plugin stub and
service, and what the runtime on the other end is and can take; also the client of the allocator."""
