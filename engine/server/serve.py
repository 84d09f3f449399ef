"""`editapply serve`: load the model, start the engine thread, run the app under uvicorn.

On SIGTERM or Ctrl-C uvicorn's shutdown begins by draining the app (`ServerState.drain`: the
requests in flight answer 503 `shutting_down` at once, new ones are refused), then waits for
them as usual."""

from __future__ import annotations

import sys

import uvicorn

from engine.hosts import is_loopback

EXIT_OK, EXIT_BAD_INPUT = 0, 2


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose shutdown first ends what the app runs (each request answered)."""

    async def shutdown(self, sockets=None) -> None:
        self.config.app.state.editapply.drain()
        await super().shutdown(sockets)


def serve(model: str | None = None, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          log_level: str = "info", backend: str | None = None, vllm_url: str | None = None) -> int:
    from engine.config import EngineConfig
    from engine.server.app import create_app
    from engine.server.settings import ServerSettings
    from engine.service import open_service

    if not 0 <= port <= 65535:
        return _fail(f"--port must be in [0, 65535], got {port}")
    try:
        settings = ServerSettings.from_env(api_key=api_key)
        cfg = EngineConfig.from_env(model=model, backend=backend, vllm_url=vllm_url)
    except ValueError as exc:
        return _fail(str(exc))
    if not settings.api_key and not is_loopback(host):
        print(f"editapply: warning: serving on {host} without an API key; anyone who can reach it can use it "
              "(set --api-key or EDITAPPLY_API_KEY)", file=sys.stderr)
    try:
        service = open_service(cfg, process=settings.engine_process)
    except (RuntimeError, OSError, ValueError) as exc:  # not installed, bad folder, checksum, bad config, vLLM down
        return _fail(f"cannot load the model: {exc}")
    app = create_app(service, settings)
    auth = "bearer token required" if settings.api_key else "no authentication"
    engine = f"vLLM at {service.url}" if cfg.backend == "vllm" else f"device {cfg.torch_device}"
    print(f"editapply: serving {app.state.editapply.model_id} on http://{host}:{port} ({auth}; "
          f"{engine}, context {service.cfg.max_model_len} tokens)", file=sys.stderr)
    server = DrainingServer(uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5))
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down for, as uvicorn.run expects
        pass
    finally:
        service.shutdown()
    return EXIT_OK


def _fail(message: str) -> int:
    print(f"editapply: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
