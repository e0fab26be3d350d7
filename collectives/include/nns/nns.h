/* nns/nns.h: the collective engine's C API, shaped like nccl.h: a unique id or the launcher's environment makes a
 * communicator, and ncclAllReduce-style calls run on it over whichever ncclNet plugin the loader picked
 * (NCCL_NET_PLUGIN; default socket). Calls block until the operation is complete: host buffers need no stream, and
 * the `stream` argument, kept where nccl.h has one, must be NULL. Buffers are host memory: this API cannot tell a
 * GPU pointer from a host one, and reads it as host memory; GPU buffers go through the C++ API
 * (nns::cuda::kernelsFor, CommOptions::slotMemory = nns::cuda::chooseSlotMemory; docs/collectives.md). Link with
 * -lnns. */
#ifndef NNS_NNS_H_
#define NNS_NNS_H_

#include <stddef.h>

/* ncclResult_t, ncclDataType_t and ncclRedOp_t are NCCL's own, defined here unless nccl.h came first. A file that
 * includes both must include nccl.h before this header: the other way round, nccl.h defines them a second time. */
#include <nccl_net/err.h>
#include <nccl_net/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NNS_VERSION_CODE 300 /* 0.3.0 */
#define NNS_UNIQUE_ID_BYTES 128

typedef struct nnsComm* nnsComm_t;
/* Where rank 0's bootstrap listens ("host:port", NUL-terminated), and a random value where nnsGetUniqueId picked the
 * port (ranks of another id are turned away, as of another job); made by nnsGetUniqueId on one rank and handed to
 * the others out of band, as ncclUniqueId is. */
typedef struct {
  char internal[NNS_UNIQUE_ID_BYTES];
} nnsUniqueId;

ncclResult_t nnsGetVersion(int* version);
/* Rank 0's address: $NNS_ROOT_ADDR if set, else $NCCL_COMM_ID (then every rank that makes an id gets the same one,
 * as with NCCL_COMM_ID; not nccl-net-run's own NNS_ROOT_ADDR, which is its job's rendezvous), else the first IPv4
 * address of an interface that is up and running, among those $NCCL_SOCKET_IFNAME selects if set (loopback last),
 * else among the non-loopback ones that are not a container's or VM's bridge on this host (docker*, br-*, virbr*,
 * veth*, cni*, ...), then those bridges, never a link-local one (169.254/16), 127.0.0.1 if none; and a free port,
 * which this process listens on from now. Unlike ncclGetUniqueId, whose process serves the rendezvous
 * whichever rank it is (or none), here rank 0 serves it: call it in the process that will be rank 0. */
ncclResult_t nnsGetUniqueId(nnsUniqueId* uniqueId);
/* On a failure *comm is NULL, as with ncclCommInitRank. Inside a group the communicator is made at nnsGroupEnd; one
 * whose creation fails there keeps its handle, which every call refuses but nnsCommDestroy and nnsCommAbort (they
 * free it). */
ncclResult_t nnsCommInitRank(nnsComm_t* comm, int nranks, nnsUniqueId commId, int rank);
/* As ncclCommInitAll: `ndev` communicators of one job, ranks 0..ndev-1, all in this process (made together in a
 * group of their own, so call it outside one); one thread can then drive them in groups. `devlist` may be NULL; a
 * list of devices is checked (ndev distinct ids >= 0) but binds nothing: an operation takes its buffers where they
 * are. On a failure every comms[i] is NULL. */
ncclResult_t nnsCommInitAll(nnsComm_t* comms, int ndev, const int* devlist);
/* Rank, size and root from the launcher: NNS_RANK/NNS_WORLD_SIZE/NNS_ROOT_ADDR, Open MPI, Slurm, PMI, torchrun.
 * Without any of them, ncclInvalidUsage naming them (not a guessed one-rank job). */
