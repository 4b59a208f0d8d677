#!/usr/bin/env bash
# The GPU machine's check in one command (docs/developer/gpu.md). Run from the repository root, with the
# folder that packaging/gpu-prep.sh filled (.gpu/) beside the tracked files:
#     bash packaging/device-check.sh OUT             # on the GPU machine (device tool: carry [".gpu"])
#     bash packaging/device-check.sh OUT --rehearse  # without a GPU: Debian's libtorch stands in
#                                                     # (packaging/device-rehearsal.sh runs it in a chroot)
# Steps, each with a time cap: hard steps stop the check, soft ones record and go on.
#   probe      (hard)  machine, compiler, PyTorch (version, CUDA, CMake folder, Gloo/NCCL headers)
#   unpack     (hard)  the carried Debian 12 packages into a sysroot outside / (LATMIX_SYSROOT)
#   configure  (hard)  core + CLI + tests against the machine's libtorch (no GUI)
#   build      (hard)  `latmix`, its libraries all loadable; (soft) the device-generic tests
#   tests      (soft)  the CUDA rows of every device-generic test (a CUDA row that skips fails)
#   runs       (soft)  eval / quantize latmix-lu / mr-gptq on cuda and on cpu, bench rows, and a
#                      Llama-3.2-1B-shaped checkpoint on cuda (item 7 of issue 33)
#   c10d       (soft)  which c10d backends the build has
# Everything lands in OUT (at most 8 files: the device tool brings back 8): summary.txt (the
# step table and the measured numbers), probe.log, build.log, tests.log, runs.log, runs.json.
# Environment: LATMIX_DEVICE_CAP_SCALE multiplies every cap (the rehearsal on 2 cores: 4);
# LATMIX_DEVICE_DEADLINE (seconds, default 480) shortens the caps so that the whole check ends by
# then (0: no deadline), leaving the device call time to bring the logs back;
# LATMIX_DEVICE_STEPS=configure or build-cli stops after that step (CI: build-cli).
# LATMIX_DEVICE_BUILD_TYPE (default Release) is CMake's build type; CI's rehearsal, which runs
# nothing it builds, compiles with None (no optimiser: the same includes, templates and links).
# Exit status: 0 when every step passed, 1 when a step failed, 2 when this machine cannot run the
# check at all (no GPU, CPU-only torch, nothing carried), before anything is built.
set -uo pipefail
OUT=${1:?usage: device-check.sh OUT [--rehearse]}
REHEARSE=no
[ "${2:-}" = --rehearse ] && REHEARSE=yes
SRC=$(cd "$(dirname "$0")/.." && pwd)
GPU=${LATMIX_GPU_DIR:-$SRC/.gpu}
SYS=${LATMIX_SYSROOT:-/tmp/latmix-sysroot}
BUILD=${LATMIX_DEVICE_BUILD:-$SRC/build-cuda}
WORK=${LATMIX_DEVICE_WORK:-/tmp/latmix-device}
JOBS=$(nproc)
ARCH=x86_64-linux-gnu
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
rm -f "$OUT"/*.log "$OUT"/runs.json
: > "$SUMMARY"
FAILED=0
T0=$SECONDS
LATMIX_DEVICE_DEADLINE=${LATMIX_DEVICE_DEADLINE:-480}
say() { echo "device-check: $*" | tee -a "$SUMMARY"; }
# step NAME hard|soft CAP LOG FUNCTION: runs FUNCTION under a time cap, output appended to LOG.
step() {
  local name=$1 kind=$2 cap=$(($3 * ${LATMIX_DEVICE_CAP_SCALE:-1})) log=$OUT/$4 fn=$5 t=$SECONDS rc
  if [ "${LATMIX_DEVICE_DEADLINE:-0}" -gt 0 ]; then # the whole check ends by then, whatever is left
    local left=$((LATMIX_DEVICE_DEADLINE - (SECONDS - T0)))
    [ $left -lt $cap ] && cap=$left
    if [ $cap -lt 10 ]; then
      printf '%-10s %-4s %4d s  %s\n' "$name" "$kind" 0 "SKIPPED: the deadline (LATMIX_DEVICE_DEADLINE=${LATMIX_DEVICE_DEADLINE} s) is reached" | tee -a "$SUMMARY"
      FAILED=1
      return 0
    fi
  fi
  echo "=== $name ($kind, cap ${cap} s)" >> "$log"
  STEP_CAP=$cap timeout --kill-after=10 "$cap" bash -c "$(declare -f); $fn" >> "$log" 2>&1
  rc=$?
  local status=ok
  [ $rc = 124 ] || [ $rc = 137 ] && status="TIMEOUT after ${cap} s"
  [ $rc != 0 ] && [ "$status" = ok ] && status="FAILED (exit $rc)"
  printf '%-10s %-4s %4d s  %s\n' "$name" "$kind" $((SECONDS - t)) "$status" | tee -a "$SUMMARY"
  if [ $rc != 0 ]; then
    FAILED=1
    tail -n 15 "$log" | sed 's/^/    | /' | tee -a "$SUMMARY"
    [ "$kind" = hard ] && { say "stopped at hard step '$name' (log: $4), $((SECONDS - T0)) s in all"; exit 1; }
  fi
  return 0
}
export SRC GPU SYS BUILD WORK JOBS ARCH OUT REHEARSE SUMMARY

# --- 0. what this machine is, before anything is built (exit 2: cannot run here) -------------
[ -d "$GPU/debs" ] && [ -f "$GPU/debs/MANIFEST" ] ||
  { say "nothing carried: $GPU/debs is missing; run packaging/gpu-prep.sh on Debian 12 and carry .gpu"; exit 2; }
if [ "$REHEARSE" = yes ]; then
  TORCH_CMAKE=${LATMIX_TORCH_DIR:-/usr/lib/$ARCH/cmake/Torch}
  [ -f "$TORCH_CMAKE/TorchConfig.cmake" ] || { say "rehearsal: no TorchConfig.cmake in $TORCH_CMAKE (set LATMIX_TORCH_DIR)"; exit 2; }
  TORCH_ROOT=$(cd "$TORCH_CMAKE/../../.." && pwd)
else
  command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 ||
    { say "no NVIDIA GPU on this machine (nvidia-smi finds none): the device check needs one (--rehearse runs it without)"; exit 2; }
  read -r TORCH_CMAKE TORCH_ROOT TORCH_CUDA < <(python3 -c 'import torch,os;print(torch.utils.cmake_prefix_path+"/Torch", os.path.dirname(torch.__file__), torch.version.cuda is not None and torch.cuda.is_available())' 2>/dev/null) ||
    { say "python3 has no PyTorch (import torch failed): the device check builds against PyTorch's libtorch"; exit 2; }
  [ "$TORCH_CUDA" = True ] ||
    { say "python3's PyTorch is CPU-only or sees no GPU (torch.cuda.is_available() is False): the device check needs a CUDA build of PyTorch"; exit 2; }
fi
export TORCH_CMAKE TORCH_ROOT
say "$(date -u +%FT%TZ) on $(hostname), $JOBS cores, rehearsal: $REHEARSE; torch CMake folder $TORCH_CMAKE"

probe() {
  set -x
  cat /etc/os-release | head -n 2
  uname -r
  g++ --version | head -n 1
  cmake --version | head -n 1
  ninja --version
  if [ "$REHEARSE" = no ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI, "device", torch.cuda.get_device_name(0), "nccl", torch.cuda.nccl.version())'
    command -v nvcc || ls /usr/local/cuda/bin/nvcc
    ls "$TORCH_ROOT/lib" | head -n 40
    find "$(dirname "$TORCH_ROOT")/nvidia" -maxdepth 4 -name 'nccl.h' -o -maxdepth 4 -name 'libnccl.so*' | head
  fi
  ls -d "$TORCH_ROOT/include/gloo" "$TORCH_ROOT/include/torch/csrc/distributed/c10d" 2>&1
  ls "$TORCH_ROOT/include/torch/csrc/distributed/c10d" | grep -e Gloo -e NCCL | head
}
step probe hard 60 probe.log probe

# --- 1. the carried packages into a sysroot ---------------------------------------------------
unpack() {
  set -e
  rm -rf "$SYS"
  mkdir -p "$SYS/fill"
  for d in "$GPU/debs"/*.deb; do dpkg-deb -x "$d" "$SYS"; done
  # Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1...) would resolve against this
  # machine's root: point them into the sysroot.
  find "$SYS" -type l | while read -r l; do
    t=$(readlink "$l")
    case $t in /*) ln -sfn "$SYS$t" "$l" ;; esac
  done
  # Without the h5cc/h5c++ wrappers (they name /usr paths) FindHDF5 searches HDF5_ROOT: Debian's
  # lib/ARCH/hdf5/serial, whose include/ and lib/ links lead to the headers and libraries.
  rm -f "$SYS"/usr/bin/h5*
  # The loader's path gets only the sonames this machine lacks: its own libssl/libcurl/glib stay.
  for lib in "$SYS/usr/lib/$ARCH"/lib*.so.* "$SYS/lib/$ARCH"/lib*.so.*; do
    [ -e "$lib" ] || continue
    so=$(basename "$lib")
    case $so in *.so.[0-9]*) ;; *) continue ;; esac
    soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/{print $2}')
    [ -n "$soname" ] && [ "$so" = "$soname" ] || continue
    ldconfig -p | grep -q "^[[:space:]]$soname " || ln -sfn "$lib" "$SYS/fill/$soname"
  done
  echo "filled: $(ls "$SYS/fill" | tr '\n' ' ')"
  du -sh "$SYS"
}
step unpack hard 90 build.log unpack
export LD_LIBRARY_PATH=$SYS/fill${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_SYSROOT_DIR=$SYS
export PKG_CONFIG_LIBDIR=$SYS/usr/lib/$ARCH/pkgconfig:$SYS/usr/share/pkgconfig
export PKG_CONFIG=$SYS/usr/bin/pkgconf

# --- 2. configure against this machine's libtorch ---------------------------------------------
configure() { configure_in "$BUILD"; }
# configure_in DIR [CMAKE ARGS...]: the same configuration in DIR (the asan step adds a sanitizer).
configure_in() {
  set -e
  local dir=$1 cuda=()
  shift
  if [ "$REHEARSE" = no ]; then
    local nvcc
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2> /dev/null | head -n 1)
    [ -x "$nvcc" ] || { echo "no nvcc (CUDA's compiler) in PATH or /usr/local/cuda*/bin: PyTorch's CMake package needs the CUDA toolkit"; return 1; }
    local root
    root=$(cd "$(dirname "$nvcc")/.." && pwd)
    cuda=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$root" -DCUDA_TOOLKIT_ROOT_DIR="$root")
  fi
  rm -f "$dir/CMakeCache.txt" # a fresh configure each time; the objects stay
  cmake -S "$SRC" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${LATMIX_DEVICE_BUILD_TYPE:-Release}" \
    -DTorch_DIR="$TORCH_CMAKE" \
    -DCMAKE_PREFIX_PATH="$SYS/usr;$SYS/usr/lib/$ARCH/cmake" \
    -DCMAKE_FIND_ROOT_PATH="$SYS" \
    -DHDF5_ROOT="$SYS/usr/lib/$ARCH/hdf5/serial" \
    -DCMAKE_LIBRARY_PATH="$SYS/usr/lib/$ARCH/hdf5/serial;$SYS/usr/lib/$ARCH" \
    -DCMAKE_INCLUDE_PATH="$SYS/usr/include/hdf5/serial;$SYS/usr/include" \
    -DLATMIX_BUILD_GUI=OFF -DLATMIX_OPENBLAS_OPENMP_DIR= -DLATMIX_TEST_THREADS="$JOBS" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${cuda[@]}" "$@"
  grep -E '^(CMAKE_CXX_STANDARD|LATMIX_)' "$dir/CMakeCache.txt" || true
}
step configure hard 150 build.log configure
[ "${LATMIX_DEVICE_STEPS:-all}" = configure ] && { say "configured in $((SECONDS - T0)) s (LATMIX_DEVICE_STEPS=configure: stopping here)"; exit $FAILED; }

