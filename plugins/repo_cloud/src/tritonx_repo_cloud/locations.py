"""Repository URLs in Triton's forms, parsed into a bucket (or container) and a prefix.

* ``s3://bucket/path`` and ``s3://host:port/bucket/path``: the ``host:port`` form names an
  S3-compatible endpoint, reached over HTTP unless the host is written ``https://host``
  (``s3://https://host:port/bucket/path``), as Triton's S3 file system does.
* ``gs://bucket/path``.
* ``as://account/container/path`` (the account may be written ``account.blob.core.windows.net``).

Repeated and trailing slashes are dropped, as Triton cleans its paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tritonx.errors import Code, TritonXError

_HOST_PORT = re.compile(r"[0-9a-zA-Z\-.]+:[0-9]+")
_AZURE_HOST_SUFFIX = ".blob.core.windows.net"


@dataclass(frozen=True)
class Location:
    """Where a repository lives in its store.

    :ivar url: the ``--model-repository`` value, as given.
    :ivar bucket: the S3/GCS bucket or the Azure container.
    :ivar prefix: the folder inside it ("" for the bucket's root), without slashes at the ends.
    :ivar endpoint: S3 only: ``http(s)://host:port`` from the URL, else "".
    :ivar account: Azure only: the storage account named in the URL.
    """

    url: str
    bucket: str
    prefix: str
    endpoint: str = ""
    account: str = ""

    @property
    def root(self) -> str:
        """The repository folder as an fsspec path (``bucket/prefix``)."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def model_url(self, name: str) -> str:
        """The URL of model folder ``name`` (for messages and counters)."""
        return f"{self.url.rstrip('/')}/{name}"


def _segments(text: str) -> list[str]:
    return [part for part in text.split("/") if part]


def parse_s3(url: str) -> Location:
    """``s3://[http(s)://host:port/]bucket[/path]``."""
    rest = url[len("s3://") :]
    protocol = ""
    for candidate in ("https://", "http://"):
        if rest.startswith(candidate):
            protocol, rest = candidate, rest[len(candidate) :]
            break
    parts = _segments(rest)
    if not parts:
        raise TritonXError(f"Invalid bucket name: '{rest}'", Code.INVALID_ARG)
    endpoint = ""
    if _HOST_PORT.fullmatch(parts[0]):
        scheme = "https" if protocol == "https://" else "http"
        endpoint = f"{scheme}://{parts[0]}"
        parts = parts[1:]
    elif protocol:
        raise TritonXError(
            f"Invalid S3 path '{url}': {protocol} must be followed by host:port", Code.INVALID_ARG
        )
    if not parts:
        raise TritonXError(f"No bucket name found in path: {url}", Code.INTERNAL)
    return Location(url, parts[0], "/".join(parts[1:]), endpoint=endpoint)


def parse_gcs(url: str) -> Location:
    """``gs://bucket[/path]``."""
    parts = _segments(url[len("gs://") :])
    if not parts:
        raise TritonXError(f"No bucket name found in path: {url}", Code.INTERNAL)
    return Location(url, parts[0], "/".join(parts[1:]))


def parse_azure(url: str) -> Location:
    """``as://account/container[/path]``."""
    rest = url[len("as://") :]
    if "?" in rest:
        raise TritonXError(
            f"Invalid azure storage path: {url} (query strings are not supported)",
            Code.INVALID_ARG,
        )
    parts = _segments(rest)
    if len(parts) < 2 or rest.startswith("/"):
        raise TritonXError(f"Invalid azure storage path: {url}", Code.INTERNAL)
    account = parts[0]
    if account.endswith(_AZURE_HOST_SUFFIX):
        account = account[: -len(_AZURE_HOST_SUFFIX)]
    return Location(url, parts[1], "/".join(parts[2:]), account=account)
