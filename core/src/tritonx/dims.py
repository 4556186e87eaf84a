"""Triton's shape helpers for backends that check a config's dims against a model file's:
:func:`shape_str` (``ShapeToString``) and :func:`compare_dims` (``CompareDims``, with its
messages), shared by the ONNX and TensorFlow backends."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tritonx.errors import invalid_arg


def shape_str(dims: Iterable[int]) -> str:
    """Triton's ``ShapeToString``: ``[-1,16]``."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def compare_dims(
    model: str,
    tensor: str,
    model_dims: Sequence[int],
    dims: Sequence[int],
    batching: bool,
    exact: bool,
) -> None:
    """Triton's ``CompareDims``: the model file's shape ``model_dims`` against the config's
    ``dims`` (with the batch dimension in front when ``batching``); -1 in the model matches
    any configured size unless ``exact``.

    :raises TritonXError: INVALID_ARG with Triton's message.
    """
    if batching:
        if not model_dims or model_dims[0] != -1:
            raise invalid_arg(
                f"model '{model}', tensor '{tensor}': for the model to support batching the "
                "shape should have at least 1 dimension and the first dimension must be -1; "
                f"but shape expected by the model is {shape_str(model_dims)}"
            )
        full = (-1, *dims)
        if not _dims_match(model_dims, full, exact):
            raise invalid_arg(
                f"model '{model}', tensor '{tensor}': the model expects {len(model_dims)} "
                f"dimensions (shape {shape_str(model_dims)}) but the model configuration "
                f"specifies {len(full)} dimensions (an initial batch dimension because "
                "max_batch_size > 0 followed by the explicit tensor shape, making complete "
                f"shape {shape_str(full)})"
            )
    elif not _dims_match(model_dims, dims, exact):
        raise invalid_arg(
            f"model '{model}', tensor '{tensor}': the model expects {len(model_dims)} "
            f"dimensions (shape {shape_str(model_dims)}) but the model configuration "
            f"specifies {len(dims)} dimensions (shape {shape_str(dims)})"
        )


def _dims_match(model_dims: Sequence[int], dims: Sequence[int], exact: bool) -> bool:
    if len(model_dims) != len(dims):
        return False
    return all(m == d for m, d in zip(model_dims, dims, strict=True) if exact or m != -1)


__all__ = ["compare_dims", "shape_str"]
