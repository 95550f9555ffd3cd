/* grpc_runtime.h - process-wide settings of the runtime gRPC core runs on, made once
 * before grpc_init (transport/grpc_runtime.cc: the one C++ file, as Abseil's own API is). */
#ifndef CG_TRANSPORT_GRPC_RUNTIME_H
#define CG_TRANSPORT_GRPC_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

/* Turns off Abseil's mutex deadlock detection, which gRPC core's locks run through: it is
 * on in Debian's build of Abseil (no NDEBUG), where every lock records a graph edge (a few
 * per cent of the server's CPU per call in bench/writes.sh), and off in Abseil's release
 * builds, which a production server is. */
void cg_grpc_runtime_release_mode(void);

#ifdef __cplusplus
}
#endif

#endif
