"""The api's routes, one APIRouter per resource: node, topology, devices, claims, pools,
containers, health, metrics and the HTML pages. Each reads the application's state through
`dracpu.api.state.StateDep`."""
