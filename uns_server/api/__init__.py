"""gRPC transport only: servicers, converters, interceptors and the error map."""
