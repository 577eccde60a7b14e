"""Element types: the canonical names the sandbox uses, the aliases users write, and C types of parameters."""

from __future__ import annotations

from collections.abc import Mapping

from cuda_agent.sandbox.plan import DTYPE_BYTES, FLOAT_DTYPES

DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)

# What people type in a spec. Lower-case keys; "torch." / "np." prefixes are stripped before lookup.
DTYPE_ALIASES: dict[str, str] = {
    **{name: name for name in DTYPES},
    "f32": "float32", "fp32": "float32", "float": "float32",
    "f16": "float16", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "f64": "float64", "fp64": "float64", "double": "float64",
    "i8": "int8", "char": "int8",
    "i16": "int16", "short": "int16",
    "i32": "int32", "int": "int32",
    "i64": "int64", "long": "int64",
    "u8": "uint8", "byte": "uint8", "uchar": "uint8",
    "u16": "uint16", "ushort": "uint16",
    "u32": "uint32", "uint": "uint32", "unsigned": "uint32",
    "u64": "uint64", "size_t": "uint64",
}  # fmt: skip

# C/CUDA spellings of a parameter's base type (as `Parameter.type` gives it, whitespace collapsed).
# Only types whose width is certain on CUDA's platforms (LP64) are listed; anything else is "unknown".
C_TYPE_DTYPES: dict[str, str] = {
    "float": "float32", "half": "float16", "__half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "double": "float64",
    "char": "int8", "signed char": "int8", "int8_t": "int8",
    "short": "int16", "short int": "int16", "int16_t": "int16",
    "int": "int32", "signed": "int32", "signed int": "int32", "int32_t": "int32",
    "long": "int64", "long int": "int64", "long long": "int64", "long long int": "int64", "int64_t": "int64",
    "ptrdiff_t": "int64",
    "unsigned char": "uint8", "uint8_t": "uint8",
    "unsigned short": "uint16", "unsigned short int": "uint16", "uint16_t": "uint16",
    "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32", "uint": "uint32",
    "unsigned long": "uint64", "unsigned long long": "uint64", "unsigned long long int": "uint64",
    "uint64_t": "uint64", "size_t": "uint64",
    "bool": "uint8",  # one byte on CUDA's platforms; its values are 0 and 1 (BOOL_INIT)
}  # fmt: skip

# CUDA's vector types and the complex types built on them: a buffer of them is a buffer of their
# component dtype with a trailing axis of `lanes` (a float4* of n elements is n x 4 float32, 16 bytes
# apart, as the kernel reads them). By-value vector scalars are not taken.
_VECTOR_BASES = {
    "float": "float32", "double": "float64", "int": "int32", "uint": "uint32", "short": "int16",
    "ushort": "uint16", "char": "int8", "uchar": "uint8", "long": "int64", "ulong": "uint64",
    "longlong": "int64", "ulonglong": "uint64",
}  # fmt: skip
VECTOR_TYPES: dict[str, tuple[str, int]] = {
    **{f"{base}{lanes}": (dtype, lanes) for base, dtype in _VECTOR_BASES.items() for lanes in (2, 3, 4)},
    "half2": ("float16", 2), "__half2": ("float16", 2),
    "nv_bfloat162": ("bfloat16", 2), "__nv_bfloat162": ("bfloat16", 2),
    "cuComplex": ("float32", 2), "cuFloatComplex": ("float32", 2), "cufftComplex": ("float32", 2),
    "cuDoubleComplex": ("float64", 2), "cufftDoubleComplex": ("float64", 2),
}  # fmt: skip

INTEGER_DTYPES = frozenset(DTYPES) - FLOAT_DTYPES

# Inclusive value range of each integer dtype, to check scalar values and `integers` draws.
INTEGER_RANGE: dict[str, tuple[int, int]] = {
    name: (
        (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1)
        if name.startswith("int")
        else (0, (1 << (8 * size)) - 1)
    )
    for name, size in DTYPE_BYTES.items()
    if name in INTEGER_DTYPES
}


def canonical_dtype(name: str) -> str | None:
    """The canonical dtype of a name a user wrote ("f16", "torch.half", "unsigned int"), or None."""
    key = " ".join(name.strip().lower().split())
    for prefix in ("torch.", "np.", "numpy."):
        key = key.removeprefix(prefix)
    return DTYPE_ALIASES.get(key) or dtype_of_c_type(key)  # C spellings too: "unsigned int", "__half"


def dtype_of_c_type(c_type: str) -> str | None:
    """The dtype of a C base type ("unsigned int", "__half"); None when unknown (a template T, a struct)."""
    words = [word.removeprefix("std::") for word in c_type.split() if word not in ("const", "volatile")]
    return C_TYPE_DTYPES.get(" ".join(words))


def vector_of_c_type(c_type: str) -> tuple[str, int] | None:
    """(component dtype, lanes) of a CUDA vector type ("float4", "const uchar3", "cufftComplex")."""
    words = [word for word in c_type.split() if word not in ("const", "volatile")]
    return VECTOR_TYPES.get(" ".join(words))


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def dtype_through_aliases(c_type: str, aliases: Mapping[str, str]) -> str | None:
    """The dtype of a parameter's C type, through the file's `typedef`/`using` aliases (an alias of an
    alias too): `floatX` with `typedef __nv_bfloat16 floatX` is bfloat16."""
    return dtype_of_c_type(through_aliases(c_type, aliases))


def through_aliases(c_type: str, aliases: Mapping[str, str]) -> str:
    """The type an alias names, through aliases of aliases; `c_type` itself when it is none."""
    seen: set[str] = set()
    while c_type in aliases and c_type not in seen:
        seen.add(c_type)
        c_type = aliases[c_type]
    return c_type
