// A square product tiled through shared memory the way course notes build it, with no spec: the block
// and thread numbers copied into short locals, a TILE x TILE piece of each factor staged a phase (zero
// past the edge), the staged pieces multiplied between two barriers.
#define TILE 16

__global__ void tiled_square_product(const float* lhs, const float* rhs, float* prod, int n)
{
    __shared__ float lhs_piece[TILE][TILE];
    __shared__ float rhs_piece[TILE][TILE];

    int bx = blockIdx.x, by = blockIdx.y;
    int tx = threadIdx.x, ty = threadIdx.y;
    int r = by * TILE + ty;
    int c = bx * TILE + tx;

    float acc = 0.0f;
    for (int phase = 0; phase < (n + TILE - 1) / TILE; ++phase) {
        if (r < n && phase * TILE + tx < n)
            lhs_piece[ty][tx] = lhs[r * n + phase * TILE + tx];
        else
            lhs_piece[ty][tx] = 0.0f;
        if (c < n && phase * TILE + ty < n)
            rhs_piece[ty][tx] = rhs[(phase * TILE + ty) * n + c];
        else
            rhs_piece[ty][tx] = 0.0f;
        __syncthreads();
        for (int q = 0; q < TILE; ++q)
            acc += lhs_piece[ty][q] * rhs_piece[q][tx];
        __syncthreads();
    }
    if (r < n && c < n)
        prod[r * n + c] = acc;
}
