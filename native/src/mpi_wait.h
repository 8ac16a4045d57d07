// Waiting for a peer without taking its CPU. MPI's blocking calls busy-poll until the operation completes;
// a negotiation round that waits for a rank which is still computing (its gradients are not ready yet)
// would burn the core that this rank's own training thread needs. WaitPolitely polls in a tight loop for
// a short while (the peer is usually there already), then sleeps between polls, the sleeps growing to a
// bound that caps the extra latency.
#pragma once
#include <mpi.h>

namespace hvdlite {

void WaitPolitely(MPI_Request *request);

}  // namespace hvdlite
