"""The api sidecar: a read-only HTTP view (FastAPI on uvicorn) of the four dracpu services."""

import sys

# FastAPI asks, for every route parameter it builds, whether the annotation is a pydantic v1
# model (fastapi._compat.shared.is_pydantic_v1_model_class), and imports pydantic.v1, a whole
# second pydantic of about 1.6 MB, to find out. The api has only v2 models: a None entry makes
# that import fail, which FastAPI reads as "not a v1 model".
sys.modules.setdefault("pydantic.v1", None)  # type: ignore[arg-type]
