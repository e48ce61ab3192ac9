"""The UNS workloads: accept, deliver, watch, drain, growth."""
