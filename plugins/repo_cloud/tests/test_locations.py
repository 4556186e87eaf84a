"""Repository URLs in Triton's forms (no store needed)."""

from __future__ import annotations

import pytest

from tritonx.errors import TritonXError
from tritonx_repo_cloud.locations import parse_azure, parse_gcs, parse_s3


@pytest.mark.parametrize(
    ("url", "endpoint", "bucket", "prefix"),
    [
        ("s3://bucket/path/to/models", "", "bucket", "path/to/models"),
        ("s3://bucket", "", "bucket", ""),
        ("s3://bucket//path///models/", "", "bucket", "path/models"),
        ("s3://minio.local:9000/bucket/models", "http://minio.local:9000", "bucket", "models"),
        ("s3://127.0.0.1:9000/bucket", "http://127.0.0.1:9000", "bucket", ""),
        ("s3://http://127.0.0.1:9000/bucket/m", "http://127.0.0.1:9000", "bucket", "m"),
        ("s3://https://s3.example.com:443/bucket/m", "https://s3.example.com:443", "bucket", "m"),
    ],
)
def test_s3_urls(url: str, endpoint: str, bucket: str, prefix: str) -> None:
    location = parse_s3(url)
    assert (location.endpoint, location.bucket, location.prefix) == (endpoint, bucket, prefix)
    assert location.model_url("m") == url.rstrip("/") + "/m"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "Invalid bucket name: ''"),
        ("s3:////", "Invalid bucket name: '//'"),
        ("s3://127.0.0.1:9000/", "No bucket name found in path: s3://127.0.0.1:9000/"),
        ("s3://https://bucket/models", "https:// must be followed by host:port"),
    ],
)
def test_bad_s3_urls(url: str, message: str) -> None:
    with pytest.raises(TritonXError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_s3(url)


def test_gcs_urls() -> None:
    location = parse_gcs("gs://bucket/path/to/models/")
    assert (location.bucket, location.prefix, location.root) == (
        "bucket",
        "path/to/models",
        "bucket/path/to/models",
    )
    assert parse_gcs("gs://bucket").root == "bucket"
    with pytest.raises(TritonXError, match="No bucket name found in path: gs://"):
        parse_gcs("gs://")


def test_azure_urls() -> None:
    location = parse_azure("as://account/container/path/models")
    assert (location.account, location.bucket, location.prefix) == (
        "account",
        "container",
        "path/models",
    )
    assert parse_azure("as://account.blob.core.windows.net/c").account == "account"
    for bad in ("as://account", "as:///container/x"):
        with pytest.raises(TritonXError, match="Invalid azure storage path"):
            parse_azure(bad)
    with pytest.raises(TritonXError, match="query strings are not supported"):
        parse_azure("as://account/container/models?sv=1")
