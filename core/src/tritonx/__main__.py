"""``python -m tritonx`` runs the ``tritonx`` command."""

from tritonx.cli import main

main()
