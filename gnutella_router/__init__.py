"""The gnutella-router daemon: stages, sockets, controllers and tools around them."""

__version__ = "0.1.0"
