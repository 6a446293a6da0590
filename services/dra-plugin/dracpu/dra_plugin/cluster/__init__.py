"""The API server's side: access and features, the claims read and their status written, and the
folder that stands in for an API server in local runs."""
