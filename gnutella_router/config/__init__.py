"""The daemon's settings: a TOML file plus command-line overrides, as one frozen object.

Theory of operation
-------------------
Settings come in tables (``[node]``, ``[network]``, ``[slow_peer]``, ``[router]``,
``[catcher]``, ``[log]``, ``[trace]``, ``[governor]``, ``[batching]``, ``[shedding]``,
``[abuse]``, ``[admin]``, ``[profiler]``, ``[emulation]``), one frozen msgspec struct each
(:mod:`.sections`, where the tables' classes are imported from), gathered in
:class:`Config`; what each setting means is said in ``docs/router.example.toml``.
Precedence, lowest first: the built-in defaults, the file, then overrides given as
dotted keys (``{"network.max_ttl": 5}``), which is how command-line flags arrive
(:mod:`.loading`). The defaults work with no file at all: a node listening on
127.0.0.1:6346 that dials no one until it is given seeds.

Each field declares its type, range and default in one place; msgspec enforces the
declaration and :mod:`.rules` words its failures from the same declaration, naming the
dotted key, the bad value and what is allowed (``network.max_ttl = 99: expected an
integer from 1 to 15``). Unknown tables and keys are errors with a suggestion, so a
typo never silently leaves a default in place. Integers are accepted where a number is
expected, booleans never stand in for numbers, numbers must be finite, and a string
never stands in for a list. Choices are case-insensitive. Paths stay strings, as in the
file; ``node.state_dir`` is relative to the working directory, the other paths to it.

msgspec was chosen over pydantic and attrs+cattrs for this: strict conversion with
declared constraints that can be read back for messages, and an import that costs the
command line little (measured on this project's machine, a whole process importing the
library and converting a two-table config: about 30 ms with msgspec, 130 ms with
pydantic); cattrs converts leniently by default ("7" becomes 7, 7.5 becomes 7).
"""

from gnutella_router.config.loading import config_as_dict, config_as_toml, load_config
from gnutella_router.config.rules import ConfigError, parse_host_port
from gnutella_router.config.sections import Config

__all__ = [
    "Config",
    "ConfigError",
    "config_as_dict",
    "config_as_toml",
    "load_config",
    "parse_host_port",
]