ncclResult_t nnsCommInitFromEnv(nnsComm_t* comm);
/* As ncclCommSplit: every rank of `comm` calls it (a collective over `comm`, outside a group); the ranks with the
 * same color >= 0 get a new communicator of their own, ranked by key, then by their rank in `comm`; a rank with
 * NNS_SPLIT_NOCOLOR gets *newcomm = NULL. The new communicators take their settings from the environment, as any
 * communicator does. `config` must be NULL (there is no ncclConfig_t here). A rank refused for its own arguments
 * (ncclInvalidArgument) still meets the others, so their calls fail at once too (ncclInvalidUsage) and `comm` stays
 * usable. */
#define NNS_SPLIT_NOCOLOR (-1)
ncclResult_t nnsCommSplit(nnsComm_t comm, int color, int key, nnsComm_t* newcomm, void* config);
/* As ncclCommFinalize: every operation on `comm` completes before its call returns, so nothing is left to finish;
 * it checks the handle and returns ncclSuccess (or the communicator's error). Destroy it afterwards: from then on
 * an operation on `comm` (a collective, a send or receive, a split) and a second finalize are ncclInvalidUsage; the
 * queries (count, rank, errors), registrations and nnsCommDestroy/nnsCommAbort still take it. */
ncclResult_t nnsCommFinalize(nnsComm_t comm);
/* A handle already destroyed (or aborted) is refused with ncclInvalidArgument, here and in every call: a handle's
 * address is not given to another communicator until 4096 more have been destroyed. NULL is a no-op (ncclSuccess)
 * here and in nnsCommAbort, as in NCCL. Destroying the process's last communicator on a plugin unloads the plugin,
 * as NCCL does: nns-ucx then waits up to NNS_UCX_LINGER_MS (5 s) for peers that have not destroyed theirs yet, so
 * that what it sent last still reaches them (see plugins/ucx/README.md). */
ncclResult_t nnsCommDestroy(nnsComm_t comm);
/* Fails the communicator now and frees it; its peers' operations that need it from then on fail too (within
 * NNS_COMM_TIMEOUT_MS at most). A peer's operation whose data this rank had already sent before the abort can still
 * complete there, as with ncclCommAbort: the abort cannot take back what is on the wire. It may be called from
 * another thread while calls on the communicator are in progress (a watchdog, as with ncclCommAbort): they fail, and
 * the communicator is freed once they have returned. nnsCommDestroy likewise waits for calls in progress; an abort
 * from another thread meanwhile fails them, and the destroy then frees the communicator. */
ncclResult_t nnsCommAbort(nnsComm_t comm);
/* ncclSuccess, or the code of the error that failed the communicator: ncclRemoteError for a dead peer or a timeout,
 * a failed plugin call's own code, ncclSystemError for a local failure (memory, CUDA). Later calls return it too.
 * ncclInProgress while the nnsGroupEnd of the group it was asked for in is making it (seen from any thread), and
 * then, if that failed, the failure's code (the handle is otherwise refused by every call but nnsCommDestroy and
 * nnsCommAbort). */
ncclResult_t nnsCommGetAsyncError(nnsComm_t comm, ncclResult_t* asyncError);
/* Registers host memory with the communicator, as ncclCommRegister does: collectives then send from it and receive
 * into it directly instead of through the communicator's staging slots. The memory must stay valid until
 * nnsCommDeregister or nnsCommDestroy. A range that runs past the end of the address space, or host memory that is
 * not all mapped, is refused with ncclInvalidArgument. Over a plugin whose registration costs nothing (TCP's), a
 * call's buffers of 64 KiB and more are registered for that call anyway (NNS_CALL_REGISTRATION, docs/collectives.md);
 * registering them once still saves the per-call regMr. */
