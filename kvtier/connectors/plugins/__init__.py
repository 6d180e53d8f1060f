"""Python modules shipped to engine pods in ConfigMaps and imported there by vLLM (package data, so the tests read
exactly what is shipped). They import vLLM, which only the engine image has, and nothing from kvtier."""

from __future__ import annotations

from importlib import resources

from kvtier.connectors.plugins import kvtier_lmcache

LMCACHE_CONNECTOR_MODULE = "kvtier_lmcache"  # the module name vLLM imports (`kv_connector_module_path`)
LMCACHE_CONNECTOR_FILE = f"{LMCACHE_CONNECTOR_MODULE}.py"
# Not vLLM's registered name `LMCacheConnectorV1`: vLLM 0.19 looks a name up in its registry before the module path.
LMCACHE_CONNECTOR_CLASS = kvtier_lmcache.CLASS_NAME


def plugin_text(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
