// The same tiled square product before any bounds check: n is taken to be a multiple of the tile, so
// every staging load and the final store run unguarded. No spec: inferred, and verified at a multiple.
#define TILE 16

__global__ void tiled_square_product_unchecked(float* lhs, float* rhs, float* prod, int n)
{
    __shared__ float lhs_piece[TILE][TILE];
    __shared__ float rhs_piece[TILE][TILE];
    int bx = blockIdx.x;  int by = blockIdx.y;
    int tx = threadIdx.x; int ty = threadIdx.y;
    // the output element this thread owns
    int r = by * TILE + ty;
    int c = bx * TILE + tx;
    float acc = 0;
    for (int phase = 0; phase < n / TILE; ++phase) {
        lhs_piece[ty][tx] = lhs[r * n + (phase * TILE + tx)];
        rhs_piece[ty][tx] = rhs[(phase * TILE + ty) * n + c];
        __syncthreads();
        for (int q = 0; q < TILE; ++q)
            acc += lhs_piece[ty][q] * rhs_piece[q][tx];
        __syncthreads();
    }
    prod[r * n + c] = acc;
}
