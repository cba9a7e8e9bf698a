"""The console: a shell on a running test network, as Mininet's CLI and gtk-gnutella's are.

``gnutella-router console`` (or ``testnet --console``) lists a network's nodes and links,
sends a probe query or ping from one node and shows which nodes got it, by how many
hops and how many milliseconds after it left (``reach``, ``pingall``), follows any GUID
through the route tables (``follow``), takes links and nodes down and up, reads and sets
what each node's admin interface allows, and prints its tables.

It floors above the test network, whose record of a running network it reads, and below
the command line, which only parses its flags:

``commands``  the command language, without I/O: parsing a line, help, completion
``targets``   the routers it talks to (from the network record or admin addresses),
              and the gateway that reads and changes them over their admin interfaces
``probes``    what the routers' route tables say of a GUID: sightings, reach, the tree
``session``   carries out one parsed command against the routers: text or an error
``shell``     the terminal (readline: history, tab completion) and ``--script``
"""
