"""Generated from protos/ by scripts/generate.sh. DO NOT EDIT."""
