"""rmqctl: offline inspection and repair of Apache RocketMQ broker store directories."""

__version__ = "0.1.0"
