"""sqlite."""
