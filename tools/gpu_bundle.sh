#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the GPU checks where there is no GPU, to run them on a machine that has one and
# cannot build (docs/sharding.md, "CUDA builds"): unit-cuda (tests/cuda/unit-cuda.cu) and the
# benchmark (bench/cairn_bench.cpp), for one architecture, stripped, with the shared libraries
# they need beyond glibc and libstdc++ (libcurl's and libzstd) in DIR/lib, and DIR/run.sh, which
# runs, from the repository's root: unit-cuda; compute-sanitizer's memcheck over its bucket
# cases; `cairn-bench-cuda --gpu --bytes 1G --repeat 3`. Their logs go to $OUT, else DIR/logs.
#
#   tools/gpu_bundle.sh [DIR] [ARCH]      DIR: build-cuda; ARCH: sm_90 (Hopper: H100, H200)
#
# The two nvcc builds run side by side, about 9 minutes each on one core. The GPU machine needs
# the NVIDIA driver of CUDA 13 and python3 (the bucket cases start tests/s3/fake_s3.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=${1:-build-cuda}
arch=${2:-sm_90}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "gpu_bundle.sh: no nvcc at $nvcc (set NVCC)"; exit 1; }
mkdir -p "$dir/lib"
flags=(-std=c++20 -Iinclude -I/usr/include/eigen3 --expt-relaxed-constexpr -diag-suppress "20012,550" -arch="$arch" -x cu)
"$nvcc" "${flags[@]}" -O0 tests/cuda/unit-cuda.cu -lcurl -lssl -lcrypto -lzstd -o "$dir/unit-cuda" &
tests=$!
"$nvcc" "${flags[@]}" -O2 bench/cairn_bench.cpp -lzstd -o "$dir/cairn-bench-cuda" &
bench=$!
wait "$tests"
wait "$bench"
strip "$dir/unit-cuda" "$dir/cairn-bench-cuda"
# What the loader would find here, but the C and C++ runtimes, which the other machine has.
for lib in $(ldd "$dir/unit-cuda" "$dir/cairn-bench-cuda" | awk '$3 ~ /^\// {print $3}' | sort -u); do
  case $(basename "$lib") in
    libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | libresolv* | libgcc_s* | libstdc++*) ;;
    *) cp -L "$lib" "$dir/lib/" ;;
  esac
done
cat >"$dir/run.sh" <<'EOF'
#!/usr/bin/env bash
# Made by tools/gpu_bundle.sh: the GPU checks, run from the repository's root.
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
logs=${OUT:-$here/logs}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
echo "=== unit-cuda"
timeout 300 "$here/unit-cuda" 2>&1 | tee "$logs/unit-cuda.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "=== compute-sanitizer memcheck over the bucket cases"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$sanitizer" ]; then
  timeout 200 "$sanitizer" --tool memcheck --leak-check no --report-api-errors no "$here/unit-cuda" -tc='*bucket*' \
    >"$logs/memcheck.log" 2>&1 || status=1
  tail -6 "$logs/memcheck.log"
else
  echo "no compute-sanitizer here"
fi
echo "=== cairn-bench-cuda --gpu --bytes 1G --repeat 3"
timeout 240 "$here/cairn-bench-cuda" --gpu --bytes 1G --repeat 3 2>&1 | tee "$logs/bench.log" || status=1
exit $status
EOF
chmod +x "$dir/run.sh"
echo "gpu_bundle.sh: $dir holds unit-cuda, cairn-bench-cuda ($arch), lib/ ($(ls "$dir/lib" | wc -l) libraries,"\
     "$(du -sh "$dir" | cut -f1) in all) and run.sh; on the GPU machine, from the repository's root: $dir/run.sh"
