"""The stated maxima of the work one command may ask for: a value above one is refused with an
error naming the limit, before anything starts. Stdlib only: the CLI reads them at import.

They bound what a typo costs (`-n 1000000000` is hours of traffic and, in any client that
builds its requests up front, gigabytes), not what a real study needs.
"""

from __future__ import annotations

__all__ = ["MAX_GPUS_PER_NODE", "MAX_NODES", "MAX_REQUESTS", "MAX_WARMUP_REQUESTS"]

MAX_REQUESTS = 1_000_000
"""Most measured requests in one run (`--requests`, a workload's `requests` and `tune_requests`):
about three hours at 100 req/s. The builtin client builds requests as it sends them, so its
memory does not grow with this count; it keeps each finished request's timings (under 1 KiB)."""
MAX_WARMUP_REQUESTS = 100_000
"""Most warm-up requests in one run (a workload's `warmup_requests`)."""
MAX_GPUS_PER_NODE = 64
"""Most GPUs on one node (`--gpu NAME:N`, a hardware profile's `count`); nodes ship 8 or 16."""
MAX_NODES = 1024
"""Most nodes one server spans (`--nnodes`)."""
