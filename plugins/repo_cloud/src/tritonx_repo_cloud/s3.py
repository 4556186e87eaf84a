"""``s3://bucket/path`` and ``s3://[https://]host:port/bucket/path`` through s3fs.

Credentials as Triton reads them (botocore's chain: ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, then ``AWS_PROFILE`` and the shared files,
then the instance's role), region from ``AWS_DEFAULT_REGION``. With no credentials at all the
store is read anonymously (Triton's SDK then sends unsigned requests too). The endpoint is the
URL's ``host:port`` (HTTP unless written ``https://host:port``), else ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` (S3-compatible stores such as MinIO), else AWS. A custom endpoint is
addressed path-style, as Triton's client always is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from tritonx.errors import Code, TritonXError
from tritonx_repo_cloud.locations import Location, parse_s3
from tritonx_repo_cloud.repository import CloudRepository, error_code

log = logging.getLogger("tritonx.repo_cloud")


class S3Repository(CloudRepository):
    """A model repository in Amazon S3 or an S3-compatible store."""

    name = "s3"
    schemes = ("s3",)
    mount_env = "TRITON_AWS_MOUNT_DIRECTORY"
    extra = "s3"
    module = "s3fs"

    @classmethod
    def parse(cls, url: str) -> Location:
        return parse_s3(url)

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to ("" for AWS itself)."""
        return (
            self.location.endpoint
            or os.environ.get("AWS_ENDPOINT_URL_S3", "")
            or os.environ.get("AWS_ENDPOINT_URL", "")
        )

    def open_filesystem(self, library: Any) -> Any:
        client_kwargs: dict[str, Any] = {}
        config_kwargs: dict[str, Any] = {}
        if self.endpoint:
            client_kwargs["endpoint_url"] = self.endpoint
            config_kwargs["s3"] = {"addressing_style": "path"}
        region = os.environ.get("AWS_DEFAULT_REGION")
        if region:
            client_kwargs["region_name"] = region
        anon = not _has_credentials()
        if anon:
            log.info("no AWS credentials found: reading %s anonymously", self.url)
        try:
            return library.S3FileSystem(
                anon=anon,
                client_kwargs=client_kwargs,
                config_kwargs=config_kwargs,
                skip_instance_cache=True,
                use_listings_cache=False,
            )
        except Exception as exc:
            raise self.unreadable(exc) from exc

    def object_version(self, info: Mapping[str, Any]) -> str:
        return f"{info.get('ETag', '')}|{info.get('LastModified', '')}"

    def unreadable(self, exc: BaseException) -> TritonXError:
        code, message = error_code(exc)
        return TritonXError(
            "Unable to create S3 filesystem client. Check account credentials. "
            f"Exception: '{code}' Message: '{message}'",
            Code.INTERNAL,
        )

    def bucket_missing(self, exc: BaseException) -> TritonXError:
        code, message = error_code(exc)
        if code in ("FileNotFoundError", "404"):
            code, message = "NoSuchBucket", "The specified bucket does not exist"
        return TritonXError(
            "Unable to create S3 filesystem client. Check account credentials. "
            f"Exception: '{code}' Message: '{message}'",
            Code.INTERNAL,
        )


def _has_credentials() -> bool:
    """Whether botocore's credential chain finds anything (environment, profile, role)."""
    import botocore.session

    try:
        return botocore.session.Session().get_credentials() is not None
    except Exception:  # a broken profile: let the client report it when it is used
        return True
