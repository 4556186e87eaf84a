"""``python -m tritonx_tools_analyze MODEL ...``: the same as ``tritonx analyze``."""

from tritonx_tools_analyze.cli import analyze

analyze(prog_name="tritonx analyze")
