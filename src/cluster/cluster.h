// The ranks of a job started by mpirun (Debian's OpenMPI: TCP between hosts,
// shared memory within one). Every rank runs the same command on the same
// tokens; the routed experts are split between them (compute/expert_exchange.h)
// and this is the exchange that moves the expert outputs, one MPI collective
// per MoE layer. Rank 0 alone writes what the command prints; the others stay
// silent (their errors still reach the terminal, naming the rank).
//
// Without MPI (built with SLUICE_MPI=OFF, or started without mpirun) the
// process is a cluster of one and nothing here does anything.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/expert_exchange.h"

namespace sluice {

class Cluster {
 public:
  virtual ~Cluster() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t ranks() const = 0;
  virtual std::string host() const = 0;  // this rank's host name
  // The exchange MoE blocks use (null for a cluster of one).
  virtual ExpertExchange* exchange() = 0;
  // Every rank's `text`, in rank order (one collective: every rank calls it).
  virtual std::vector<std::string> gather(const std::string& text) = 0;
  // Rank 0's `bytes` to every rank (one collective: every rank calls it; on
  // the others `bytes` becomes rank 0's). A rank waiting for it sleeps
  // between polls once it has waited a while, so ranks that follow an idle
  // server do not spin.
  virtual void broadcast(std::string& bytes) = 0;
  // serve and chat: from here on a lost rank is noticed (cluster/rank_watch.h)
  // instead of waited for; rank 0 then fails every pass and broadcast with
  // the reason (ExpertExchange::lost). One collective: every rank calls it.
  virtual void watch_ranks() = 0;
  // The job is ending normally: connections closing are no loss.
  virtual void unwatch() = 0;
  // A command failed on this rank: says so on the terminal, naming the rank,
  // and ends the whole job (the other ranks would wait for it forever).
  [[noreturn]] virtual void abort(const std::string& message, int code) = 0;
};

// Joins the job when mpirun started this process (MPI_Init; every rank but 0
// has its stdout and stderr sent to /dev/null), else a cluster of one. Installs
// the exchange as the process's (set_expert_exchange). Keep it alive until the
// command is done: its destructor finalizes MPI.
std::unique_ptr<Cluster> join_cluster(int& argc, char**& argv);

// The cluster joined by join_cluster (null before).
Cluster* process_cluster();
// True on rank 0 or without a cluster: the rank that prints and writes files.
bool primary_rank();

}  // namespace sluice
