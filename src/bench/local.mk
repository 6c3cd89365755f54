# src/bench/local.mk: `burst bench`: kernels, transport, distributed attention
# and training, each as ratios against a reference measured in the same run;
# relaunch: the multi-rank ones run this program again under `burst run`.
burst_SOURCES += src/bench/bench.h src/bench/bench_kernels.c src/bench/bench_kernels_ops.c \
	src/bench/bench_kernels_device.c \
	src/bench/bench_transport.c src/bench/bench_attention.c src/bench/bench_train.c \
	src/bench/bench_account.h src/bench/bench_account.c src/bench/relaunch.h src/bench/relaunch.c
EXTRA_DIST += src/bench/torch_reference.py
