// Where backend "inductor" adds convolution biases (kiln.config.conv_bias;
// Note [Convolution biases in kernels] in conv_bias.cpp).
#pragma once

#include <optional>
#include <string>

namespace kiln::inductor {

// Which graphs hand their convolutions' biases to kernels.
enum class ConvBiasPlacement {
  Auto,         // CUDA inference graphs (measured there)
  Kernels,      // every graph with a biased convolution (CUDA training graphs, CPU ones: for tests)
  Convolution,  // none: the convolution call adds its bias
};

// "auto", "kernels" or "convolution".
const char* conv_bias_name(ConvBiasPlacement placement);

// The placement named `name`, or nullopt.
std::optional<ConvBiasPlacement> conv_bias_from_name(const std::string& name);

}  // namespace kiln::inductor
