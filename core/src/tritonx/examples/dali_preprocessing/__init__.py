"""An example ensemble: JPEG bytes → DALI pre-processing → a small ONNX CNN.

``build_repository(path)`` writes a Triton model repository with three models:

* ``preprocess`` (backend ``dali``): a serialized DALI pipeline of CPU operators that decodes
  the JPEG bytes of each sample (input ``IMAGE``, UINT8 ``[-1]`` as Triton's DALI backend takes
  encoded images: one row per image, shorter ones padded with zeros), resizes it to
  ``size`` x ``size`` (bilinear with antialiasing, DALI's default), normalises it with the
  ImageNet mean and standard deviation and lays it out CHW (output ``PIXELS``, FP32
  ``[3, size, size]``);
* ``cnn`` (backend ``onnxruntime``): a small CNN with random weights (seed 0, nothing
  downloaded), ``input`` FP32 ``[3, size, size]`` → ``logits`` FP32 ``[classes]``;
* ``dali_cnn`` (platform ``ensemble``): ``IMAGE`` → ``preprocess`` → ``cnn`` → ``LOGITS``.

Run ``python -m tritonx.examples.dali_preprocessing <folder>`` to write it, then
``tritonx serve --model-repository <folder>`` (with the ``tritonx-backend-dali`` and
``tritonx-backend-onnx`` plugins installed). Building it needs ``nvidia-dali-cuda130`` (or
another DALI wheel) and ``onnx``; no GPU.
"""

from tritonx.examples.dali_preprocessing.build import (
    CLASSES,
    MEAN,
    SIZE,
    STD,
    build_repository,
    cnn_model,
    pil_preprocess,
    preprocess_pipeline,
)

__all__ = [
    "CLASSES",
    "MEAN",
    "SIZE",
    "STD",
    "build_repository",
    "cnn_model",
    "pil_preprocess",
    "preprocess_pipeline",
]
