"""Kernel discovery on realistic CUDA sources: what the editor shows (names, parameters, exact ranges,
launch sites) must stay right through templates, macros, unicode comments and half-typed code."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from cuda_agent.agent.kernels import (
    Kernel,
    LaunchSite,
    Span,
    find_kernels,
    find_launch_sites,
    parse_cuda,
    utf8_column,
    utf16_column,
)
from tree_sitter import Point

SAXPY_FILE = """\
#include <cuda_fp16.h>
#define BLOCK 256

// y = a * x + y, one element per thread
__global__ void saxpy(int n, float a, const float* __restrict__ x, float *y) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
  return v;
}

template <typename T, int BLOCK_SIZE = 128>
__global__ void __launch_bounds__(BLOCK_SIZE) block_sum(const T* x, T* out, const int n) {
  __shared__ T partial[BLOCK_SIZE / 32];
  T v = threadIdx.x < n ? x[threadIdx.x] : T(0);
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
}

__global__ void scale_half2(half2* data, const half2 factor, int count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) data[i] = __hmul2(data[i], factor);
}

void launch_all(int n, float* x, float* y, float* out, cudaStream_t stream) {
  dim3 grid((n + BLOCK - 1) / BLOCK);
  dim3 block(BLOCK);
  saxpy<<<grid, block>>>(n, 2.0f, x, y);
  block_sum<float, 256><<<1, 256, 0, stream>>>(x, out, n);
  scale_half2<<<(n + 255) / 256, 256>>>(
      reinterpret_cast<half2*>(x),
      __float2half2_rn(0.5f),
      n / 2);
}

int main() {
  launch_all(1 << 20, nullptr, nullptr, nullptr, 0);
  return 0;
}
"""


def kernels_by_name(source: str) -> dict[str, Kernel]:
    return {kernel.name: kernel for kernel in find_kernels(source)}


def text_of(source: str, span: Span) -> str:
    return source.encode("utf-8")[span.start_byte : span.end_byte].decode("utf-8")


def line_column_text(source: str, span: Span) -> str:
    """The span's text found through its line/column fields (not its byte offsets)."""
    lines = source.encode("utf-8").split(b"\n")
    if span.start_line == span.end_line:
        return lines[span.start_line][span.start_column : span.end_column].decode("utf-8")
    parts = [lines[span.start_line][span.start_column :]]
    parts += lines[span.start_line + 1 : span.end_line]
    parts.append(lines[span.end_line][: span.end_column])
    return b"\n".join(parts).decode("utf-8")


# -- kernels -------------------------------------------------------------------------------------------


def test_finds_every_global_function_in_source_order_and_no_device_or_host_function() -> None:
    assert [k.name for k in find_kernels(SAXPY_FILE)] == ["saxpy", "block_sum", "scale_half2"]


def test_parameters_of_a_plain_kernel() -> None:
    saxpy = kernels_by_name(SAXPY_FILE)["saxpy"]
    described = [(p.name, p.type, p.is_pointer, p.is_const, p.is_restrict) for p in saxpy.parameters]
    assert described == [
        ("n", "int", False, False, False),
        ("a", "float", False, False, False),
        ("x", "float", True, True, True),
        ("y", "float", True, False, False),
    ]
    assert [p.text for p in saxpy.parameters] == [
        "int n",
        "float a",
        "const float* __restrict__ x",
        "float *y",
    ]


def test_parameters_of_a_template_kernel_and_half2() -> None:
    kernels = kernels_by_name(SAXPY_FILE)
    block_sum = kernels["block_sum"]
    assert [(p.name, p.type, p.is_pointer, p.is_const) for p in block_sum.parameters] == [
        ("x", "T", True, True),
        ("out", "T", True, False),
        ("n", "int", False, True),
    ]
    scale = kernels["scale_half2"]
    assert [(p.name, p.type, p.is_pointer, p.is_const) for p in scale.parameters] == [
        ("data", "half2", True, False),
        ("factor", "half2", False, True),
        ("count", "int", False, False),
    ]


