#include "inductor/cuda/nvrtc_worker_protocol.h"

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace kiln::inductor::cuda {
namespace {

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// A request's source or a reply's cubin is at most a few MB; a larger
// length means a corrupt stream, not a message to allocate for.
constexpr uint64_t kMaxField = uint64_t{1} << 30;

}  // namespace

bool write_fields(int fd, const std::vector<std::string>& fields) {
  for (const std::string& field : fields) {
    const uint64_t size = field.size();
    char header[sizeof(size)];
    std::memcpy(header, &size, sizeof(size));
    if (!write_all(fd, header, sizeof(header)) || !write_all(fd, field.data(), field.size())) return false;
  }
  return true;
}

bool read_fields(int fd, size_t count, std::vector<std::string>* fields) {
  fields->assign(count, std::string());
  for (std::string& field : *fields) {
    char header[sizeof(uint64_t)];
    if (!read_all(fd, header, sizeof(header))) return false;
    uint64_t size = 0;
    std::memcpy(&size, header, sizeof(size));
    if (size > kMaxField) return false;
    field.resize(size);
    if (!read_all(fd, field.data(), field.size())) return false;
  }
  return true;
}

}  // namespace kiln::inductor::cuda
