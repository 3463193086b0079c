// BufferView / ConstBufferView: non-owning, dtype-tagged views of contiguous memory,
// for APIs (collectives, codecs, offload) that take any element type at run time.
//
// Example:
//   std::vector<float> grads(1024);
//   BufferView view = BufferView::Of(absl::MakeSpan(grads));
//   view.dtype();           // DType::kF32
//   view.size();            // 1024 elements
//   view.size_bytes();      // 4096
//   view.As<float>();       // absl::Span<float> over grads
//   view.As<int32_t>();     // InvalidArgument: view holds f32, requested i32
//   view.Subview(10, 4);    // elements [10, 14)
#ifndef LOOM_CORE_BUFFER_VIEW_H_
#define LOOM_CORE_BUFFER_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace loom {

namespace buffer_view_internal {

// Byte is `std::byte` for mutable views and `const std::byte` for read-only ones.
template <typename Byte>
class BasicBufferView {
 public:
  BasicBufferView() = default;
  BasicBufferView(Byte* data, size_t size, DType dtype) : data_(data), size_(size), dtype_(dtype) {}

  // Of(span) views a typed span, tagging it with DTypeOf<T>().
  template <typename T>
  static BasicBufferView Of(absl::Span<T> span) {
    using Element = std::remove_const_t<T>;
    static_assert(std::is_const_v<Byte> || !std::is_const_v<T>,
                  "a mutable BufferView needs a mutable span");
    return BasicBufferView(reinterpret_cast<Byte*>(span.data()), span.size(), DTypeOf<Element>());
  }

  Byte* data() const { return data_; }
  size_t size() const { return size_; }
  size_t size_bytes() const { return size_ * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  bool empty() const { return size_ == 0; }
  absl::Span<Byte> bytes() const { return absl::Span<Byte>(data_, size_bytes()); }

  // As<T>() returns the typed span; InvalidArgument when T does not match the dtype.
  template <typename T>
  absl::StatusOr<absl::Span<std::conditional_t<std::is_const_v<Byte>, const T, T>>> As() const {
    using Out = std::conditional_t<std::is_const_v<Byte>, const T, T>;
    if (DTypeOf<T>() != dtype_) {
      return absl::InvalidArgumentError(absl::StrCat("view holds ", DTypeName(dtype_),
                                                     ", requested ", DTypeName(DTypeOf<T>())));
    }
    return absl::Span<Out>(reinterpret_cast<Out*>(data_), size_);
  }

  // Subview returns elements [offset, offset + count); OutOfRange when that runs past
  // the end.
  absl::StatusOr<BasicBufferView> Subview(size_t offset, size_t count) const {
    if (offset > size_ || count > size_ - offset) {
      return absl::OutOfRangeError(absl::StrCat("subview [", offset, ", ", offset + count,
                                                ") of a view of ", size_, " elements"));
    }
    return BasicBufferView(data_ + offset * DTypeSize(dtype_), count, dtype_);
  }

 private:
  Byte* data_ = nullptr;
  size_t size_ = 0;
  DType dtype_ = DType::kU8;
};

}  // namespace buffer_view_internal

class BufferView : public buffer_view_internal::BasicBufferView<std::byte> {
 public:
  using BasicBufferView::BasicBufferView;
  BufferView(const BasicBufferView& base) : BasicBufferView(base) {}  // NOLINT
  template <typename T>
  static BufferView Of(absl::Span<T> span) { return BasicBufferView::Of(span); }
};

class ConstBufferView : public buffer_view_internal::BasicBufferView<const std::byte> {
 public:
  using BasicBufferView::BasicBufferView;
  ConstBufferView(const BasicBufferView& base) : BasicBufferView(base) {}  // NOLINT
  // A mutable view converts to a read-only one.
  ConstBufferView(const BufferView& view)  // NOLINT
      : BasicBufferView(view.data(), view.size(), view.dtype()) {}
  template <typename T>
  static ConstBufferView Of(absl::Span<T> span) {
    return BasicBufferView::Of(absl::Span<const T>(span));
  }
};

}  // namespace loom

#endif  // LOOM_CORE_BUFFER_VIEW_H_
