"""UNS server: durable notification obligations over gRPC on a transactional outbox."""
