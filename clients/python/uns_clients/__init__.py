"""UNS Python client."""
