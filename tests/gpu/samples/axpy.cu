// Test kernels for the toolkit's own GPU tests (utils.version, utils.ladder): z = a * x + y (out of place, so the output can be poisoned).
extern "C" __global__ void axpy_v0_thread(const float* x, const float* y, float* z, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = a * x[i] + y[i];
}

// Grid-stride loop: any grid covers n (the persistent launch lowers the grid to one wave).
extern "C" __global__ void axpy_v1_grid_stride(const float* x, const float* y, float* z, float a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        z[i] = a * x[i] + y[i];
}

// Broken on purpose: skips the last element, so a poisoned output must fail the check.
extern "C" __global__ void axpy_v2_off_by_one(const float* x, const float* y, float* z, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) z[i] = a * x[i] + y[i];
}

// Uses a workspace: stages a * x in w, then adds y.
extern "C" __global__ void axpy_v3_staged(const float* x, float* w, const float* y, float* z, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { w[i] = a * x[i]; z[i] = w[i] + y[i]; }
}