def test_const_placement_restrict_spellings_arrays_and_pointer_depth() -> None:
    source = (
        "__global__ void k(float const* a, float* const b, const float* const c, float* __restrict d,\n"
        "                  float** e, float f[4], int g[][8], unsigned int h, long long i, float*) {}\n"
    )
    (kernel,) = find_kernels(source)
    described = {
        p.name: (p.type, p.is_pointer, p.is_const, p.is_restrict, p.pointer_depth) for p in kernel.parameters
    }
    assert described == {
        "a": ("float", True, True, False, 1),  # const pointee, written after the type
        "b": ("float", True, False, False, 1),  # const pointer to mutable data: an output
        "c": ("float", True, True, False, 1),
        "d": ("float", True, False, True, 1),  # MSVC-style __restrict
        "e": ("float", True, False, False, 2),
        "f": ("float", True, False, False, 1),  # array parameters decay to pointers
        "g": ("int", True, False, False, 2),
        "h": ("unsigned int", False, False, False, 0),
        "i": ("long long", False, False, False, 0),
        "": ("float", True, False, False, 1),  # unnamed
    }


def test_void_parameter_list_means_no_parameters() -> None:
    (kernel,) = find_kernels("__global__ void tick(void) { }\n")
    assert kernel.parameters == ()


def test_template_parameters_with_kinds_and_defaults() -> None:
    source = (
        "template <typename T, class U = float, int BLOCK = 128, unsigned VEC>\n"
        "__global__ void k(T* x, U y) {}\n"
    )
    (kernel,) = find_kernels(source)
    assert [(t.name, t.kind, t.default, t.text) for t in kernel.template_parameters] == [
        ("T", "type", None, "typename T"),
        ("U", "type", "float", "class U = float"),
        ("BLOCK", "value", "128", "int BLOCK = 128"),
        ("VEC", "value", None, "unsigned VEC"),
    ]
    assert kernels_by_name(SAXPY_FILE)["saxpy"].template_parameters == ()


def test_launch_bounds_text_as_written() -> None:
    source = (
        "#define MAX_THREADS 256\n"
        "__global__ void __launch_bounds__(MAX_THREADS, 2) a(float* x) {}\n"
        "__global__ void b(float* x) {}\n"
    )
    kernels = kernels_by_name(source)
    assert kernels["a"].launch_bounds == "MAX_THREADS, 2"
    assert kernels["b"].launch_bounds is None
    assert kernels_by_name(SAXPY_FILE)["block_sum"].launch_bounds == "BLOCK_SIZE"


def test_extern_c_on_the_definition_and_as_a_block() -> None:
    source = """\
extern "C" __global__ void single(float* x) { x[0] = 1.0f; }

extern "C" {
__global__ void in_block_a(float* x) { x[0] = 2.0f; }

__global__ void in_block_b(float* x) { x[0] = 3.0f; }
}

extern "C++" __global__ void cpp_linkage(float* x) {}
__global__ void plain(float* x) {}
"""
    kernels = kernels_by_name(source)
    assert {name: k.extern_c for name, k in kernels.items()} == {
        "single": True,
        "in_block_a": True,
        "in_block_b": True,
        "cpp_linkage": False,
        "plain": False,
    }
    # `extern "C"` belongs to the single definition it qualifies, but not to each kernel of a block.
    assert text_of(source, kernels["single"].span).startswith('extern "C" __global__')
    assert text_of(source, kernels["in_block_a"].span).startswith("__global__ void in_block_a")


def test_spans_are_exact_and_include_the_template_header() -> None:
    source = (
        "#define BLOCK 256\n"  # line 0
        "template <typename T>\n"  # line 1
        "__global__ void fill(T* x) {\n"  # line 2
        "  x[threadIdx.x] = T(BLOCK);\n"  # line 3
        "}\n"  # line 4
    )
    (kernel,) = find_kernels(source)
    assert kernel.span == Span(18, 99, 1, 0, 4, 1)
    assert kernel.body_span == Span(67, 99, 2, 27, 4, 1)
    assert kernel.name_span == Span(56, 60, 2, 16, 2, 20)
    assert (
        text_of(source, kernel.span)
        == source[18:99]
        == source[source.index("template") : source.rindex("}") + 1]
    )
    assert text_of(source, kernel.body_span) == "{\n  x[threadIdx.x] = T(BLOCK);\n}"
    assert text_of(source, kernel.name_span) == "fill"
    (x,) = kernel.parameters
    assert x.span == Span(61, 65, 2, 21, 2, 25)
    assert text_of(source, x.span) == "T* x"
    assert kernel.has_errors is False


