/* nccl_memory.c: the device memory NCCL takes for itself on a rank of a node
 * it serves, estimated before NCCL runs (bt_nccl_buffer_bytes). NCCL makes
 * these buffers with its own allocations, outside the engine's arena, when a
 * connection is first used, inside a step: the memory check must count them
 * beforehand. */
#include <stdio.h>
#include <stdlib.h>

#include "transport/transport.h"

/* A connection's buffer per protocol at NCCL's defaults: Simple is
 * NCCL_BUFFSIZE, 4 MiB; LL is 8 lines x 512 threads x 8 steps x 16 bytes;
 * LL128 is 120 elements x 640 threads x 8 steps x 8 bytes. */
enum {
    SIMPLE_BYTES = 4 << 20,
    LL_BYTES = 8 * 512 * 8 * 16,
    LL128_BYTES = 120 * 640 * 8 * 8,
};

/* Channels of a collective (NCCL's most, 32, unless NCCL_MAX_NCHANNELS says
 * fewer); a point-to-point connection's channels per peer, assumed 2 (NCCL
 * derives it from the topology); peers a ring channel receives from. */
enum { COLL_CHANNELS = 32, P2P_CHANNELS_PER_PEER = 2, P2P_PEERS = 2 };

/* The positive integer NCCL would read from variable `name`, or fallback. */
static size_t env_count(const char *name, size_t fallback)
{
    const char *v = getenv(name);
    char *end;
    long long n = v && *v ? strtoll(v, &end, 10) : 0;
    return v && *v && *end == '\0' && n > 0 ? (size_t)n : fallback;
}

size_t bt_nccl_buffer_bytes(int local_ranks, int p2p_comms, char *basis, size_t basis_len)
{
    if (basis_len) basis[0] = '\0';
    if (local_ranks < 2) return 0;
    size_t simple = env_count("NCCL_BUFFSIZE", SIMPLE_BYTES),
           ll = env_count("NCCL_LL_BUFFSIZE", LL_BYTES),
           ll128 = env_count("NCCL_LL128_BUFFSIZE", LL128_BYTES),
           channels = env_count("NCCL_MAX_NCHANNELS", COLL_CHANNELS);
    if (channels > COLL_CHANNELS) channels = COLL_CHANNELS;
    size_t peers = local_ranks == 2 ? 1 : P2P_PEERS;
    size_t coll = channels * (simple + ll + ll128),
           p2p = (size_t)p2p_comms * peers * P2P_CHANNELS_PER_PEER * simple;
    if (basis_len)
        snprintf(basis, basis_len,
                 "collectives: %zu channels x (Simple %zu + LL %zu + LL128 %zu bytes); ring: %d "
                 "communicators x %zu peer%s x %d channels x %zu bytes",
                 channels, simple, ll, ll128, p2p_comms, peers, peers == 1 ? "" : "s",
                 P2P_CHANNELS_PER_PEER, simple);
    return coll + p2p;
}
