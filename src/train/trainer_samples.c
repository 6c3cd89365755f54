/* trainer_samples.c: the samples a step reads (trainer_internal.h): which
 * sample each micro-batch of each DP rank takes (one formula for reading,
 * prefetching and the checkpoint's position), read into the host's token
 * buffers with their document ids, and on a device copied to the device's. */
#include <stdint.h>
#include <string.h>

#include "kernels/device.h"
#include "src/train/trainer_internal.h"

int64_t trainer_sample_index(const train_config *c, int64_t step, int dp_rank, int mb)
{
    return ((step - 1) * c->dp + dp_rank) * c->micro_batches + mb;
}

int32_t *trainer_segments(const trainer *t, int mb)
{
    return t->segments ? t->segments + (size_t)mb * (size_t)(t->cfg.seq_len + 1) : NULL;
}

int trainer_read_sample(trainer *t, int64_t index, int mb)
{
    int64_t n = t->layout.n, *labels = t->labels + mb * n;
    int32_t *segments = trainer_segments(t, mb);
    if (t->data->read(t->data, index, t->tokens + mb * n, labels) != 0 ||
        (segments && t->data->documents(t->data, index, segments) != 0))
        return -1;
    if (segments) token_shard_end_documents(&t->shard, segments, labels);
    return 0;
}

int trainer_upload_tokens(trainer *t, int count)
{
    size_t bytes = (size_t)count * (size_t)t->layout.n * sizeof(int64_t);
    if (!t->choices.on_device) return 0;
    return bk_device_upload(&t->queue, t->dev_tokens, t->tokens, bytes) == BK_OK &&
                   bk_device_upload(&t->queue, t->dev_labels, t->labels, bytes) == BK_OK
               ? 0
               : -1;
}
