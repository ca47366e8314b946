// The example kernel of the quick start: y = a * x + y.
template <class T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void saxpy_f32(float a, const float* x, float* y, int n) {
  saxpy<float>(a, x, y, n);
}
