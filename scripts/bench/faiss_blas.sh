# Sourced by the scripts that time FAISS. faiss-cpu's wheel bundles OpenBLAS
# 0.3.15, whose CPU detection does not know every AVX-512 CPU: on a 2-core
# Sapphire Rapids VM it fell back to its Prescott (SSE3) kernels, and
# FAISS's k-means on the embeddings took 5.4-7.2 s instead of 1.8 s with
# the SkylakeX kernels (docs/benchmarks.md, "FAISS's OpenBLAS core"). Where
# the CPU has AVX-512 (F, BW, VL, DQ) and OPENBLAS_CORETYPE is unset, this
# sets it to SkylakeX, the newest AVX-512 kernels that OpenBLAS has; then it
# prints the core FAISS uses, so that every figure says what it was
# measured against.
if [ -z "${OPENBLAS_CORETYPE:-}" ] \
  && grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo \
  && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
echo "# FAISS's OpenBLAS core: $(OPENBLAS_VERBOSE=2 "$PY" -c 'import faiss' 2>&1 | sed -n 's/^Core: //p' | tail -1)" \
  "(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
