# src/plan/local.mk: what a training run will cost, before it runs: device
# profiles (rates measured or derived, as data) and the price of a ring pass
# and of a whole step from them (`burst plan time`).
libburst_plan_a_SOURCES += src/plan/profile.h src/plan/profile.c \
	src/plan/ring_time.h src/plan/ring_time.c src/plan/step_time.h src/plan/step_time.c
# The project's device profiles (profiles/, doc/TRAINING.md "Device profiles").
EXTRA_DIST += profiles/a100-attention-published.json \
	profiles/a100-sxm.json \
	profiles/a800-sxm.json \
	profiles/h100-attention-burst.json \
	profiles/h100-sxm.json \
	profiles/h200-attention-burst.json \
	profiles/h200-attention-cudnn-published.json \
	profiles/h200-sxm.json
