# Sourced by the scripts that time FAISS. faiss-cpu's wheel bundles OpenBLAS
# 0.3.15, whose CPU detection does not know every AVX-512 CPU: on a 2-core
# Sapphire Rapids VM it fell back to its Prescott (SSE3) kernels, and
# FAISS's k-means on the embeddings took 5.4-7.2 s instead of 1.8 s with
# the SkylakeX kernels (docs/benchmarks.md, "FAISS's OpenBLAS core"). A
# host may also set OPENBLAS_CORETYPE itself: a 2-vCPU AMD EPYC (Zen 5) VM
# came with Haswell (AVX2), under which FAISS trained the embeddings in
# 1.37 s against 0.79 s with SkylakeX. FAISS is measured at its best: where
# the CPU has AVX-512 (F, BW, VL, DQ) and OPENBLAS_CORETYPE is unset or
# names a core without AVX-512, this sets SkylakeX, the newest AVX-512
# kernels that OpenBLAS has (FAISS_BLAS_KEEP=1 keeps the host's setting);
# then it prints the core FAISS uses, so that every figure says what it was
# measured against.
case "${OPENBLAS_CORETYPE:-}" in
  SkylakeX | Cooperlake | SapphireRapids) ;;
  *)
    if [ -z "${FAISS_BLAS_KEEP:-}" ] \
      && grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo \
      && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then
      [ -n "${OPENBLAS_CORETYPE:-}" ] && echo "# OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE replaced by SkylakeX (FAISS_BLAS_KEEP=1 keeps it)"
      export OPENBLAS_CORETYPE=SkylakeX
    fi
    ;;
esac
echo "# FAISS's OpenBLAS core: $(OPENBLAS_VERBOSE=2 "$PY" -c 'import faiss' 2>&1 | sed -n 's/^Core: //p' | tail -1)" \
  "(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
