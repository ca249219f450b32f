// Built by CI with nvcc (CUDA 13, CCCL 3 Thrust): the whole library compiles in a CUDA
// translation unit, and the cast kernels instantiate for device memory. Runs its checks
// only where a GPU is present (exit code 0 and a note otherwise).
#include <cairn/cairn.hpp>

#include <cstdio>
#include <vector>

#include <thrust/device_vector.h>

struct Small { std::vector<float> w; int step = 0; };
CAIRN_TREE(Small, w, step)

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("compile_cuda: built with nvcc; no GPU here, device checks skipped\n");
    return 0;
  }
  std::vector<float> host = {1.0f, 2.5f, -3.25f, 65504.0f, 1e6f};
  thrust::device_vector<float> src(host.begin(), host.end());
  thrust::device_vector<cairn::bfloat16> dst(host.size());
  cairn::detail::cast_typed<cairn::bfloat16, float>(thrust::device, thrust::raw_pointer_cast(src.data()),
                                                    thrust::raw_pointer_cast(dst.data()), host.size(),
                                                    cairn::OnOverflow::error);
  std::vector<cairn::bfloat16> back(host.size());
  thrust::copy(dst.begin(), dst.end(), back.begin());
  int bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i)
    if (back[i].bits != cairn::bfloat16(host[i]).bits) ++bad;
  std::printf("compile_cuda: device bfloat16 cast %s\n", bad ? "DIFFERS from host" : "matches host");
  return bad ? 1 : 0;
}
