// particles_float4.cu: one explicit Euler step of a particle system, positions and velocities as float4
// (xyz + mass / unused w), with an optional periodic wrap into the unit box, and the particles' speeds.
// Written the way particle and n-body samples are: checkCudaErrors, float4 host arrays, a bool flag.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define checkCudaErrors(call)                                                                 \
    do {                                                                                      \
        cudaError_t err_ = (call);                                                            \
        if (err_ != cudaSuccess) {                                                            \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
            exit(EXIT_FAILURE);                                                               \
        }                                                                                     \
    } while (0)

__global__ void integrate_particles(float4* pos, const float4* vel, float dt, int numParticles, bool wrap)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= numParticles) return;
    float4 p = pos[index];
    float4 v = vel[index];
    p.x += v.x * dt;
    p.y += v.y * dt;
    p.z += v.z * dt;
    if (wrap) {
        p.x -= floorf(p.x);
        p.y -= floorf(p.y);
        p.z -= floorf(p.z);
    }
    pos[index] = p;
}

__global__ void particle_speeds(const float4* vel, float* speed, int numParticles)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index < numParticles) {
        float4 v = vel[index];
        speed[index] = sqrtf(v.x * v.x + v.y * v.y + v.z * v.z);
    }
}

int main(int argc, char** argv)
{
    const int numParticles = 1 << 22;
    const float timestep = 0.005f;
    float4* h_pos = (float4*)malloc(numParticles * sizeof(float4));
    float4* h_vel = (float4*)malloc(numParticles * sizeof(float4));
    for (int i = 0; i < numParticles; ++i) {
        h_pos[i] = make_float4(rand() / (float)RAND_MAX, rand() / (float)RAND_MAX, rand() / (float)RAND_MAX, 1.0f);
        h_vel[i] = make_float4(rand() / (float)RAND_MAX - 0.5f, rand() / (float)RAND_MAX - 0.5f, 0.0f, 0.0f);
    }
    float4 *d_pos, *d_vel;
    float* d_speed;
    checkCudaErrors(cudaMalloc((void**)&d_pos, numParticles * sizeof(float4)));
    checkCudaErrors(cudaMalloc((void**)&d_vel, numParticles * sizeof(float4)));
    checkCudaErrors(cudaMalloc((void**)&d_speed, numParticles * sizeof(float)));
    checkCudaErrors(cudaMemcpy(d_pos, h_pos, numParticles * sizeof(float4), cudaMemcpyHostToDevice));
    checkCudaErrors(cudaMemcpy(d_vel, h_vel, numParticles * sizeof(float4), cudaMemcpyHostToDevice));

    const int blockSize = 256;
    const int numBlocks = (numParticles + blockSize - 1) / blockSize;
    for (int step = 0; step < 100; ++step)
        integrate_particles<<<numBlocks, blockSize>>>(d_pos, d_vel, timestep, numParticles, true);
    particle_speeds<<<numBlocks, blockSize>>>(d_vel, d_speed, numParticles);
    checkCudaErrors(cudaGetLastError());
    checkCudaErrors(cudaDeviceSynchronize());

    checkCudaErrors(cudaMemcpy(h_pos, d_pos, numParticles * sizeof(float4), cudaMemcpyDeviceToHost));
    printf("first particle: %f %f %f\n", h_pos[0].x, h_pos[0].y, h_pos[0].z);
    cudaFree(d_pos);
    cudaFree(d_vel);
    cudaFree(d_speed);
    free(h_pos);
    free(h_vel);
    return 0;
}
