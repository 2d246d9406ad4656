"""Redis URLs as the stores connect to them (app/cache/redis_store.py: connect), checked at load time, and
the port check backend URLs share.

A URL the Redis client cannot parse used to pass `slipstream check` and then fail the start (or a reload)
with the client's traceback, naming no key. Messages never repeat the URL: it may carry a password. A section
may name its URL by an environment variable instead (`redis_url_env`), resolved and checked the same way at
load time (app.config: _resolve_secrets).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import urlsplit

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "redis+sentinel")


def redis_url_problem(url: str) -> str | None:
    """What is wrong with a redis_url, in words; None when the stores can connect with it."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in REDIS_SCHEMES:
        return "must start with " + ", ".join(f"{s}://" for s in REDIS_SCHEMES)
    if scheme == "unix":
        return None if urlsplit(url).path else "unix:// needs the socket's path"
    if scheme == "redis+sentinel":
        # host:port[,host:port]/service[/db]
        hosts, _, path = rest.partition("/")
        for host in hosts.split(","):
            name, colon, port = host.rpartition(":")
            if not (name if colon else host) or (colon and not port.isdigit()):
                return "redis+sentinel:// needs host:port[,host:port]/service[/db] with numeric ports"
        db = path.partition("/")[2]
        return None if not db or db.isdigit() else "the database after the service must be a number"
    return port_problem(url)


def port_problem(url: str) -> str | None:
    """What is wrong with a URL's port, in words (never the URL itself); None if it has none or a good one."""
    try:
        urlsplit(url).port  # noqa: B018 - the property parses and range-checks the port
    except ValueError:
        return "the port after the host must be a number 0-65535"
    return None


def one_redis_source(url: str | None, url_env: str | None) -> None:
    """ValueError unless a section names its Redis at most one way: `redis_url` in the file, or `redis_url_env`,
    the environment variable that holds it (a Kubernetes Secret's, so a password never sits in a ConfigMap)."""
    if url is not None and url_env is not None:
        raise ValueError("give redis_url or redis_url_env, not both")


def checked_redis_url(url: str | None) -> str | None:
    """A pydantic field validator for `redis_url` fields: the URL, or ValueError naming the problem."""
    problem = redis_url_problem(url) if url else None
    if problem:
        raise ValueError(problem)
    return url


def proxy_url_problem(url: str) -> str | None:
    """What is wrong with a backend's proxy URL, in words (never the URL: it may carry a password); None if the
    upstream hop can use it: http://[user:password@]host[:port], nothing after the authority."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        return "must start with http:// (the proxy is spoken to in plain HTTP; an https backend's TLS runs through it)"
    if port_problem(url):
        return port_problem(url)
    if not parts.hostname:
        return "names no host"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must be http://[user:password@]host[:port] with nothing after it"
    return None


def ca_bundle_problem(path: Path) -> str | None:
    """Why a ca_bundle file cannot be trusted from (None if it can): it must exist and hold PEM certificates."""
    if not path.is_file():
        return "is not a file"
    try:
        context = ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        return f"does not hold PEM certificates ({exc.__class__.__name__}: {exc.args[-1] if exc.args else exc})"
    if not context.cert_store_stats().get("x509"):
        return "holds no certificate"
    return None
