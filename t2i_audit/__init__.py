"""t2i-audit: does this text-to-image model compose what it knows?

Prompt suites → generation → slot-level scorers → linear probes → HTML reports, each a stage
that reads and writes one run directory. See README.md and docs/.
"""

__version__ = "0.1.0"
