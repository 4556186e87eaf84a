"""What assembles and runs the server process around the data plane: the plugin manager
(entry points, the typed hook facade), the log and its settings, restricted APIs and TLS,
the validation of :class:`~tritonx.config.ServerSettings`, and ``tritonx serve``'s flags.

Private: :class:`tritonx.Server` and the ``tritonx`` command are the public entry points.
"""
