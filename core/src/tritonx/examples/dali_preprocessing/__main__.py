"""``python -m tritonx.examples.dali_preprocessing <folder>``: write the example repository."""

from __future__ import annotations

import sys
from pathlib import Path

from tritonx.examples.dali_preprocessing.build import build_repository


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tritonx.examples.dali_preprocessing <folder>", file=sys.stderr)
        return 2
    root = build_repository(Path(args[0]))
    print(f"wrote {root}: preprocess (dali), cnn (onnxruntime), dali_cnn (ensemble)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