def test_columns_are_utf8_bytes_after_unicode_comments() -> None:
    # Accents take 2 bytes, the arrow 3, the rocket 4 bytes and 2 UTF-16 units: the character, byte and
    # UTF-16 columns of `relu` all differ.
    source = (
        "// café: résumé des noyaux → rapide\n"
        "/* 🚀 fast */ __global__ void relu(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 0; }\n"
    )
    (kernel,) = find_kernels(source)
    line = source.splitlines()[1]
    prefix = "/* 🚀 fast */ __global__ void "
    assert kernel.name_span.start_line == 1
    assert kernel.name_span.start_column == len(prefix.encode("utf-8")) == 32
    assert line.index("relu") == 29  # characters: what a naive implementation would report
    assert utf16_column(line, kernel.name_span.start_column) == 30  # what LSP needs
    assert text_of(source, kernel.name_span) == "relu"
    assert line_column_text(source, kernel.name_span) == "relu"
    assert line_column_text(source, kernel.span) == text_of(source, kernel.span)
    assert kernel.span.start_column == len("/* 🚀 fast */ ".encode())
    assert (
        kernel.span.start_byte
        == len("// café: résumé des noyaux → rapide\n".encode()) + kernel.span.start_column
    )


def test_macros_in_bodies_and_launch_bounds_do_not_hide_kernels() -> None:
    source = """\
#define BLOCK 256
#define TILE 32
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define CHECK(x) do { if (!(x)) asm("trap;"); } while (0)

__global__ void __launch_bounds__(BLOCK) tiled(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[TILE][TILE + 1];
  int row = blockIdx.y * TILE + threadIdx.y;
  CHECK(row < CEIL_DIV(n, TILE) * TILE);
  tile[threadIdx.y][threadIdx.x] = in[row * n + threadIdx.x];
  __syncthreads();
  out[row * n + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}

__global__ void after_macros(int* flag) { *flag = BLOCK; }
"""
    kernels = kernels_by_name(source)
    assert list(kernels) == ["tiled", "after_macros"]
    assert kernels["tiled"].launch_bounds == "BLOCK"
    assert [p.name for p in kernels["tiled"].parameters] == ["in", "out", "n"]
    assert not any(k.has_errors for k in kernels.values())


def test_comments_inside_the_signature() -> None:
    source = """\
/**
 * Softmax over rows.
 */
__global__ void softmax(const float* __restrict__ logits /* [rows, cols] */,  // input
                        float* probs,  // output
                        int cols /* row length */) {
}
"""
    (kernel,) = find_kernels(source)
    assert [p.name for p in kernel.parameters] == ["logits", "probs", "cols"]
    assert kernel.span.start_line == 3  # the doc comment is not part of the definition


def test_explicit_specialisation_and_instantiation() -> None:
    source = """\
template <typename T, int N>
__global__ void scale(T* x) { x[0] *= N; }

template <>
__global__ void scale<float, 64>(float* x) { x[0] *= 2.0f; }

template __global__ void scale<double, 8>(double* x);
"""
    primary, specialised = find_kernels(source)  # the instantiation defines no new body
    assert (primary.name, primary.template_arguments, len(primary.template_parameters)) == ("scale", None, 2)
    assert (specialised.name, specialised.template_arguments) == ("scale", "float, 64")
    assert specialised.template_parameters == ()
    assert specialised.span.start_line == 3  # starts at `template <>`
    assert text_of(source, specialised.name_span) == "scale"


def test_declarations_are_not_kernels() -> None:
    source = "__global__ void later(float* x);\n__global__ void now(float* x) {}\n"
    assert [k.name for k in find_kernels(source)] == ["now"]


def test_namespaces_give_the_qualified_name() -> None:
    source = """\
namespace ops {
namespace detail {
__global__ void gelu(float* x) {}
}
}
__global__ void plain(float* x) {}
"""
    gelu, plain = find_kernels(source)
    assert (gelu.name, gelu.namespace, gelu.qualified_name) == ("gelu", "ops::detail", "ops::detail::gelu")
    assert (plain.namespace, plain.qualified_name) == ("", "plain")


def test_empty_and_kernel_free_files() -> None:
    assert find_kernels("") == []
    assert find_kernels("int main() { return 0; }\n") == []
    assert find_launch_sites("") == []


# -- broken files --------------------------------------------------------------------------------------

MISSING_BRACE = """\
__global__ void broken(float* x, int n) {
  int i = threadIdx.x;
  if (i < n) {
    x[i] = 0.0f;
}

__global__ void intact(float* y) {
  y[threadIdx.x] = 1.0f;
}

void launch(float* x) { intact<<<1, 32>>>(x); }
"""


