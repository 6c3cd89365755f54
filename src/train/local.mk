# src/train/local.mk: the training engine: the model, the fused LM head, ZeRO
# (AdamW and the model's side of it, one room: zero.c), the configuration and
# the token sources.
libburst_train_a_SOURCES += src/train/model.h src/train/model_internal.h \
	src/train/model_params.c src/train/model_runner.c src/train/model_operands.c src/train/model_pass.c \
	src/train/lm_head.h src/train/lm_head.c src/train/zero.h src/train/zero.c \
	src/train/config.h src/train/config.c src/train/choices.h src/train/choices.c \
	src/train/trainer.h src/train/trainer_internal.h src/train/trainer_memory.h \
	src/train/trainer_agree.c src/train/trainer_samples.c src/train/trainer_zero.c \
	src/train/trainer.c src/train/trainer_memory.c src/train/trainer_step.c \
	src/train/trainer_ckpt.c src/train/trainer_eval.c src/train/trainer_nll.c src/train/trainer_report.c \
	src/train/data/token_source.h src/train/data/synthetic_source.c \
	src/train/data/recall.h src/train/data/recall.c \
	src/train/data/hdf5_source.c src/train/data/window_order.h src/train/data/window_order.c
# Hugging Face model folders (config.json, safetensors) to and from our parameters.
libburst_train_a_SOURCES += src/train/hf_model.h src/train/hf_model.c
# [model] init_from: the weights a run starts from (burst checkpoint or Hugging Face folder).
libburst_train_a_SOURCES += src/train/init_source.h src/train/init_source.c
