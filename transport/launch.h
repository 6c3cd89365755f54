/* launch.h: what a local launcher needs from the transport: the environment
 * variables through which it tells each rank who it is (spelled here once for
 * the launcher and the bootstrap), a socket for rank 0 to inherit, and a fresh
 * secret for the job. */
#ifndef BURST_TRANSPORT_LAUNCH_H
#define BURST_TRANSPORT_LAUNCH_H

#include <stddef.h>

#define BURST_ENV_RANK "BURST_RANK"           /* this rank, 0..size-1 */
#define BURST_ENV_SIZE "BURST_SIZE"           /* number of ranks */
#define BURST_ENV_ROOT "BURST_ROOT"           /* host:port where rank 0 listens */
#define BURST_ENV_ROOT_FD "BURST_ROOT_FD"     /* rank 0: inherited listening socket */
#define BURST_ENV_SECRET "BURST_SECRET"       /* the job's secret, hex */
#define BURST_ENV_NODE_ID "BURST_NODE_ID"     /* overrides the node's identity (emulated nodes) */
#define BURST_ENV_ROOT_PORT "BURST_ROOT_PORT" /* under Slurm: port rank 0 listens on */
#define BURST_ENV_SECRET_FILE "BURST_SECRET_FILE" /* under Slurm: default ~/.config/burst/secret */
#define BURST_ENV_TIMEOUT "BURST_TIMEOUT"     /* seconds before a silent peer is lost */


/* A TCP socket listening on any free port, for rank 0 to inherit; returns the
 * fd (and the port) or -1 with a message in err. */
int bt_launch_listen(int *port, char *err, size_t err_len);
/* A fresh random job secret: 32 hex characters, NUL-terminated (out[33]). */
int bt_launch_secret(char out[33]);

#endif