def test_missing_brace_still_finds_the_following_kernel_and_launch() -> None:
    broken, intact = find_kernels(MISSING_BRACE)
    assert (broken.name, broken.has_errors) == ("broken", True)
    assert (intact.name, intact.has_errors) == ("intact", False)
    assert text_of(MISSING_BRACE, intact.span).startswith("__global__ void intact")
    assert [site.kernel for site in find_launch_sites(MISSING_BRACE)] == ["intact"]


def test_a_broken_kernel_range_never_swallows_its_neighbours() -> None:
    # tree-sitter nests `intact` inside `broken`'s body; a rewrite of `broken` must not delete it.
    broken, intact = find_kernels(MISSING_BRACE)
    assert broken.span.end_byte <= intact.span.start_byte
    assert broken.body_span.end_byte <= intact.span.start_byte
    assert (broken.span.start_line, broken.span.end_line) == (0, 4)


def test_syntax_errors_inside_one_kernel_leave_the_others_clean() -> None:
    source = """\
__global__ void first(float* x) { x[0] = 1.0f; }

__global__ void typing(float* x) {
  int i = threadIdx.x
  float v = x[i] +* ;
  x[i] = v;
}

template <typename T>
__global__ void last(T* x) { x[0] = T(3); }
"""
    kernels = kernels_by_name(source)
    assert list(kernels) == ["first", "typing", "last"]
    assert {name: k.has_errors for name, k in kernels.items()} == {
        "first": False,
        "typing": True,
        "last": False,
    }
    assert (kernels["typing"].span.start_line, kernels["typing"].span.end_line) == (2, 6)


def test_unterminated_kernel_at_end_of_file_keeps_earlier_kernels() -> None:
    source = """\
__global__ void done(float* x) { x[0] = 1.0f; }

__global__ void unfinished(float* y) {
  for (int i = 0; i < 4; ++i) {
    y[i] =
"""
    # tree-sitter gives no function_definition for `unfinished` (it is one ERROR node), so it is not
    # reported; what matters is that the rest of the file still is.
    assert [k.name for k in find_kernels(source)] == ["done"]


@pytest.mark.parametrize(
    "stray_line",
    ["int half_typed = ;", "x[0] = 3;", "float v = foo(;", "}", "@@@", "#include <"],
)
def test_stray_half_typed_line_between_kernels(stray_line: str) -> None:
    source = (
        "__global__ void a(float* x) { x[0] = 1.0f; }\n"
        f"{stray_line}\n"
        "__global__ void b(float* x) { x[0] = 2.0f; }\n"
    )
    assert [(k.name, k.has_errors) for k in find_kernels(source)] == [("a", False), ("b", False)]


# -- launch sites --------------------------------------------------------------------------------------


def test_launch_sites_with_dim3_template_arguments_and_four_part_config() -> None:
    saxpy, block_sum, half2 = find_launch_sites(SAXPY_FILE)
    assert (saxpy.kernel, saxpy.template_arguments, saxpy.config) == ("saxpy", None, ("grid", "block"))
    assert saxpy.arguments == ("n", "2.0f", "x", "y")
    assert (block_sum.kernel, block_sum.template_arguments) == ("block_sum", "float, 256")
    assert block_sum.config == ("1", "256", "0", "stream")
    assert text_of(SAXPY_FILE, block_sum.config_span) == "1, 256, 0, stream"
    assert half2.config == ("(n + 255) / 256", "256")


def test_multi_line_launch_span_and_arguments() -> None:
    *_, half2 = find_launch_sites(SAXPY_FILE)
    assert half2.arguments == ("reinterpret_cast<half2*>(x)", "__float2half2_rn(0.5f)", "n / 2")
    first_line = SAXPY_FILE.splitlines().index("  scale_half2<<<(n + 255) / 256, 256>>>(")
    assert (half2.span.start_line, half2.span.start_column) == (first_line, 2)
    assert (half2.span.end_line, half2.span.end_column) == (first_line + 3, 12)
    assert text_of(SAXPY_FILE, half2.span).endswith("n / 2)")


def test_launch_config_spread_over_lines_with_comments() -> None:
    source = """\
void go(float* x, int n, cudaStream_t s) {
  ops::reduce<float><<<dim3((n + 255) / 256, 1),  // grid
                       dim3(256) /* block */,
                       256 * sizeof(float), s>>>(x /* in-place */, n);
}
"""
    (site,) = find_launch_sites(source)
    assert (site.kernel, site.template_arguments) == ("ops::reduce", "float")
    assert site.config == ("dim3((n + 255) / 256, 1)", "dim3(256)", "256 * sizeof(float)", "s")
    assert site.arguments == ("x", "n")
    config_text = text_of(source, site.config_span)
    assert config_text.startswith("dim3((n + 255)") and config_text.endswith(", s")
    assert (site.config_span.start_line, site.config_span.end_line) == (1, 3)


