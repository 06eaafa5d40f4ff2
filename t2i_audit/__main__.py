"""``python -m t2i_audit`` — also the entry for ``accelerate launch -m t2i_audit run …``."""

from .cli import main

main()
