"""wfbench: a benchmark of coding-agent skill text, built as Dagster assets.

The core (every room below ``defs``, docs/architecture.md) is plain Python with no Dagster import;
``defs`` wires it into assets, partitions, sensors and resources, ``driver`` drives a Dagster
instance, ``cli`` is the command line. Two modules stand at the top, what Dagster loads by name
from its configuration: ``definitions`` (the code location) and ``docker_launcher`` (the Docker
deployment's run launcher).
"""

__version__ = "0.1.0"
