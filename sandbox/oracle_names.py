"""How names are spelled inside an oracle expression. Plain Python (no torch): the spec checker reads it
when a spec is parsed, the worker when it builds the namespace the expression is evaluated in, so the two
can never disagree about what a name means.

The oracle's own names (`torch`, `math`, `F` for torch.nn.functional) always mean those modules. An
argument or size whose name is one of them, or a Python keyword (`in`, `from`, `lambda`, ...), is written
with a trailing underscore: a filter argument `F` is `F_`, an input `in` is `in_`.
"""

from __future__ import annotations

import keyword

ORACLE_MODULES = ("torch", "math", "F")  # F is torch.nn.functional
# Python's builtins an oracle may call (`float('-inf')`, `max(a, b)`, `slice(0, n)`): none that reads or
# writes anything outside the expression, or that can build a huge value from a small literal (`pow`,
# `range`, `list` are left out).
ORACLE_BUILTINS = ("abs", "bool", "float", "int", "len", "max", "min", "round", "slice", "sum", "tuple")

# torch.nn.functional's public functions (torch 2.13): with an argument named F, `F.view(...)` is a slip
# for `F_.view(...)`, which the spec checker can say at once instead of the worker failing on the GPU.
# fmt: off
FUNCTIONAL_NAMES = frozenset(
    {
        "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
        "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d", "adaptive_max_pool2d_with_indices",
        "adaptive_max_pool3d", "adaptive_max_pool3d_with_indices", "affine_grid", "alpha_dropout",
        "avg_pool1d", "avg_pool2d", "avg_pool3d", "batch_norm", "bilinear", "binary_cross_entropy",
        "binary_cross_entropy_with_logits", "celu", "celu_", "channel_shuffle", "conv1d", "conv2d",
        "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
        "cosine_embedding_loss", "cosine_similarity", "cross_entropy", "ctc_loss", "dropout",
        "dropout1d", "dropout2d", "dropout3d", "elu", "elu_", "embedding", "embedding_bag",
        "feature_alpha_dropout", "fold", "fractional_max_pool2d", "fractional_max_pool2d_with_indices",
        "fractional_max_pool3d", "fractional_max_pool3d_with_indices", "gaussian_nll_loss", "gelu",
        "glu", "grid_sample", "group_norm", "grouped_mm", "gumbel_softmax", "hardshrink", "hardsigmoid",
        "hardswish", "hardtanh", "hardtanh_", "hinge_embedding_loss", "huber_loss", "instance_norm",
        "interpolate", "kl_div", "l1_loss", "layer_norm", "leaky_relu", "leaky_relu_", "linear",
        "linear_cross_entropy", "local_response_norm", "log_softmax", "logsigmoid", "lp_pool1d",
        "lp_pool2d", "lp_pool3d", "margin_ranking_loss", "max_pool1d", "max_pool1d_with_indices",
        "max_pool2d", "max_pool2d_with_indices", "max_pool3d", "max_pool3d_with_indices",
        "max_unpool1d", "max_unpool2d", "max_unpool3d", "mish", "mse_loss",
        "multi_head_attention_forward", "multi_margin_loss", "multilabel_margin_loss",
        "multilabel_soft_margin_loss", "native_channel_shuffle", "nll_loss", "normalize", "one_hot",
        "pad", "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss",
        "prelu", "relu", "relu6", "relu_", "rms_norm", "rrelu", "rrelu_",
        "scaled_dot_product_attention", "scaled_grouped_mm", "scaled_mm", "selu", "selu_", "sigmoid",
        "silu", "smooth_l1_loss", "soft_margin_loss", "softmax", "softmin", "softplus", "softshrink",
        "softsign", "tanh", "tanhshrink", "threshold", "threshold_", "triplet_margin_loss",
        "triplet_margin_with_distance_loss", "unfold", "upsample", "upsample_bilinear",
        "upsample_nearest"
    }
)
# fmt: on


def oracle_spelling(name: str) -> str:
    """`name` as an oracle writes it: itself, or `name_` where the plain name is taken or not a name."""
    if keyword.iskeyword(name) or name in ORACLE_MODULES:
        return name + "_"
    return name


def needs_respelling(name: str) -> bool:
    return oracle_spelling(name) != name
