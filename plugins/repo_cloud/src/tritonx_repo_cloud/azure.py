"""``as://account/container/path`` through adlfs.

Credentials as Triton reads them: ``AZURE_STORAGE_ACCOUNT`` (which, as in Triton, wins over
the account in the URL) with ``AZURE_STORAGE_KEY`` (shared key); without a key the container
is read anonymously. ``AZURE_STORAGE_CONNECTION_STRING`` (the Azure SDKs' variable) is used
instead when set: it names the account, its key and its blob endpoint (Azurite, sovereign
clouds). Triton's ``AZURE_STORAGE_AUTH_TYPE=managed_identity|default`` are refused: not
supported here yet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tritonx.errors import Code, PluginError, TritonXError
from tritonx_repo_cloud.locations import Location, parse_azure
from tritonx_repo_cloud.repository import CloudRepository, error_code


class AzureRepository(CloudRepository):
    """A model repository in Azure Blob Storage."""

    name = "azure"
    schemes = ("as",)
    mount_env = "TRITON_AZURE_MOUNT_DIRECTORY"
    extra = "azure"
    module = "adlfs"

    @classmethod
    def parse(cls, url: str) -> Location:
        return parse_azure(url)

    def open_filesystem(self, library: Any) -> Any:
        auth_type = os.environ.get("AZURE_STORAGE_AUTH_TYPE", "")
        if auth_type not in ("", "key"):
            raise PluginError(
                f"AZURE_STORAGE_AUTH_TYPE={auth_type!r} is not supported by tritonx-repo-cloud: "
                "use a shared key (AZURE_STORAGE_ACCOUNT/AZURE_STORAGE_KEY) or "
                "AZURE_STORAGE_CONNECTION_STRING"
            )
        common: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False}
        connection = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
        account = os.environ.get("AZURE_STORAGE_ACCOUNT", "") or self.location.account
        key = os.environ.get("AZURE_STORAGE_KEY", "")
        if connection:
            named = _connection_field(connection, "AccountName")
            if named and named != account:
                raise PluginError(
                    f"{self.url} is in account '{account}' but AZURE_STORAGE_CONNECTION_STRING "
                    f"is for account '{named}'"
                )
            kwargs: dict[str, Any] = {"connection_string": connection}
        elif key:
            kwargs = {"account_name": account, "account_key": key}
        else:
            kwargs = {"account_name": account, "anon": True}
        try:
            return library.AzureBlobFileSystem(**kwargs, **common)
        except Exception as exc:
            _, message = error_code(exc)
            raise TritonXError(
                f"Unable to create Azure filesystem client. Check account credentials. ({message})",
                Code.INTERNAL,
            ) from exc

    def object_version(self, info: Mapping[str, Any]) -> str:
        return f"{info.get('etag', '')}|{info.get('last_modified', '')}"

    def unreadable(self, exc: BaseException) -> TritonXError:
        _, message = error_code(exc)
        return TritonXError(
            f"Failed to get contents of directory {self.location.prefix}:{message}",
            Code.INTERNAL,
        )

    def bucket_missing(self, exc: BaseException) -> TritonXError:
        return TritonXError(
            f"Failed to get contents of directory {self.location.prefix}:"
            f"The specified container does not exist. (container '{self.location.bucket}')",
            Code.INTERNAL,
        )


def _connection_field(connection: str, name: str) -> str:
    for part in connection.split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip().lower() == name.lower():
            return value.strip()
    return ""
