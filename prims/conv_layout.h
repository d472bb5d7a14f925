// Where backend "inductor" lays 2-d convolutions out channels-last
// (kiln.config.conv_layout; Note [Channels-last convolutions] in
// channels_last.cpp).
#pragma once

#include <optional>
#include <string>

namespace kiln::prims {

// Where the plan applies (kiln.config.conv_layout).
enum class ConvLayout {
  Auto,          // inference graphs on CUDA (cuDNN's tensor-core convolutions are NHWC)
  ChannelsLast,  // every graph with a 2-d convolution (CPU ones too: for tests)
  Keep,          // never: the traced layouts
};

// "auto", "channels_last" or "keep".
const char* conv_layout_name(ConvLayout layout);

// The layout named `name`, or nullopt.
std::optional<ConvLayout> conv_layout_from_name(const std::string& name);

}  // namespace kiln::prims
