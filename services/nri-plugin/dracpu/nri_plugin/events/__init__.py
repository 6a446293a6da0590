"""What the CPU plugin does on the runtime's events: place a container as it is created, adopt
those it missed, re-synchronize, push the shared pool, and release claims as containers go."""
