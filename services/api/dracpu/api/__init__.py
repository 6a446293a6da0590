"""The api sidecar: a read-only HTTP view (FastAPI on uvicorn) of the four dracpu services."""
