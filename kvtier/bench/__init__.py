"""`kvtier bench`: measure TTFT and cache hits of an OpenAI-compatible endpoint, tier by tier.

Modules, one job each: `client` (one streamed request), `metrics` (Prometheus scrape and per-tier deltas), `prompts`
(deterministic, salted prompt text), `trace` (prompt text of Mooncake trace requests; kvtier.trace parses the file),
`workloads` (sweep, multiturn, shared-prefix, trace), `runner` (scheduling, progress, preflight), `stats`
(percentiles, also used by kvtier.simulate), `result` (the JSON file), `report` (Markdown), `plots` (PNG), `compare`
(two result files), `testserver` (a local simulator for tests and demos).
"""
