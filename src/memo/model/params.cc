#include "memo/model/params.h"

#include <cmath>

#include "memo/core/error.h"
#include "memo/core/random.h"
#include "memo/model/architecture.h"

namespace memo {

ParamLayout::ParamLayout(const ModelConfig& config) {
  constexpr int64_t kAlignFloats = 16;  // 64 bytes: every tensor starts on a cache line
  params_ = architecture(config.arch).params(config);
  for (ParamInfo& p : params_) {
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.offset = total_numel_;
    total_numel_ += (p.numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  }
}

ParamLayout::ParamLayout(const ParamLayout& full, size_t first, size_t last) {
  MEMO_CHECK(first <= last && last <= full.params_.size(), "tensors [", first, ", ", last,
             ") of a layout of ", full.params_.size());
  base_offset_ = first < full.params_.size() ? full.params_[first].offset : full.total_numel_;
  const int64_t end = last < full.params_.size() ? full.params_[last].offset : full.total_numel_;
  params_.assign(full.params_.begin() + std::ptrdiff_t(first),
                 full.params_.begin() + std::ptrdiff_t(last));
  for (ParamInfo& p : params_) p.offset -= base_offset_;
  total_numel_ = end - base_offset_;
}

int64_t ParamLayout::count() const {
  int64_t n = 0;
  for (const ParamInfo& p : params_) n += p.numel;
  return n;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return p;
  throw ConfigError(str("no parameter named '", name, "' in this model"));
}

ModelWeights bind_weights(const ModelConfig& config, const ParamLayout& layout, Tensor base) {
  ModelWeights w;
  w.layers.resize(size_t(config.num_hidden_layers));
  for (const ParamInfo& p : layout.params()) {
    Shape s;
    for (int64_t d : p.shape) s.dims[s.ndim++] = d;
    const Tensor view = base.part(p.offset, s);
    switch (p.role) {
      case ParamRole::kEmbedding:
        w.embed = view;
        break;
      case ParamRole::kPositions:
        w.pos = view;
        break;
      case ParamRole::kNorm:
        w.norm = view;
        break;
      case ParamRole::kNormBias:
        w.norm_b = view;
        break;
      case ParamRole::kHead:
        w.head = view;
        break;
      case ParamRole::kLayer: {
        LayerWeights& l = w.layers.at(size_t(p.layer));
        MEMO_CHECK(l.count < kMaxLayerParams, "layer ", p.layer, " has more than ", kMaxLayerParams,
                   " tensors");
        l.tensors[size_t(l.count++)] = view;
        break;
      }
    }
  }
  if (w.head.empty()) w.head = w.embed;  // tied
  return w;
}

void init_weights(const ParamLayout& layout, float* base, double std, uint64_t seed) {
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& p = layout.params()[i];
    float* w = base + p.offset;
    if (p.init != ParamInit::kNormal) {  // norm weights start at one, biases at zero
      const float value = p.init == ParamInit::kOne ? 1.0f : 0.0f;
      for (int64_t j = 0; j < p.numel; ++j) w[j] = value;
      continue;
    }
    NormalStream rng(seed, i);
    const double s = std * p.init_std_scale;
    for (int64_t j = 0; j < p.numel; ++j) w[j] = float(s * rng.next());
  }
}

}  // namespace memo
