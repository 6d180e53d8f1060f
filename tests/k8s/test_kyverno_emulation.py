"""The emulation of Kyverno 1.19's condition evaluation (tests/k8s/kyverno_emulation.py), on the cases where it
differs from reading the policy with the reference JMESPath: each would let a guard that fails on Kyverno pass here."""

from __future__ import annotations

import pytest

from tests.k8s.kyverno_emulation import UnresolvedError, holds, query

REQUEST = {"request": {"object": {"spec": {"csi": {"driver": "curvine"}, "volumes": [{"name": "a"}]}}}}


def test_a_missing_key_fails_the_variable_unless_defaulted() -> None:
    with pytest.raises(UnresolvedError, match="Unknown key"):
        query("request.object.spec.claimRef.namespace", REQUEST)  # the reference implementation returns null
    assert query("request.object.spec.claimRef.namespace || ''", REQUEST) == ""
    with pytest.raises(UnresolvedError):  # `&&` passes its right side's failure on
        query("request.object.spec.csi.driver == 'curvine' && request.object.spec.csi.volumeAttributes.x", REQUEST)
    assert query("request.object.spec.volumes[?hostPath].hostPath.path", REQUEST) == []  # filters swallow it
    assert query("length([request.object.spec.hostNetwork][?@])", REQUEST) == 0  # multi-selects swallow it
    assert query("request.object.spec.x.y == 'z'", REQUEST) is False  # comparisons swallow it


def test_any_not_in_matches_wildcards_both_ways() -> None:
    """`isAnyNotIn`: a key `*` counts as allowed, which is why every guard AnyNotIn also refuses wildcards."""
    assert holds({"key": "x", "operator": "AnyNotIn", "value": ["/dev/shm"]}, {}) is True
    assert holds({"key": "*", "operator": "AnyNotIn", "value": ["/dev/shm"]}, {}) is False
    assert holds({"key": ["/dev/sh?"], "operator": "AnyNotIn", "value": ["/dev/shm"]}, {}) is False
    assert holds({"key": None, "operator": "AnyNotIn", "value": ["a"]}, {}) is False  # unsupported key type


def test_equals_takes_the_value_as_the_pattern_only() -> None:
    assert holds({"key": "*", "operator": "Equals", "value": "aws-eks"}, {}) is False
    assert holds({"key": "aws-eks", "operator": "Equals", "value": "aws-*"}, {}) is True
    assert holds({"key": True, "operator": "Equals", "value": "true"}, {}) is False  # types must match
