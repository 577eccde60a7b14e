// A multi-channel 1-D convolution (no padding), PyTorch extension style: a thread per output position,
// blockIdx.y for the output channel and blockIdx.z for the batch.
/* cuda-agent
[sizes]
B = 16
Cin = 64
Cout = 64
L = 4096
KW = 7
[args]
inp = { role = "input",  dtype = "float32", shape = ["B", "Cin", "L"] }
wt  = { role = "input",  dtype = "float32", shape = ["Cout", "Cin", "KW"] }
out = { role = "output", dtype = "float32", shape = ["B", "Cout", "L - KW + 1"] }
Cin = { role = "scalar", dtype = "int32", value = "Cin" }
Cout = { role = "scalar", dtype = "int32", value = "Cout" }
L = { role = "scalar", dtype = "int32", value = "L" }
KW = { role = "scalar", dtype = "int32", value = "KW" }
[launch]
block = [256]
grid = ["ceil_div(L - KW + 1, block.x)", "Cout", "B"]
[verify]
sizes = [{ B = 3, Cin = 5, Cout = 7, L = 300, KW = 3 }]
oracle = { out = "F.conv1d(inp, wt)" }
reduction = "Cin * KW"
*/
__global__ void conv1d_forward(const float* inp, const float* wt, float* out, int Cin, int Cout, int L, int KW)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int co = blockIdx.y;
    int b = blockIdx.z;
    int Lout = L - KW + 1;
    if (t <= L - KW) {
        float s = 0.0f;
        for (int ci = 0; ci < Cin; ++ci)
            for (int q = 0; q < KW; ++q)
                s += inp[(b * Cin + ci) * L + t + q] * wt[(co * Cin + ci) * KW + q];
        out[(b * Cout + co) * Lout + t] = s;
    }
}
