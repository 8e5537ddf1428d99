//! The choice of nearest-centroid kernel ([`Kernel`]), detected at run
//! time so one binary serves every x86-64 CPU.

/// How the dot products are computed; [`Kernel::detect`] picks the fastest
/// one this CPU supports. Exposed so benchmarks and tests can compare them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Packed centroid panels of 32, a 12 × 32 AVX-512 register block fused
    /// with the top-2 selection (x86-64 with AVX-512F only). Twice the
    /// AVX2 kernel's rate where the FMA units are 512 bits wide (Zen 5,
    /// Intel server cores).
    PackedAvx512,
    /// Packed centroid panels, a 6 × 16 AVX2/FMA register block fused with
    /// the top-2 selection (x86-64 with AVX2 and FMA only).
    PackedAvx2,
    /// `matrixmultiply::sgemm` per tile, then a scan (every CPU).
    Sgemm,
}

impl Kernel {
    /// The fastest kernel this CPU supports.
    pub fn detect() -> Self {
        if Self::PackedAvx512.is_supported() {
            Self::PackedAvx512
        } else if Self::PackedAvx2.is_supported() {
            Self::PackedAvx2
        } else {
            Self::Sgemm
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::PackedAvx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Self::PackedAvx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            Self::PackedAvx2 | Self::PackedAvx512 => false,
            Self::Sgemm => true,
        }
    }
}
