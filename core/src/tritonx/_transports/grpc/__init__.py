"""The gRPC frontend (``inference.GRPCInferenceService``) over grpc.aio: a thin adapter over
:class:`tritonx._dataplane.dataplane.DataPlane`."""
