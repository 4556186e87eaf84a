"""The gRPC frontend (``inference.GRPCInferenceService``): the handlers (:mod:`.servicer`) over
the inference pipeline, served by the event-loop engine (:mod:`.engine`, the default) or by
grpc.aio (:mod:`.server` picks)."""
