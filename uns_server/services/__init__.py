"""Application services: one use case each, orchestrating domain rules and store
queries inside transactions. The gRPC servicers call exactly one of these."""
