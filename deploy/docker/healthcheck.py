"""Container health check: exit 0 when tritonx answers 200 on /v2/health/ready, else 1.

Used by the image's HEALTHCHECK (Docker, Podman); Kubernetes ignores HEALTHCHECK and uses the
probes of the Deployment instead. The URL defaults to the HTTP port the image serves on and can
be given as the only argument (``python healthcheck.py http://127.0.0.1:9000/v2/health/ready``).
Standard library only, so the slim image needs no curl.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000/v2/health/ready"


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else DEFAULT_URL
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"not ready: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
