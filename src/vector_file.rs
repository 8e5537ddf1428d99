//! Reading dense f32 vector files used by benchmarks and query input:
//! `.npy` (float32/float64, C order, 2-D) and TEXMEX `.fvecs`/`.ivecs`.
//! SKELETON: owned by the k-means helper (issue 3).