ncclResult_t nnsCommRegister(const nnsComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t nnsCommDeregister(const nnsComm_t comm, void* handle);
ncclResult_t nnsCommCount(const nnsComm_t comm, int* count);
#ifndef NCCL_H_
/* Where a premultiplied sum's scalar lives: nccl.h's ncclScalarResidence_t, defined here unless nccl.h came first. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;
#endif
/* A premultiplied sum, as ncclRedOpCreatePreMulSum makes: the op multiplies each rank's input by that rank's own
 * scalar (one value of `datatype`) before summing, the product rounded to the type once (integers wrap), as NCCL's
 * ncclDevPreMulSum. It is used with nnsAllReduce, nnsReduce and nnsReduceScatter on `comm`, for `datatype` only
 * (another datatype or communicator is refused with ncclInvalidArgument), until nnsRedOpDestroy; its number may then
 * be given to the next op made. ncclScalarHostImmediate: *scalar is read now. ncclScalarDevice: `scalar` is read
 * each time a collective with the op runs (a device pointer in NCCL; host memory here, as every buffer of this API,
 * which must stay valid while the op is used). A call queued in a group keeps the op as it was at the call. */
ncclResult_t nnsRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                     ncclScalarResidence_t residence, nnsComm_t comm);
ncclResult_t nnsRedOpDestroy(ncclRedOp_t op, nnsComm_t comm);
ncclResult_t nnsCommUserRank(const nnsComm_t comm, int* rank);
const char* nnsGetErrorString(ncclResult_t result);
/* The text of the last error on this thread (what failed and why), whichever communicator it came from, as NCCL's
 * ncclGetLastError gives it; `comm` may be NULL. Where this thread has none and `comm` has failed, the
 * communicator's own error (for a watchdog thread that polls nnsCommGetAsyncError and made no failing call itself).
 * Else "". As NCCL's, the pointer is to a buffer of this thread's that stays valid for the thread's life; its text
 * changes at this thread's next nnsGetLastError only (at most 4095 bytes; a longer text ends in " [...]"). */
const char* nnsGetLastError(nnsComm_t comm);

ncclResult_t nnsAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                          nnsComm_t comm, void* stream);
ncclResult_t nnsBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          nnsComm_t comm, void* stream);
ncclResult_t nnsReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                       int root, nnsComm_t comm, void* stream);
ncclResult_t nnsAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                          nnsComm_t comm, void* stream);
ncclResult_t nnsReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                              ncclRedOp_t op, nnsComm_t comm, void* stream);
ncclResult_t nnsSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, nnsComm_t comm,
                     void* stream);
ncclResult_t nnsRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, nnsComm_t comm, void* stream);
/* Between these, operations are queued per communicator and run at nnsGroupEnd: all of a communicator's sends and
 * receives first, progressing together (a ring exchange needs a group, as with NCCL), then its collectives in call
 * order. As in NCCL, nothing orders a send or receive against a collective of the same group; unlike NCCL, which
 * runs a group's operations together, a peer that waits in a collective of this group's before it receives a send
 * of this group (say, AllReduce outside a group, then Recv) does not meet this rank, which finishes the send first
 * (a large send then waits until the timeout). Put the peer's receive in a group with its collective, or the
 * send outside this one. Several
 * communicators in one group run at once, so one thread can drive a rank of each; communicators asked for with
 * nnsCommInitRank inside a group are made together at its nnsGroupEnd (their handles are usable after it;
 * nnsGroupEnd returns the error of one that fails). Groups nest. A bad argument (NULL
 * buffer, unknown type or op, root or peer out of range) is refused at the call, inside a group too, and is not queued;
 * nnsGroupEnd runs the rest and then returns the group's first refusal. A send to itself without its matching receive,
 * and a receive whose buffer overlaps another send or receive of the group (but a send to itself and its receive on
 * the very same memory), can only be seen at nnsGroupEnd: that communicator's sends and receives of the group are
 * then refused, nothing moves, and its collectives still run. */
ncclResult_t nnsGroupStart(void);
ncclResult_t nnsGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif /* NNS_NNS_H_ */
