"""Prometheus metrics (`GET /metrics`), in a registry of the app's own.

Request side, counted by the ASGI middleware `RequestMetrics` for every response:
  editapply_http_requests_total{route, method, status}, editapply_http_request_duration_seconds{route}
  (until the last byte, so a stream counts whole). `route` is the route's template, for the
  responses sent before routing too (401, 413, 415: matched against the templates here); only a
  path no route has is "unmatched". A client that left before any response (mid-body) is status
  "499" (nginx's "client closed request"), not a 500.
Generation side, observed when a request finishes (`Metrics.observe_generation`):
  editapply_prompt_tokens_total / editapply_generated_tokens_total{route},
  editapply_draft_tokens_total / editapply_accepted_draft_tokens_total{route},
  editapply_tokens_per_step (histogram: tokens committed per verify step),
  editapply_time_to_first_token_seconds{route}, editapply_requests_finished_total{route, reason}
  (stop, length, cancelled, error, disconnect).
Engine state, read from `service.load()` at each scrape:
  editapply_queue_waiting, editapply_running, editapply_kv_blocks_total, editapply_kv_blocks_free,
  editapply_kv_usage_ratio, editapply_engine_steps_total, editapply_engine_up (0 once the engine
  is gone: its process died).
Merge pool, read from `merges.load()`: editapply_merge_workers, editapply_merges_in_flight.
"""

from __future__ import annotations

import re
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from starlette.routing import compile_path

from engine.types import GenerationStats

CLIENT_LEFT = "499"

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300)
STEP_BUCKETS = (1, 2, 3, 4, 6, 8, 10, 12, 14, 15, 16, 24, 32, 48, 64)


class Metrics:
    def __init__(self, service, merges):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("editapply_http_requests", "HTTP requests by route, method and status",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("editapply_http_request_duration_seconds", "Request latency until the last byte",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("editapply_time_to_first_token_seconds", "Time to the first generated token",
                              ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("editapply_prompt_tokens", "Prompt tokens of finished requests", ["route"], registry=r)
        self.generated = Counter("editapply_generated_tokens", "Tokens generated", ["route"], registry=r)
        self.drafted = Counter("editapply_draft_tokens", "Draft tokens proposed by the drafters", ["route"], registry=r)
        self.accepted = Counter("editapply_accepted_draft_tokens", "Draft tokens accepted by verification", ["route"], registry=r)
        self.per_step = Histogram("editapply_tokens_per_step", "Tokens committed per verify step (accepted drafts + 1)",
                                  buckets=STEP_BUCKETS, registry=r)
        self.finished = Counter("editapply_requests_finished", "Generations by how they ended", ["route", "reason"], registry=r)
        r.register(EngineCollector(service, merges))

    def observe_generation(self, route: str, stats: GenerationStats | None, reason: str | None) -> None:
        """Record one finished (or abandoned) generation from its engine stats (None: it has none,
        e.g. the client left before the engine's last event)."""
        self.finished.labels(route, reason or "unknown").inc()
        if stats is None:
            return
        self.prompt_tokens.labels(route).inc(stats.prompt_tokens)
        self.generated.labels(route).inc(stats.generated_tokens)
        self.drafted.labels(route).inc(stats.drafted)
        self.accepted.labels(route).inc(stats.accepted)
        if stats.ttft_ms is not None:
            self.ttft.labels(route).observe(stats.ttft_ms / 1000)
        for k, n in stats.accepted_per_step_hist.items():
            for _ in range(n):
                self.per_step.observe(k)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class EngineCollector:
    """Gauges read from the engine at scrape time (no bookkeeping on the hot path)."""

    def __init__(self, service, merges):
        self.service = service
        self.merges = merges

    def collect(self):
        load = self.service.load()
        merges = self.merges.load()
        total, free = load.kv_blocks_total or 0, load.kv_blocks_free or 0  # 0: a backend that does not say
        for name, doc, value in (
            ("editapply_queue_waiting", "Requests waiting for the engine", load.waiting),
            ("editapply_running", "Requests being generated", load.running),
            ("editapply_kv_blocks_total", "KV cache blocks", total),
            ("editapply_kv_blocks_free", "Free KV cache blocks", free),
            ("editapply_kv_usage_ratio", "Fraction of KV cache blocks in use", (total - free) / total if total else 0.0),
            ("editapply_engine_up", "1 while the engine can serve, 0 once it is gone", 0 if load.unavailable else 1),
            ("editapply_merge_workers", "Merge worker processes (0: merges run in threads)", merges["merge_workers"]),
            ("editapply_merges_in_flight", "Merges running or waiting for a worker", merges["merges_in_flight"]),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
        yield CounterMetricFamily("editapply_engine_steps", "Engine steps run", value=load.steps)


class RequestMetrics:
    """ASGI middleware: count every response by route template and status, and time it."""

    def __init__(self, app, metrics: Metrics, paths: tuple[str, ...] = ()):
        self.app = app
        self.metrics = metrics
        # The app's route templates, for responses sent before routing (401, 413, 415).
        self.templates: list[tuple[re.Pattern, str]] = [(compile_path(p)[0], p) for p in paths]

    def route_of(self, scope) -> str:
        # The router leaves the matched route in the scope; unknown paths share one label.
        route = getattr(scope.get("route"), "path", None)
        if route is not None:
            return route
        return next((path for regex, path in self.templates if regex.match(scope["path"])), "unmatched")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status: int | None = None

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except BaseException:
            status = status or 500  # uvicorn answers an exception that escapes with a 500
            raise
        finally:
            # No response and no exception: the client left before one could be sent.
            label = CLIENT_LEFT if status is None else str(status)
            route = self.route_of(scope)
            self.metrics.requests.labels(route, scope["method"], label).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)
