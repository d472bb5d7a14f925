// SmallBuffer: N pointers inline, a heap vector beyond; the hot path of a
// compiled call uses it so that small graphs allocate nothing.
#pragma once

#include <Python.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kiln::base {

// Zero-filled storage for `size` PyObject pointers.
template <size_t N>
class SmallBuffer {
 public:
  explicit SmallBuffer(size_t size) : size_(size) {
    if (size > N) {
      heap_.resize(size);
      data_ = heap_.data();
    }
    std::fill(data_, data_ + size, nullptr);
  }
  SmallBuffer(const SmallBuffer&) = delete;
  SmallBuffer& operator=(const SmallBuffer&) = delete;

  PyObject** data() { return data_; }
  size_t size() const { return size_; }

 private:
  PyObject* inline_[N];
  std::vector<PyObject*> heap_;
  PyObject** data_ = inline_;
  size_t size_;
};

}  // namespace kiln::base