# --- 3. build -----------------------------------------------------------------------------------
DEVICE_TESTS=$(bash "$SRC/packaging/cuda-rows.sh" tests)
export DEVICE_TESTS
build_cli() {
  set -e
  rm -f "$WORK/c10d-fallback"
  # c10d's NCCL and Gloo headers are compiled here for the first time on this machine: when
  # dist/ProcessGroup.cpp fails, the rest is still worth checking, so build again without NCCL,
  # then without c10d, and let the c10d step report it.
  if ! cmake --build "$BUILD" -j "$JOBS" --target latmix; then
    grep -q 'FAILED: core/CMakeFiles/latmix_dist' "$OUT/build.log" || return 1
    echo "dist/ProcessGroup.cpp did not build: again without NCCL" | tee "$WORK/c10d-fallback"
    cmake -DLATMIX_NCCL=OFF "$BUILD" > /dev/null
    if ! cmake --build "$BUILD" -j "$JOBS" --target latmix; then
      echo "dist/ProcessGroup.cpp did not build without NCCL either: again without c10d" | tee -a "$WORK/c10d-fallback"
      cmake -DLATMIX_C10D=OFF "$BUILD" > /dev/null
      cmake --build "$BUILD" -j "$JOBS" --target latmix
    fi
  fi
  # Every library the CLI loads resolves; a missing one is named with the package it comes from.
  local missing
  missing=$(ldd "$BUILD/bin/latmix" | awk '/not found/{print $1}')
  for so in $missing; do
    echo "missing library $so (package $(awk -v s="$so" '$1==s{print $2}' "$GPU/debs/MANIFEST" | head -n 1); not carried?)"
  done
  [ -z "$missing" ]
  ldd "$BUILD/bin/latmix" | grep -E 'torch|c10|cuda|nccl|hdf5|gomp' || true
  # C++ library functions that latmix imports and PyTorch's libraries define too: the loader binds
  # latmix's calls to those copies (libtorch.so comes before libstdc++ in its search order). One
  # such copy, std::filesystem::remove_all, crashed every quantize run (util/AtomicFile.cpp).
  local defs
  defs=$(for so in "$TORCH_ROOT"/lib/lib*.so; do nm -D --defined-only "$so" 2> /dev/null | awk '{print $3}'; done | grep '^_ZN*K*St' | sort -u)
  echo "std:: functions latmix imports that PyTorch's libraries also define:"
  nm -D --undefined-only "$BUILD/bin/latmix" | awk '{print $2}' | grep '^_ZN*K*St' | sort -u | comm -12 - <(echo "$defs") | c++filt | head -n 40
  "$BUILD/bin/latmix" --version
  # A linker with --as-needed (Ubuntu's default) drops libtorch_cuda, which no symbol of ours
  # names: then CUDA is "not available" at run time although the build is a CUDA one.
  if [ "$REHEARSE" = no ]; then
    ldd "$BUILD/bin/latmix" | grep -q libtorch_cuda || { echo "latmix does not load libtorch_cuda.so: CUDA would be unavailable"; return 1; }
    "$BUILD/bin/latmix" --version | grep -q 'devices: CUDA' || { echo "latmix sees no CUDA device"; return 1; }
  fi
}
step build-cli hard 330 build.log build_cli
[ "${LATMIX_DEVICE_STEPS:-all}" = build-cli ] && { say "latmix built in $((SECONDS - T0)) s (LATMIX_DEVICE_STEPS=build-cli: stopping here)"; exit $FAILED; }
build_tests() { cmake --build "$BUILD" -j "$JOBS" --target $DEVICE_TESTS -- -k 0; }
step build-tst soft 240 build.log build_tests

