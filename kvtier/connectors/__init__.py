"""L2 connectors, one module each, behind one interface (base.py `Connector`; design "L2 connectors").

Every layer above asks `connector_for(endpoint)` for what differs between connectors: engine args, env and mounted
files, the L2 identity, the L2 file unit, the janitor's file rules, the hit metrics, what the connector supports.
Nothing outside this package compares `cache.connector` with a name (tests/test_layers.py checks it). A new connector
is a new module here with a `Connector` subclass, listed in `CONNECTORS` and in kvtier/config/endpoint.py's
`Connector` literal (docs/development.md "A third connector").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.catalog import L2_CALIBRATION_FILE_BYTES, Model
from kvtier.config.endpoint import CacheConfig, Endpoint
from kvtier.connectors.base import Connector, Refusal, UnsupportedError
from kvtier.connectors.lmcache import LMCACHE
from kvtier.connectors.vllm import VLLM

__all__ = [
    "CONNECTORS",
    "DEFAULT_CONNECTOR",
    "Connector",
    "Refusal",
    "UnsupportedError",
    "connector_for",
    "connector_named",
    "engine_image",
    "identity_connector",
    "l2_identity",
    "l2_identity_facts",
    "l2_read_share",
    "l2_subdir",
]

# Every connector, in a fixed order: where a rule, a dashboard or the bench reads the series of all of them (a LOB
# may run both), they come in this order.
CONNECTORS: tuple[Connector, ...] = (LMCACHE, VLLM)
_BY_NAME: dict[str, Connector] = {c.name: c for c in CONNECTORS}
# The identity fact that names a connector; LMCache identities have none (they predate the second connector).
CONNECTOR_FACT = "connector"


def connector_named(name: str) -> Connector:
    """The connector of a `cache.connector` value. Raises ValueError naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"no L2 connector {name!r}; kvtier knows {', '.join(_BY_NAME)}") from None


def connector_for(subject: Endpoint | CacheConfig) -> Connector:
    """The connector an endpoint (or its cache settings) runs."""
    cache = subject.cache if isinstance(subject, Endpoint) else subject
    return connector_named(cache.connector)


# The connector of an endpoint whose LOB file names none.
DEFAULT_CONNECTOR: Connector = connector_for(CacheConfig())
# What read the files the network model (catalog l2_network_efficiency) was measured with: the blog's LMCache.
CALIBRATED_CONNECTOR: Connector = LMCACHE


def l2_read_share(endpoint: Endpoint, model: Model) -> float:
    """How fast the endpoint's connector reads its L2 files relative to what the network model was calibrated with:
    its measured read efficiency at its files' size over LMCache's at the blog's (L2_CALIBRATION_FILE_BYTES), at
    most 1 (nothing measured says larger files beat the blog's rate over a network). The catalog's l2_read_gbps
    times this is the endpoint's L2 read rate (kvtier/planner); 1.0 for LMCache at the blog's file size and above."""
    calibrated = CALIBRATED_CONNECTOR.read_efficiency.at(int(L2_CALIBRATION_FILE_BYTES.value))
    return min(connector_for(endpoint).l2_read_efficiency(endpoint, model) / calibrated, 1.0)


def identity_connector(facts: Mapping[str, Any]) -> str:
    """The connector whose identity `facts` are (as rendered into an annotation), by name."""
    return str(facts.get(CONNECTOR_FACT, LMCACHE.name))


def l2_identity_facts(endpoint: Endpoint) -> dict[str, Any]:
    return connector_for(endpoint).identity_facts(endpoint)


def l2_identity(endpoint: Endpoint) -> str:
    return connector_for(endpoint).l2_identity(endpoint)


def l2_subdir(endpoint: Endpoint) -> str:
    """`<endpoint>/<identity>`: where the endpoint writes, relative to its LOB's L2 volume (design "L2 layout")."""
    return connector_for(endpoint).l2_subdir(endpoint)


def engine_image(endpoint: Endpoint) -> str:
    """The vLLM image the endpoint runs (its `image`, else its connector's default for its mode)."""
    return connector_for(endpoint).image(endpoint)
