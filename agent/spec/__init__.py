"""Specs: how to run a kernel (sizes, arguments, launch, verification), written in the .cu file or inferred.

See README.md in this folder for the format.
"""

from cuda_agent.agent.spec.dtypes import DTYPES, canonical_dtype, dtype_of_c_type
from cuda_agent.agent.spec.expressions import (
    Expression,
    ExpressionError,
    parse_expression,
    parse_real_expression,
    referenced_names,
    validate_oracle,
)
from cuda_agent.agent.spec.infer import infer_spec
from cuda_agent.agent.spec.model import (
    ArgumentSpec,
    InitSpec,
    KernelSpec,
    LaunchSpec,
    SpecError,
    SpecResolveError,
    ToleranceSpec,
)
from cuda_agent.agent.spec.parse import parse_specs
from cuda_agent.agent.spec.render import render_spec
from cuda_agent.agent.spec.resolve import complete_sizes, constant_size, resolve

__all__ = [
    "DTYPES",
    "ArgumentSpec",
    "Expression",
    "ExpressionError",
    "InitSpec",
    "KernelSpec",
    "LaunchSpec",
    "SpecError",
    "SpecResolveError",
    "ToleranceSpec",
    "canonical_dtype",
    "complete_sizes",
    "constant_size",
    "dtype_of_c_type",
    "infer_spec",
    "parse_expression",
    "parse_real_expression",
    "parse_specs",
    "referenced_names",
    "render_spec",
    "resolve",
    "validate_oracle",
]
