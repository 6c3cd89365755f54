# examples/local.mk: example runs and configurations shipped with the sources.
EXTRA_DIST += examples/quickstart.sh examples/quickstart.ini examples/sliding-window-1m.ini \
	examples/llama-7b-1m.ini examples/slurm-ib-cluster.sbatch
