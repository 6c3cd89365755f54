# examples/local.mk: example runs and configurations shipped with the sources.
EXTRA_DIST += examples/quickstart.sh examples/quickstart.ini
