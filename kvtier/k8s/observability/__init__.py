"""Metrics wiring of kvtier (the `observability` section): scrape objects, recording rules and alerts, dashboards.

Every metric name comes from the upstream source at the pinned version (docs/references.md "Observability"). Scrape
objects add two target labels to every kvtier series: `lob` (from the namespace `kvtier-<lob>`) and
`kvtier_endpoint` (from the pod label `app`, which operator and standalone engine pods both carry); rules and
dashboards group by them.
"""
