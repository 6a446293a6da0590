"""What the CPU plugin knows: the containers it placed, the shared pool it follows, the pacing
of its updates, its metrics, and the conversions between the runtime's and its own records."""
