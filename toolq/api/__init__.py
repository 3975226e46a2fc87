"""The HTTP API: FastAPI app, routes, auth, event tickets, limits, metrics, dashboard, MCP."""
