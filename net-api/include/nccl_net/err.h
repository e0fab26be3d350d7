/* nccl_net/err.h: ncclResult_t, the status every plugin call returns (values as of NCCL 2.30). */
#ifndef NCCL_NET_ERR_H_
#define NCCL_NET_ERR_H_

/* nccl.h defines the same enum with the same values; defer to it when it was included first. */
#ifndef NCCL_H_
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,   /* kernel, library or hardware failure (errno, verbs status, peer gone) */
  ncclInternalError = 3, /* the caller broke the plugin contract */
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5, /* user or configuration error */
  ncclRemoteError = 6,  /* the remote peer failed or went away */
  ncclInProgress = 7,
  ncclTimeout = 8, /* new in NCCL 2.30 */
  ncclNumResults = 9
} ncclResult_t;
#endif

#endif /* NCCL_NET_ERR_H_ */