def test_launch_from_device_code_is_found_too() -> None:
    # Dynamic parallelism: a kernel launching a kernel.
    source = "__global__ void child(int* x) {}\n__global__ void parent(int* x) { child<<<1, 1>>>(x); }\n"
    (site,) = find_launch_sites(source)
    assert site.kernel == "child" and site.span.start_line == 1


def test_launch_site_type_is_plain_data() -> None:
    (site,) = find_launch_sites("void f() { k<<<1, 2>>>(); }\n")
    assert site == LaunchSite(
        "k", None, ("1", "2"), (), Span(11, 24, 0, 11, 0, 24), Span(15, 19, 0, 15, 0, 19)
    )


# -- parsing and positions -----------------------------------------------------------------------------


def test_a_parsed_tree_can_be_reused_and_bytes_parse_the_same() -> None:
    tree = parse_cuda(SAXPY_FILE)
    assert find_kernels(SAXPY_FILE, tree) == find_kernels(SAXPY_FILE)
    assert find_launch_sites(SAXPY_FILE, tree) == find_launch_sites(SAXPY_FILE)
    assert str(parse_cuda(SAXPY_FILE.encode()).root_node) == str(tree.root_node)


def test_incremental_reparse_after_an_edit_matches_a_full_parse() -> None:
    old_source = SAXPY_FILE
    old_tree = parse_cuda(old_source)
    old_bytes = old_source.encode()
    start = old_bytes.index(b"__global__ void saxpy") + len(b"__global__ void ")
    new_source = old_source.replace("saxpy(int n", "saxpy_v2(int n").replace("saxpy<<<", "saxpy_v2<<<")
    # Two edits, applied from the end so earlier offsets stay valid.
    launch = old_bytes.index(b"saxpy<<<")
    for offset in (launch, start):
        row = old_bytes[:offset].count(b"\n")
        column = offset - (old_bytes.rfind(b"\n", 0, offset) + 1)
        old_tree.edit(
            start_byte=offset,
            old_end_byte=offset + 5,
            new_end_byte=offset + 8,
            start_point=Point(row, column),
            old_end_point=Point(row, column + 5),
            new_end_point=Point(row, column + 8),
        )
    new_tree = parse_cuda(new_source, old_tree)
    assert find_kernels(new_source, new_tree) == find_kernels(new_source)
    assert find_kernels(new_source, new_tree)[0].name == "saxpy_v2"
    assert find_launch_sites(new_source, new_tree)[0].kernel == "saxpy_v2"


def test_parsing_from_many_threads_at_once() -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: [k.name for k in find_kernels(SAXPY_FILE)], range(64)))
    assert all(names == ["saxpy", "block_sum", "scale_half2"] for names in results)


@pytest.mark.parametrize(
    ("line", "byte_column", "utf16"),
    [
        ("plain ascii", 5, 5),
        ("é = 1", 2, 1),  # é is 2 bytes, 1 UTF-16 unit
        ("→x", 3, 1),  # → is 3 bytes, 1 unit
        ("🚀x", 4, 2),  # the rocket is 4 bytes, a surrogate pair
        ("🚀x", 5, 3),
        ("short", 99, 5),  # past the end: the line's end
    ],
)
def test_utf16_column_and_back(line: str, byte_column: int, utf16: int) -> None:
    assert utf16_column(line, byte_column) == utf16
    assert utf8_column(line, utf16) == min(byte_column, len(line.encode()))


def test_utf16_column_inside_a_character_counts_to_its_start() -> None:
    assert utf16_column("🚀x", 2) == 0
    assert utf8_column("🚀x", 99) == 5


def test_span_contains() -> None:
    span = Span(0, 10, 2, 4, 5, 1)
    assert span.contains(2, 4) and span.contains(3, 0) and span.contains(5, 1)
    assert not span.contains(2, 3) and not span.contains(5, 2) and not span.contains(6, 0)


def test_a_definition_with_two_global_specifiers_is_one_kernel() -> None:
    # What an unclosed `/*` typed after one kernel's `__global__` makes of it and the next kernel's.
    source = "__global__ /* half a comment */ __global__ void k(float* y) { y[0] = 1; }\n"
    assert [k.name for k in find_kernels(source)] == ["k"]
