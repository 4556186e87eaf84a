"""The ``redis`` response cache: responses stored in a Redis server (``redis.asyncio``).

Settings are those of Triton's redis cache (``--cache-config redis,<key>=<value>``), checked at
start-up, when the server is also pinged (as Triton does: an unreachable Redis stops the
start). Once serving, a Redis that goes away never fails a request: lookups miss and inserts
are dropped, with one warning, and Redis is tried again every :attr:`RedisCache.retry_interval`
seconds until it answers (then one info line).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

import tritonx
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx_cache_redis.codec import CodecError, decode, encode

log = logging.getLogger("tritonx")

USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"
#: Redis refuses strings larger than this (``proto-max-bulk-len``'s default)
MAX_VALUE_BYTES = 512 * 1024 * 1024
#: errors that mean "Redis is not reachable" (others are per-command answers)
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)  # TimeoutError is an OSError

SETTINGS: dict[str, str] = {
    "host": "host name or address of the Redis server (required)",
    "port": "its port (required)",
    "user": f"ACL user name (default: ${USERNAME_ENV}, else Redis's default user)",
    "password": f"password (default: ${PASSWORD_ENV}, else none)",
    "db": "database number (default 0)",
    "connect_timeout": "milliseconds to wait for a connection; 0 = forever (default 1000)",
    "socket_timeout": "milliseconds to wait for an answer; 0 = forever (default 1000)",
    "pool_size": "connections kept to Redis (default 16)",
    "wait_timeout": "milliseconds to wait for a free pooled connection (default 1000)",
    "tls_enabled": "true: connect with TLS (default false)",
    "cert": "PEM client certificate (TLS)",
    "key": "PEM client private key (TLS)",
    "cacert": "PEM CA certificate(s) that verify the server (TLS; default: system CAs)",
    "cacert_dir": "directory of CA certificates (TLS)",
    "sni": "server name to send and verify instead of host (TLS)",
}
_TLS_ONLY = ("cert", "key", "cacert", "cacert_dir", "sni")


def _fail(message: str) -> TritonXError:
    return invalid_arg(f"Failed to initialize RedisCache: {message}")


def _int(config: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    text = config.get(key, str(default)).strip()
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise _fail(f"'{key}' must be an integer from {low} to {high}, got '{config[key]}'")
    return int(text)


def _port(config: Mapping[str, str]) -> int:
    """``port`` read as Triton's redis cache reads it (``atoi``: its leading digits, 0 when
    there are none, so a name fails at connection time, after the host is resolved); at most
    65535."""
    text = config["port"].strip()
    digits = text[: len(text) - len(text.lstrip("0123456789"))] if text else ""
    if not text.isascii() or (digits and int(digits) > 65535):
        raise _fail(f"'port' must be an integer from 1 to 65535, got '{config['port']}'")
    return int(digits) if digits else 0


def _seconds(config: Mapping[str, str], key: str, default_ms: int) -> float | None:
    ms = _int(config, key, default_ms, 0, 2**31 - 1)
    return None if ms == 0 else ms / 1000


@dataclass(frozen=True)
class RedisSettings:
    """``--cache-config redis,...`` checked and converted for ``redis.asyncio``."""

    host: str
    port: int
    db: int = 0
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    connect_timeout: float | None = 1.0
    socket_timeout: float | None = 1.0
    pool_size: int = 16
    wait_timeout: float | None = 1.0
    tls: bool = False
    cert: str | None = None
    key: str | None = None
    cacert: str | None = None
    cacert_dir: str | None = None
    sni: str | None = None

    @classmethod
    def parse(cls, config: Mapping[str, str]) -> RedisSettings:
        unknown = sorted(set(config) - set(SETTINGS))
        if unknown:
            raise _fail(
                f"unknown setting(s) {', '.join(unknown)} (--cache-config redis accepts: "
                f"{', '.join(SETTINGS)})"
            )
        if not config.get("host") or not config.get("port"):
            raise _fail(
                "didn't specify address. Must at a minimum specify 'host' and 'port' in the "
                "configuration - e.g. tritonx serve --cache-config redis,host=redis "
                "--cache-config redis,port=6379"
            )
        tls_text = config.get("tls_enabled", "false").strip().lower()
        if tls_text not in ("true", "false"):
            raise _fail(f"'tls_enabled' must be true or false, got '{config['tls_enabled']}'")
        tls = tls_text == "true"
        if not tls:
            given = [k for k in _TLS_ONLY if k in config]
            if given:
                raise _fail(f"{', '.join(given)} need tls_enabled=true")
        for k in ("cert", "key", "cacert"):
            if k in config and not Path(config[k]).is_file():
                raise _fail(f"{k} file '{config[k]}' does not exist")
        if "cacert_dir" in config and not Path(config["cacert_dir"]).is_dir():
            raise _fail(f"cacert_dir '{config['cacert_dir']}' is not a directory")
        if ("cert" in config) != ("key" in config):
            raise _fail("cert and key must be given together")
        return cls(
            host=config["host"],
            port=_port(config),
            db=_int(config, "db", 0, 0, 2**31 - 1),
            user=config.get("user") or os.environ.get(USERNAME_ENV) or None,
            password=config.get("password") or os.environ.get(PASSWORD_ENV) or None,
            connect_timeout=_seconds(config, "connect_timeout", 1000),
            socket_timeout=_seconds(config, "socket_timeout", 1000),
            pool_size=_int(config, "pool_size", 16, 1, 65536),
            wait_timeout=_seconds(config, "wait_timeout", 1000),
            tls=tls,
            cert=config.get("cert"),
            key=config.get("key"),
            cacert=config.get("cacert"),
            cacert_dir=config.get("cacert_dir"),
            sni=config.get("sni"),
        )

    def client(self) -> aioredis.Redis:
        """A new client with its own connection pool (bound to the loop that first uses it)."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "db": self.db,
            "username": self.user,
            "password": self.password,
            "socket_connect_timeout": self.connect_timeout,
            "socket_timeout": self.socket_timeout,
            # one immediate retry on a fresh connection (a pooled one may predate a restart)
            "retry": Retry(NoBackoff(), 1),
        }
        if self.tls:
            kwargs.update(
                connection_class=_SNIConnection if self.sni else SSLConnection,
                ssl_certfile=self.cert,
                ssl_keyfile=self.key,
                ssl_ca_certs=self.cacert,
                ssl_ca_path=self.cacert_dir,
                ssl_cert_reqs="required",
                ssl_check_hostname=True,
            )
            if self.sni:
                kwargs["sni"] = self.sni
        pool = aioredis.BlockingConnectionPool(
            max_connections=self.pool_size, timeout=self.wait_timeout, **kwargs
        )
        return aioredis.Redis(connection_pool=pool)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class _SNIConnection(SSLConnection):
    """A TLS connection that sends (and verifies the certificate against) ``sni``."""

    def __init__(self, *, sni: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sni = sni

    def _connection_arguments(self) -> Mapping[str, Any]:
        return {**super()._connection_arguments(), "server_hostname": self.sni}


def _run_isolated(coro: Any) -> Any:
    """Run ``coro`` to completion on a private loop in a helper thread (start-up only)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target, name="tritonx-redis-ping", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


class RedisCache(tritonx.ResponseCache):
    """Responses in Redis, one string value per key (see :mod:`tritonx_cache_redis.codec`).

    Entries have no expiry: size the Redis server with ``maxmemory`` and an eviction policy
    such as ``allkeys-lru``, as with Triton's redis cache.
    """

    name = "redis"
    #: seconds a Redis found unreachable is left alone before it is tried again
    retry_interval = 1.0

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.settings = RedisSettings.parse(self.config)
        try:
            self._connect()
        except OSError as exc:  # Triton's (hiredis's) text: the host resolved first, then the port
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise TritonXError(
                f"Failed to initialize RedisCache: failed to connect to Redis "
                f"({self.settings.address}): {reason}",
                Code.INTERNAL,
            ) from exc
        try:
            _run_isolated(self._ping())
        except (RedisError, OSError) as exc:
            raise TritonXError(
                f"Failed to initialize RedisCache: cannot reach Redis at "
                f"{self.settings.address}: {exc or type(exc).__name__}",
                Code.INTERNAL,
            ) from exc
        self.client = self.settings.client()
        #: monotonic time before which Redis is not tried (after it was unreachable)
        self._down_until = 0.0
        self._down = False
        self._warned_at = -60.0
        log.info("response cache 'redis': connected to %s", self.settings.address)

    def _connect(self) -> None:
        """Resolve the host, then open (and close) a TCP connection to the port: OSError
        (``socket.gaierror`` for a host that does not resolve) when either fails."""
        settings = self.settings
        infos = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)
        error: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(settings.connect_timeout)
                sock.connect(address)
                return
            except OSError as exc:
                error = exc
            finally:
                sock.close()
        assert error is not None
        raise error

    async def _ping(self) -> None:
        client = self.settings.client()
        try:
            await client.ping()
        finally:
            await client.aclose(close_connection_pool=True)

    # ------------------------------------------------------------------ availability

    def _available(self) -> bool:
        return not self._down or time.monotonic() >= self._down_until

    def _unreachable(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + self.retry_interval
        if not self._down:
            self._down = True
            log.warning(
                "response cache 'redis': Redis at %s is unreachable (%s: %s); serving without "
                "the cache (lookups miss, inserts are dropped) until it answers again",
                self.settings.address,
                type(exc).__name__,
                exc,
            )

    def _reachable(self) -> None:
        if self._down:
            self._down = False
            log.info(
                "response cache 'redis': Redis at %s answers again; caching resumed",
                self.settings.address,
            )

    def _warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._warned_at >= 10.0:
            self._warned_at = now
            log.warning("response cache 'redis': " + message, *args)

    # ------------------------------------------------------------------ the cache

    async def get(self, key: bytes) -> tritonx.InferenceResponse | None:
        if not self._available():
            return None
        try:
            value = await self.client.get(bytes(key).hex())
        except _UNREACHABLE as exc:
            self._unreachable(exc)
            return None
        except RedisError as exc:
            self._reachable()
            self._warn("lookup failed: %s", exc)
            return None
        self._reachable()
        if value is None:
            return None
        try:
            return decode(value if isinstance(value, bytes) else value.encode())
        except CodecError as exc:
            self._warn("ignoring entry %s: %s", bytes(key).hex(), exc)
            return None

    async def put(self, key: bytes, response: tritonx.InferenceResponse) -> None:
        if not self._available():
            return
        try:
            value = encode(response)
        except CodecError as exc:
            log.debug("response cache 'redis': not stored: %s", exc)
            return
        if len(value) > MAX_VALUE_BYTES:
            log.debug("response cache 'redis': a %d-byte response is not stored", len(value))
            return
        try:
            await self.client.set(bytes(key).hex(), value)
        except _UNREACHABLE as exc:
            self._unreachable(exc)
            return
        except RedisError as exc:
            self._reachable()
            self._warn("insert failed: %s", exc)
            return
        self._reachable()

    async def evict_model(self, model: str, version: int, scope: bytes) -> None:
        """Keep the entries of a load that this server unloaded or replaced.

        Keys start with the load's scope, a digest of the model's configuration and files
        (:data:`tritonx.cache.SCOPE_BYTES`), so a model replaced in place and loaded again
        never reads them, here or on any server. They are not deleted because the cache is
        shared: another server may still serve the same files under the same scope (a
        rolling update), and this server, restarted on the same files, finds them again.
        Redis's own policy (``maxmemory`` with ``allkeys-lru``) reclaims the entries no
        server asks for any more.
        """

    async def close(self) -> None:
        try:
            await self.client.aclose(close_connection_pool=True)
        except Exception as exc:  # shutting down: nothing left to protect
            log.debug("response cache 'redis': close: %s", exc)
