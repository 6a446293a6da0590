"""The one test harness: what every tier and benchmark uses to start, stop and wait for the
services and the real peers, build requests, and fake the kubelet and the API server.

Importable as `harness` by the tests (pytest's `pythonpath`) and by the benchmarks and any
script run with the project's virtualenv (`make venv` puts tests/ on its path).
"""
