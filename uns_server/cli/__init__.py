"""Console entry points: ``uns-server`` and ``uns-admin``."""
