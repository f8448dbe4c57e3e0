"""spark."""
