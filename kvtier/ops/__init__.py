"""Day-2 checks of a live deployment: `kvtier status` (AWS APIs) and `kvtier verify` (Kubernetes API), both read-only.

Each check is a pure function over what was read, so it is tested on stored responses; reading is a thin layer.
"""
