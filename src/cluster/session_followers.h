// serve and chat under mpirun: rank 0 runs the command (HTTP server, terminal)
// and its sessions are mirrored (runtime/session_mirror.h); every other rank
// follows, applying each operation rank 0 sends to its own copy of the
// sessions, so that every rank enters each pass, and each MoE layer's
// exchange, in the same order with the same tokens and state. Decisions
// (admission, the prompt cache, cancellation, chunk sizes, drafting) are made
// on rank 0 alone and reach the others only as these operations.
#pragma once
#include <memory>
#include <vector>

#include "cluster/cluster.h"
#include "model/model.h"
#include "runtime/session_mirror.h"

namespace sluice {

// On rank 0: installs the mirror for the sessions of `models` (the same
// models, opened in the same order, as the followers'). Its destructor tells
// the followers to stop and uninstalls it. Null for a cluster of one.
class MirroredSessions;
std::shared_ptr<MirroredSessions> mirror_sessions(Cluster& cluster, std::vector<const Model*> models);

// On the other ranks: applies rank 0's operations (SessionReplica) until it stops. An
// operation that fails here but not on rank 0 ends the job, naming this rank.
void follow_sessions(Cluster& cluster, const std::vector<const Model*>& models);

}  // namespace sluice
