"""A store directory as the broker lays it out: file queues, naming, lock, checkpoint.
Knows nothing of click or rich."""
