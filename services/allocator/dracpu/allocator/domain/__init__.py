"""The driver's pure rules below the claims: the published device model, a claim's opaque
parameters and quantities, isolated CPUs, device health."""
