"""Engines other than ours behind the same `service.Engine` protocol: `vllm` (a `vllm serve` over
its OpenAI API) and `vllm_serve` (the command line that starts one). `service.open_service`
chooses by `EngineConfig.backend`."""
