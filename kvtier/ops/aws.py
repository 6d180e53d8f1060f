"""What `preflight` and `status` share to reach AWS: one session, short timeouts, and one line on failure.

botocore's defaults (60 s connect, 60 s read, legacy mode with 5 attempts) let a hanging proxy hold `kvtier status`
for minutes. kvtier's calls are small reads, so: 4 s to connect, 8 s to read, standard retry mode with 2 attempts in
all (botocore `Config`, docs/references.md "Issue 26"). The worst case per call is then 2 x (4 + 8) s plus the
backoff, and the first unreachable endpoint stops the whole command (measured: 17 s, tests/ops/test_network_bounds.py).
"""

from __future__ import annotations

import sys
from typing import Any

from botocore.exceptions import BotoCoreError, ConfigParseError, ConnectionError, HTTPClientError

from kvtier.errors import UnavailableError

CONNECT_TIMEOUT_S = 4
READ_TIMEOUT_S = 8
MAX_ATTEMPTS = 2  # standard mode counts the first try: one retry
# Connection refused or timed out, a proxy or TLS failure (ConnectionError), a read that timed out or a connection
# closed mid-answer (HTTPClientError): AWS is out of reach.
UNREACHABLE: tuple[type[BaseException], ...] = (ConnectionError, HTTPClientError)


def client_config() -> Any:
    from botocore.config import Config

    return Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
    )


def session(region: str, profile: str | None) -> Any:
    """A boto3 session for `region`. A missing profile, an unknown region or a malformed AWS config file (botocore's
    ConfigParseError) is one line and exit 3, never a traceback."""
    import boto3

    try:
        aws = boto3.session.Session(profile_name=profile, region_name=region)
        aws.available_profiles  # noqa: B018 - parses the AWS config files now, where a malformed one is reported
    except ConfigParseError as err:
        raise UnavailableError(
            f"cannot check: {err}; fix that file's syntax (INI sections and key = value lines) or point "
            "AWS_CONFIG_FILE at another one"
        ) from err
    except BotoCoreError as err:
        raise UnavailableError(f"cannot check: {err}") from err
    return aws


def announce(what: str, endpoint: str) -> None:
    """The one line before kvtier waits on the network, on stderr (stdout stays clean for --json)."""
    print(f"contacting {what} ({endpoint}) ...", file=sys.stderr, flush=True)


def unreachable(err: BaseException, region: str) -> UnavailableError:
    return UnavailableError(
        f"cannot check: cannot reach AWS in {region} within {CONNECT_TIMEOUT_S} s to connect and {READ_TIMEOUT_S} s "
        f"to read, {MAX_ATTEMPTS} attempts ({err}); check the network, HTTPS_PROXY and the region"
    )
