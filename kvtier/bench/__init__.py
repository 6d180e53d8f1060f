"""`kvtier bench`: measure TTFT, TPOT, goodput and cache hits of an OpenAI-compatible endpoint, tier by tier.

Modules, one job each: `client` (one streamed request, its connection reused), `metrics` (Prometheus scrape and
per-tier deltas), `prompts` (deterministic, salted prompt text), `trace` (prompt text of Mooncake trace requests;
kvtier.trace parses the file), `arrivals` (fixed, Poisson and gamma send times), `workloads` (sweep, multiturn,
shared-prefix, trace), `session` (scheduling, progress), `runner` (preflight, signals, the result), `stats`
(percentiles, TPOT, goodput), `result` (the JSON file), `terminal` (80-column tables), `report` (Markdown), `plots`
(PNG), `compare` (two result files), `testserver` (a local simulator for tests and demos).
"""
