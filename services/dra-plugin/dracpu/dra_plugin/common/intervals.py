"""How often the dra-plugin repeats its periodic work and how long it waits for the kubelet:
the defaults of its command line, kept free of gRPC so parsing arguments stays light."""

from __future__ import annotations

# Device health: resend every device's status this often (the kubelet's lease is twice it).
RESEND_INTERVAL = 10.0
# Warn when the kubelet has not registered the plugin by then.
REGISTRATION_TIMEOUT = 30.0
# The registration socket appears once the allocator's devices are in, or after this long
# without them: the kubelet asks GetInfo the moment the socket appears and waits one second
# for the answer, and a plugin that misses it (still starting, on a loaded node) is asked again
# only after the kubelet's backoff for that socket, which a crashed predecessor's socket may
# already have grown to a minute or two.
REGISTER_AFTER_DEVICES_MAX = 10.0
# ResourceSlices and device health follow the allocator's WatchDevices stream; an allocator
# of an older release has none, and its device list is asked this often instead.
POLL_INTERVAL = 10.0
RESYNC_INTERVAL = 30.0  # a cluster without a watch: list and compare
WATCH_RESYNC_INTERVAL = 600.0  # API server: safety net only, the watch does the work

# How long an allocator call is retried while the allocator restarts, when no kubelet call
# bounds it: a call outside a kubelet request (catching up at start) ...
ALLOCATOR_DEADLINE = 30.0
# ... the device list, asked again soon anyway ...
LIST_DEVICES_DEADLINE = 5.0
# ... and the claims read once at start, which may wait for an allocator still recovering.
LIST_CLAIMS_DEADLINE = 60.0
