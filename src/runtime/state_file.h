// A session's state on disk (the prompt cache's files): a versioned,
// checksummed image bound to the model that made it.
//
// Layout (little-endian):
//   "SLUICEST"  u32 version  u32 identity bytes  identity
//   u64 positions  i32 token[positions]
//   u32 layers; per layer: u32 tensors; per tensor: u8 per_position, i64 rows,
//   i64 cols, f32 values[rows * cols]
//   u64 XXH3-64 of every byte before it
// The identity (engine/model_identity.h) names the weights, device and kernels
// that computed the state: a state is bit for bit what this model would
// compute only when it is the same, so any other file is refused.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/session_image.h"

namespace sluice {

inline constexpr uint32_t kStateFileVersion = 1;

std::vector<uint8_t> encode_state(const SessionImage& image, const std::string& identity);

struct DecodedState {
  std::string identity;
  SessionImage image;
};
// Checks magic, version, checksum and every length against the bytes; throws
// sluice::Error naming `name` and what is wrong.
DecodedState decode_state(std::span<const uint8_t> bytes, const std::string& name);

// Written atomically (temporary file, fsync, rename): PATH is the old file or the new one.
void write_state_file(const std::string& path, const SessionImage& image, const std::string& identity);
// Reads and checks PATH, refusing (sluice::Error naming PATH) a file of another
// version, a corrupt or truncated one, and one made by another model.
SessionImage read_state_file(const std::string& path, const std::string& identity);

// What a state file holds, from its header alone (not checksummed: an index
// of a directory of state files reads this, and the file is checked in full
// when loaded). Throws sluice::Error naming PATH when the header does not parse.
struct StateFileHeader {
  std::string identity;
  std::vector<int32_t> tokens;
  uint64_t file_bytes = 0;
};
StateFileHeader read_state_header(const std::string& path);

}  // namespace sluice
