"""The HTTP server (`editapply serve`): `create_app(service, settings)` builds the FastAPI app."""

from engine.server.app import create_app
from engine.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
