"""tritonx plugin: cloud model repositories (``s3://``, ``gs://``, ``as://``) through fsspec.

Registered through the ``tritonx`` entry point ``repo_cloud``. Each store needs its extra
(``tritonx-repo-cloud[s3]``, ``[gcs]``, ``[azure]``); a store whose library is missing is
refused when a repository of its scheme is opened, naming the extra to install.
:func:`transfers` tells what was downloaded for a model.
"""

from __future__ import annotations

import tritonx
from tritonx_repo_cloud.azure import AzureRepository
from tritonx_repo_cloud.gcs import GCSRepository
from tritonx_repo_cloud.locations import Location
from tritonx_repo_cloud.repository import CloudRepository, Transfers, transfers
from tritonx_repo_cloud.s3 import S3Repository

__all__ = [
    "AzureRepository",
    "CloudRepository",
    "GCSRepository",
    "Location",
    "S3Repository",
    "Transfers",
    "transfers",
    "tritonx_register_repositories",
]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_repositories(registry: tritonx.RepositoryRegistry) -> None:
    """Register the ``s3``, ``gcs`` and ``azure`` repositories (schemes s3, gs, as)."""
    registry.add(S3Repository)
    registry.add(GCSRepository)
    registry.add(AzureRepository)
