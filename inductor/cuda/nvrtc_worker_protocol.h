// The messages between kiln and its NVRTC worker processes (Note [NVRTC
// workers]): length-prefixed byte strings over a stream socket. Plain
// POSIX; the worker program links this file and nvrtc_compiler.cpp only.
#pragma once

#include <string>
#include <vector>

namespace kiln::inductor::cuda {

// The socket a worker process reads requests from and answers on.
constexpr int kNvrtcWorkerFd = 3;

// Writes each field as an 8-byte length and its bytes; false when the
// peer is gone (no SIGPIPE: the socket is written with MSG_NOSIGNAL).
bool write_fields(int fd, const std::vector<std::string>& fields);

// Reads `count` fields written by write_fields into `fields`; false at end
// of stream or on a read error before all of them arrived.
bool read_fields(int fd, size_t count, std::vector<std::string>* fields);

}  // namespace kiln::inductor::cuda