# --- 4. data: small files carried, random checkpoints of real shapes made here ----------------
export LATMIX_DATA_DIR=$WORK/data
data() {
  set -e
  rm -rf "$LATMIX_DATA_DIR"
  mkdir -p "$LATMIX_DATA_DIR/models"
  cp -r "$GPU/data/wikitext-2" "$LATMIX_DATA_DIR/"
  cp -r "$GPU/data/models/stories260K-hf" "$LATMIX_DATA_DIR/models/"
  local src=$GPU/data/models/brownpy-13M-src
  "$BUILD/bin/latmix" demo-model --config "$src/config.json" --tokenizer "$src" --dtype float32 "$LATMIX_DATA_DIR/models/brownpy-13M"
  if [ "$REHEARSE" = no ]; then
    "$BUILD/bin/latmix" demo-model --config "$SRC/resources/configs/llama-3.2-1b.json" --tokenizer "$src" "$WORK/llama-1b"
    # The same widths with 4 layers, for the end-to-end runs: GPTQ's seconds per layer and each
    # stage's peak are those of the 16-layer model (measured: 10.1 s per layer with 2 layers,
    # 10.7 s with 16) in a quarter of the time.
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["num_hidden_layers"]=4; json.dump(c, open(sys.argv[2], "w"))' \
      "$SRC/resources/configs/llama-3.2-1b.json" "$WORK/llama-1b-4layers.json"
    "$BUILD/bin/latmix" demo-model --config "$WORK/llama-1b-4layers.json" --tokenizer "$src" "$WORK/llama-1b-4layers"
  fi
}
step data soft 120 runs.log data

