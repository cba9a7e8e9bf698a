"""The gnutella-router daemon: stages, sockets, controllers and tools around them."""

__version__ = "0.1.0"

from gnutella_router import native as _native

if _native.interpreted_asked():  # the hot modules from their sources (see .native)
    _native.use_sources()
