// Recompute: how much of a transformer layer's forward state is kept for its
// backward pass. One enum for the memory model (memory_estimate.h) and for the
// models that implement it (models/gpt: kNone and kFull).
//
// Example:
//   ActivationOptions a;  a.recompute = Recompute::kSelective;   // the estimate
//   GptModelOptions m;    m.recompute = Recompute::kFull;        // the model
#ifndef LOOM_TOPOLOGY_RECOMPUTE_H_
#define LOOM_TOPOLOGY_RECOMPUTE_H_

namespace loom {

enum class Recompute {
  kNone,       // Every activation kept for backward.
  kSelective,  // Attention's softmax/dropout/score tensors recomputed (the 5as/h term).
  kFull,       // Only each layer's input kept; the layer is recomputed in backward.
};

// "none", "selective" or "full".
inline const char* RecomputeName(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "unknown";
}

}  // namespace loom

#endif  // LOOM_TOPOLOGY_RECOMPUTE_H_
