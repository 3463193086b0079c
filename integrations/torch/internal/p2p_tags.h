// The transport tags of Loom's torch backend's point-to-point calls: PyTorch's tag t
// (an int >= 0) travels as kP2pTagsBegin + t, inside a range the group reserves on its
// transport below the Communicators' tags (transport.h, "Tag ranges"), so sends and
// receives with different tags never match each other, as in PyTorch.
//
// Example:
//   P2pTag(0);    // kP2pTagsBegin
//   P2pTag(7);    // kP2pTagsBegin + 7
#ifndef LOOM_INTEGRATIONS_TORCH_INTERNAL_P2P_TAGS_H_
#define LOOM_INTEGRATIONS_TORCH_INTERNAL_P2P_TAGS_H_

#include <cstdint>

#include "collectives/transport/transport.h"

namespace loom {
namespace pytorch_internal {

inline constexpr Tag kP2pTagsBegin = Tag{1} << 32;
inline constexpr Tag kP2pTagsLast = kP2pTagsBegin + (Tag{1} << 31) - 1;

// P2pTag: the transport tag of PyTorch's tag `tag` (>= 0).
constexpr Tag P2pTag(int tag) { return kP2pTagsBegin + static_cast<Tag>(tag); }

}  // namespace pytorch_internal
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_INTERNAL_P2P_TAGS_H_
