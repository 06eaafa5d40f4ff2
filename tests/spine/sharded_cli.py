"""``python -m t2i_audit`` with 2-row activation chunks, so a dozen prompts make several part files
for two processes to share (the chunk size is the same for every process count, as in real runs).
Run as a script: ``python sharded_cli.py run …`` or ``torchrun --nproc_per_node 2 sharded_cli.py …``."""

from t2i_audit.probes import activations, denoiser

activations.CHUNK = denoiser.CHUNK = 2

from t2i_audit.cli import main  # noqa: E402

main()
