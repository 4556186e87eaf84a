"""``gs://bucket/path`` through gcsfs.

Credentials in Triton's order: the JSON file named by ``GOOGLE_APPLICATION_CREDENTIALS``
(authorized user or service account), then the attached service account (metadata server),
then anonymous access. ``STORAGE_EMULATOR_HOST`` points the client at an emulator (anonymous
unless a credential file is given).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tritonx.errors import Code, TritonXError
from tritonx_repo_cloud.locations import Location, parse_gcs
from tritonx_repo_cloud.repository import CloudRepository, error_code


class GCSRepository(CloudRepository):
    """A model repository in Google Cloud Storage."""

    name = "gcs"
    schemes = ("gs",)
    mount_env = "TRITON_GCS_MOUNT_DIRECTORY"
    extra = "gcs"
    module = "gcsfs.core"

    @classmethod
    def parse(cls, url: str) -> Location:
        return parse_gcs(url)

    def open_filesystem(self, library: Any) -> Any:
        credentials = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
        emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
        token: str | None = None  # gcsfs: default credentials, metadata server, anonymous
        if credentials:
            token = credentials
        elif emulator:
            token = "anon"
        kwargs: dict[str, Any] = {}
        if emulator:
            kwargs["endpoint_url"] = (
                emulator if emulator.startswith(("http://", "https://")) else f"http://{emulator}"
            )
        try:
            # gcsfs.core's class: the package's default class probes the bucket type over
            # gRPC first (hierarchical namespaces), which emulators do not answer
            return library.GCSFileSystem(
                token=token, skip_instance_cache=True, use_listings_cache=False, **kwargs
            )
        except Exception as exc:
            _, message = error_code(exc)
            raise TritonXError(
                f"Unable to create GCS client. Check account credentials. ({message})",
                Code.INTERNAL,
            ) from exc

    def object_version(self, info: Mapping[str, Any]) -> str:
        return f"{info.get('generation', '')}|{info.get('md5Hash', '')}|{info.get('updated', '')}"

    def unreadable(self, exc: BaseException) -> TritonXError:
        code, message = error_code(exc)
        return TritonXError(
            f"Could not list contents of directory at {self.url} : {code}: {message}",
            Code.INTERNAL,
        )

    def bucket_missing(self, exc: BaseException) -> TritonXError:
        return TritonXError(
            f"Could not get MetaData for bucket with name {self.location.bucket} : "
            "The specified bucket does not exist.",
            Code.INTERNAL,
        )