# --- 5. the CUDA rows of the device-generic tests ---------------------------------------------
tests() {
  local t rows fails=0
  for t in $DEVICE_TESTS; do
    if [ ! -x "$BUILD/bin/$t" ]; then echo "FAIL $t: not built"; fails=1; continue; fi
    # Only the rows on an accelerator: the CPU rows run in CI.
    mapfile -t rows < <("$BUILD/bin/$t" -datatags | awk '/cuda:[0-9]/ { fn=$2; $1=""; $2=""; sub(/^  /,""); print fn ":" $0 }')
    echo "--- $t: ${#rows[@]} CUDA rows"
    [ ${#rows[@]} -gt 0 ] || { echo "FAIL $t: no CUDA rows"; fails=1; continue; }
    "$BUILD/bin/$t" -maxwarnings 0 "${rows[@]}" > "$WORK/$t.txt" 2>&1
    local rc=$?
    cat "$WORK/$t.txt"
    local pass skip
    pass=$(grep -c '^PASS.*cuda' "$WORK/$t.txt")
    skip=$(grep -c '^SKIP' "$WORK/$t.txt")
    echo "$t: exit $rc, $pass CUDA rows passed, $skip skipped"
    if [ $rc != 0 ] || [ "$skip" != 0 ] || [ "$pass" = 0 ]; then fails=1; fi
  done
  # Every CUDA row of the suite as committed (packaging/cuda-rows.txt, which CI keeps equal to the
  # tests' rows): fewer passing means rows were lost, skipped or failed.
  local passed expected
  passed=$(grep -h -e '^PASS.*cuda' "$WORK"/tst_*.txt | wc -l)
  expected=$(bash "$SRC/packaging/cuda-rows.sh" expected)
  echo "CUDA rows passed in all: $passed of $expected listed in packaging/cuda-rows.txt"
  [ "$passed" -ge "$expected" ] || { echo "FAIL: $passed CUDA rows passed, $expected listed"; fails=1; }
  return $fails
}
[ "$REHEARSE" = no ] && step tests soft 240 tests.log tests

# --- 6. timed runs: cuda next to cpu ----------------------------------------------------------
runs() { bash "$SRC/packaging/device-runs.sh"; }
step runs soft 420 runs.log runs

# --- 6b. a crashed quantize run again, under AddressSanitizer (only when one crashed) ----------
# device-runs.sh leaves $WORK/crashed with the smallest crashing command. The same sources built
# with -fsanitize=address (LATMIX_SANITIZE) name an invalid access in our code with its stack;
# where this machine has gdb, the plain build's crash is also printed with gdb's backtrace.
asan() {
  set -e
  local dir=$SRC/build-asan cmd
  read -r -a cmd < "$WORK/crashed" || true # no newline at its end: read says 1 but fills cmd
  configure_in "$dir" -DLATMIX_SANITIZE=address > "$WORK/asan-configure.txt" 2>&1 || { tail -n 30 "$WORK/asan-configure.txt"; return 1; }
  cmake --build "$dir" -j "$JOBS" --target latmix > "$WORK/asan-build.txt" 2>&1 || { tail -n 30 "$WORK/asan-build.txt"; return 1; }
  set +e
  echo "+ (asan) ${cmd[*]}"
  ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0:halt_on_error=1:allocator_may_return_null=1:alloc_dealloc_mismatch=0 \
    "$dir/bin/latmix" "${cmd[@]}" --out "$WORK/asan-run" 2>&1 | tail -n 120
  echo "[asan run: exit ${PIPESTATUS[0]}]"
  # ASan's frames as BINARY(+OFFSET): named with addr2line where no symbolizer named them
  if command -v gdb > /dev/null; then
    echo "+ gdb --batch (plain build) ${cmd[*]}"
    timeout 120 gdb --batch -ex run -ex bt -ex 'info registers rip' -ex 'x/8i $pc' --args "$BUILD/bin/latmix" "${cmd[@]}" --out "$WORK/gdb-run" 2>&1 | tail -n 80
  else
    echo "(no gdb on this machine)"
  fi
  return 0
}
[ -f "$WORK/crashed" ] && step asan soft 200 asan.log asan

# --- 7. c10d backends in this build -----------------------------------------------------------
c10d() {
  grep -E 'c10d|Gloo|NCCL|libtorch' "$OUT/build.log" | grep -- '-- ' | sort -u
  "$BUILD/bin/latmix" --version
  ! cat "$WORK/c10d-fallback" 2> /dev/null
}
step c10d soft 30 build.log c10d

say "done in $((SECONDS - T0)) s: $([ $FAILED = 0 ] && echo 'all steps passed' || echo 'FAILED steps above')"
grep -h '^|' "$OUT/runs.log" >> "$SUMMARY" 2>/dev/null || true
exit $FAILED
