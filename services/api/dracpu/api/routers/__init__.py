"""The api's routes, one APIRouter per resource: node, topology, devices, claims, pools,
containers, health, metrics and the HTML pages. Each reads the application's state through
`dracpu.api.state.StateDep`."""

import sys

# FastAPI asks, for every route parameter it builds, whether the annotation is a pydantic v1
# model (fastapi._compat.shared.is_pydantic_v1_model_class), and imports pydantic.v1, a whole
# second pydantic of about 1.6 MB, to find out. The api has only v2 models: a None entry, set
# before any router here is built, makes that import fail, which FastAPI reads as "not a v1
# model".
sys.modules.setdefault("pydantic.v1", None)  # type: ignore[arg-type]
