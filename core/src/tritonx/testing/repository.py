"""``ModelRepositoryBuilder``: writes model folders (config.pbtxt + version folders) for tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

Tensor = tuple[str, str, Sequence[int]]


def _dtype(datatype: str) -> str:
    if datatype.startswith("TYPE_"):
        return datatype
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def _tensors(kind: str, tensors: Iterable[Tensor]) -> str:
    items = [
        f'  {{ name: "{n}", data_type: {_dtype(dt)}, dims: [ {", ".join(str(d) for d in dims)} ] }}'
        for n, dt, dims in tensors
    ]
    return f"{kind} [\n" + ",\n".join(items) + "\n]\n" if items else ""


class ModelRepositoryBuilder:
    """Builds a Triton model repository under ``root``.

    ``add("m", backend="identity", max_batch_size=8, inputs=[("INPUT0", "FP32", [4])], ...)``
    writes ``root/m/config.pbtxt`` and ``root/m/1/``; ``versions`` maps version numbers to
    ``{filename: bytes | str}`` contents.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def add(
        self,
        name: str,
        *,
        backend: str | None = None,
        platform: str | None = None,
        max_batch_size: int = 0,
        inputs: Iterable[Tensor] = (),
        outputs: Iterable[Tensor] = (),
        versions: Mapping[int, Mapping[str, bytes | str]] | Iterable[int] = (1,),
        extra: str = "",
        parameters: Mapping[str, str] | None = None,
        config: str | None = None,
        write_config: bool = True,
    ) -> Path:
        """Write one model folder and return its path.

        :param extra: config.pbtxt text appended as is (``dynamic_batching { }``...).
        :param config: the whole config.pbtxt text, instead of building one.
        :param write_config: False leaves the model without config.pbtxt (auto-complete).
        """
        model_dir = self.root / name
        model_dir.mkdir(parents=True, exist_ok=True)
        if write_config:
            if config is None:
                parts = [f'name: "{name}"\n']
                if backend:
                    parts.append(f'backend: "{backend}"\n')
                if platform:
                    parts.append(f'platform: "{platform}"\n')
                parts.append(f"max_batch_size: {max_batch_size}\n")
                parts.append(_tensors("input", inputs))
                parts.append(_tensors("output", outputs))
                for key, value in (parameters or {}).items():
                    parts.append(
                        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
                    )
                parts.append(extra)
                config = "".join(parts)
            (model_dir / "config.pbtxt").write_text(config)
        items: Iterable[tuple[int, Mapping[str, bytes | str]]] = (
            versions.items() if isinstance(versions, Mapping) else ((v, {}) for v in versions)
        )
        for version, files in items:
            vdir = model_dir / str(version)
            vdir.mkdir(parents=True, exist_ok=True)
            for filename, content in files.items():
                path = vdir / filename
                path.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, str):
                    path.write_text(content)
                else:
                    path.write_bytes(content)
        return model_dir

    def add_identity(
        self, name: str, datatype: str = "FP32", dims: Sequence[int] = (-1,), **kw: object
    ) -> Path:
        """An ``identity`` model: INPUT0 → OUTPUT0 of one datatype (see ``tritonx.testing.identity``)."""
        return self.add(
            name,
            backend="identity",
            inputs=[("INPUT0", datatype, dims)],
            outputs=[("OUTPUT0", datatype, dims)],
            **kw,  # type: ignore[arg-type]
        )
