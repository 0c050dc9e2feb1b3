/* fedgate/fedgate.h: the C API of the fedgate client library. A compute process opens an endpoint
 * with its gateway and its own process ID, then listens for connections from other processes, or
 * connects to one by process ID alone, and moves bytes. Every call that can fail takes a
 * fedgate_error*, fills it (the stage that failed and a message naming it) and returns NULL or -1.
 * Link with -lfedgate-client (pkg-config fedgate-client). Thread-safe where the C++ Endpoint is:
 * connect from many threads; one thread per connection for send/recv. */
#ifndef FEDGATE_FEDGATE_H
#define FEDGATE_FEDGATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a call failed. The first eight are the connection stages of the C++ API (ConnStage). */
enum fedgate_stage {
    FEDGATE_STAGE_RESOLVE = 0,   /* the target was not found or is unreachable */
    FEDGATE_STAGE_REQ = 1,       /* the own gateway refused the request */
    FEDGATE_STAGE_REP = 2,       /* no answer after every retry */
    FEDGATE_STAGE_REFUSED = 3,   /* the target or its gateway said no */
    FEDGATE_STAGE_TRANSPORT = 4, /* no shared transport, or rdma where there is no device */
    FEDGATE_STAGE_RTR = 5,       /* the RDMA queue pair did not reach RTR */
    FEDGATE_STAGE_RTS = 6,       /* ... or RTS */
    FEDGATE_STAGE_DATA = 7,      /* sending or receiving failed */
    FEDGATE_STAGE_OPEN = 16,     /* opening the endpoint: bad argument, socket, registration */
    FEDGATE_STAGE_TIMEOUT = 17,  /* fedgate_accept: nothing arrived in time */
    FEDGATE_STAGE_ARGUMENT = 18  /* a bad argument to a call other than open */
};

typedef struct fedgate_error {
    int stage;          /* enum fedgate_stage */
    char message[256];  /* "stage STAGE: why", NUL-terminated */
} fedgate_error;

typedef struct fedgate_endpoint fedgate_endpoint;
typedef struct fedgate_conn fedgate_conn;

/* A process's address record as its gateway holds it. */
typedef struct fedgate_record {
    char pid[32];        /* dotted process ID, e.g. "2.7.42" */
    uint32_t epoch;
    char transport[16];  /* "roce_v2" or "tcp" */
    char ipv4[16];       /* dotted quad */
    uint16_t port;
    char gid[48];        /* IPv6 text form */
    uint32_t qpn;
    uint16_t mtu;
} fedgate_record;

/* The name of a stage ("resolve", "req", ..., "open", "timeout", "argument"). */
const char* fedgate_stage_name(int stage);

/* Opens an endpoint: registers `pid` ("PARTY.NODE.LOCAL") with the gateway at `gateway` ("IP" or
 * "IP:PORT", default port 7410), sending from this node's address `bind_ipv4`. `transport`:
 * "auto", "rdma" or "tcp" (NULL: "auto": the node's RDMA device where there is one with a RoCE v2
 * GID on bind_ipv4's subnet, else tcp; "rdma" without a device fails at stage transport). */
fedgate_endpoint* fedgate_open(const char* gateway, const char* pid, const char* bind_ipv4, const char* transport,
                               fedgate_error* err);
/* Deregisters and frees the endpoint. Connections it handed out stay usable until closed. */
void fedgate_endpoint_close(fedgate_endpoint* ep);
/* From now on, accept connections (before, requests are refused not_listening). 0 or -1. */
int fedgate_listen(fedgate_endpoint* ep, fedgate_error* err);
/* The next incoming connection, or NULL after `timeout_ms` (stage timeout). */
fedgate_conn* fedgate_accept(fedgate_endpoint* ep, int timeout_ms, fedgate_error* err);
/* A connection to process `target` (party 0: the gateway finds the owner), or NULL. */
fedgate_conn* fedgate_connect(fedgate_endpoint* ep, const char* target, fedgate_error* err);

/* Sends all `len` bytes (blocking); returns len, or -1. */
ssize_t fedgate_send(fedgate_conn* c, const void* buf, size_t len, fedgate_error* err);
/* Receives at least one byte (blocking); returns how many, 0 once the peer closed, or -1. */
ssize_t fedgate_recv(fedgate_conn* c, void* buf, size_t len, fedgate_error* err);
/* Says no more will be sent: the peer's fedgate_recv returns 0 after the last byte. */
int fedgate_shutdown(fedgate_conn* c, fedgate_error* err);
/* The socket an event loop (asyncio, gRPC, libuv) may poll for readability: tcp only, else -1.
 * Read and write through fedgate_recv/fedgate_send, not on the socket. */
int fedgate_conn_fd(const fedgate_conn* c);
/* "tcp" or "roce_v2"; the peer's process ID as text. */
const char* fedgate_conn_transport(const fedgate_conn* c);
const char* fedgate_conn_peer(const fedgate_conn* c);
void fedgate_close(fedgate_conn* c);

/* Asks the gateway for `pid`'s record, from this node's address `bind_ipv4` (NULL: by route).
 * 0 and *out filled, or -1 (stage resolve: not found, unreachable, no answer). */
int fedgate_resolve(const char* gateway, const char* pid, const char* bind_ipv4, int timeout_ms, fedgate_record* out,
                    fedgate_error* err);

#ifdef __cplusplus
}
#endif

#endif /* FEDGATE_FEDGATE_H */
