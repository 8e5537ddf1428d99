//! Tests of the quantisers through the public API, plus the AVX2-versus-scalar
//! agreement of the scoring kernels. Data are seeded Gaussian (Box–Muller), or
//! anisotropic: a "spike" where 3 dimensions carry 20× the spread of the rest,
//! and a power-law spectrum (spread ∝ (1 + i)^−0.7, like real embeddings).

use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

/// f32 machine epsilon (2u).
const EPS: f64 = f32::EPSILON as f64;

#[derive(Clone, Copy, Debug)]
enum Shape {
    Gaussian,
    Spike,
    PowerLaw,
}

fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn vectors(n: usize, dim: usize, shape: Shape, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * dim)
        .map(|k| {
            let i = k % dim;
            let spread = match shape {
                Shape::Gaussian => 1.0,
                Shape::Spike => {
                    if i < 3 {
                        20.0
                    } else {
                        1.0
                    }
                }
                Shape::PowerLaw => (1.0 + i as f64).powf(-0.7),
            };
            (gaussian(&mut rng) * spread) as f32
        })
        .collect()
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

fn encode_all(quantizer: &Quantizer, residuals: &[f32]) -> Vec<u8> {
    let mut codes = vec![0u8; residuals.len() / quantizer.dim() * quantizer.code_bytes()];
    let n = residuals.len() / quantizer.dim();
    quantizer.encode_batch(
        residuals,
        &vec![0.0; quantizer.dim()],
        &vec![0; n],
        &mut codes,
    );
    codes
}

fn scores(quantizer: &Quantizer, y: &[f32], codes: &[u8]) -> Vec<f32> {
    let mut rotated = vec![0.0; y.len()];
    quantizer.rotate(y, &mut rotated);
    let prepared = quantizer.prepare(&rotated);
    let mut out = vec![0.0; codes.len() / quantizer.code_bytes()];
    quantizer.score(&prepared, codes, &mut out);
    out
}

// ---------------------------------------------------------------- sq8

/// Inside the trained range `|r_i − r̂_i| ≤ scale_i/2 + slack`. Slack, with
/// u = 2⁻²⁴ and m = |min_i| + 255·scale_i (≥ every |value| involved): the
/// quotient (r − min)/scale carries ≤ 2 roundings, so ≤ 2u·255 of error in
/// code units, i.e. ≤ 2u·255·scale in value; `scale·u_i` and `min + …` add
/// ≤ u·255·scale and ≤ u·m. Total ≤ u·(|min| + 4·255·scale) ≤ 4u·m; the test
/// allows 8u·m.
#[test]
fn sq8_reconstruction_error_is_within_half_a_step() {
    for (dim, shape) in [
        (5, Shape::Gaussian),
        (100, Shape::Spike),
        (384, Shape::PowerLaw),
    ] {
        let sample = vectors(500, dim, shape, 1);
        let q = Quantizer::train_sq8(&sample, dim).unwrap();
        let (min, scale) = q.sq8_ranges().unwrap();
        let (min, scale) = (min.to_vec(), scale.to_vec());
        // Values inside the range: the sample itself and fresh data clipped to it.
        let mut data = sample.clone();
        data.extend(
            vectors(500, dim, shape, 2)
                .iter()
                .enumerate()
                .map(|(k, &x)| {
                    let i = k % dim;
                    x.clamp(min[i], min[i] + 255.0 * scale[i])
                }),
        );
        let codes = encode_all(&q, &data);
        let mut decoded = vec![0.0; dim];
        for (r, code) in data
            .chunks_exact(dim)
            .zip(codes.chunks_exact(q.code_bytes()))
        {
            q.decode(code, &mut decoded);
            for i in 0..dim {
                let m = f64::from(min[i].abs()) + 255.0 * f64::from(scale[i]);
                let bound = f64::from(scale[i]) / 2.0 + 8.0 * (EPS / 2.0) * m;
                let err = (f64::from(r[i]) - f64::from(decoded[i])).abs();
                assert!(
                    err <= bound,
                    "dim {i}: {} → {} (err {err:e} > {bound:e})",
                    r[i],
                    decoded[i]
                );
            }
            assert_eq!(Quantizer::norm2(code), (dot(r, r)) as f32, "stored norm2");
        }
    }
}

#[test]
fn sq8_clamps_values_outside_the_trained_range() {
    let q = Quantizer::train_sq8(&[-1.0, 0.0, 1.0, 2.0], 2).unwrap();
    let mut code = vec![0u8; q.code_bytes()];
    q.encode(&[-50.0, 70.0], &[0.0; 2], &mut code);
    assert_eq!(&code[HEADER_BYTES..], &[0, 255]);
    let mut decoded = [0.0; 2];
    q.decode(&code, &mut decoded);
    assert_eq!(decoded[0], -1.0);
    assert!((decoded[1] - 2.0).abs() <= 4.0 * f32::EPSILON);
    assert_eq!(Quantizer::norm2(&code), 50.0f32 * 50.0 + 70.0 * 70.0);
}

/// A dimension constant in the sample encodes to 0 and decodes exactly.
#[test]
fn sq8_constant_dimension_decodes_exactly() {
    let q = Quantizer::train_sq8(&[3.5, 1.0, 3.5, 2.0, 3.5, -4.0], 2).unwrap();
    let (_, scale) = q.sq8_ranges().unwrap();
    assert!(scale[0] > 0.0);
    let mut code = vec![0u8; q.code_bytes()];
    q.encode(&[3.5, 0.0], &[0.0; 2], &mut code);
    let mut decoded = [0.0; 2];
    q.decode(&code, &mut decoded);
    assert_eq!(decoded[0], 3.5);
}

#[test]
fn sq8_from_ranges_round_trips_the_trained_ranges() {
    let sample = vectors(100, 7, Shape::Gaussian, 3);
    let trained = Quantizer::train_sq8(&sample, 7).unwrap();
    let (min, scale) = trained.sq8_ranges().unwrap();
    let loaded = Quantizer::sq8_from_ranges(min.to_vec(), scale.to_vec()).unwrap();
    assert_eq!(encode_all(&trained, &sample), encode_all(&loaded, &sample));
    assert_eq!(loaded.scheme(), Scheme::Sq8);
    assert_eq!(loaded.code_bytes(), 8 + 7);
    assert_eq!(loaded.rotation_seed(), None);
    assert_eq!(loaded.rotation_sha256(), None);
}

/// `score` is `<r̂, y>` for the decoded r̂, to f32 rounding of the n-term sum
/// (≤ γ_n·Σ|terms| with γ_n ≈ n·u; n·ε allowed, plus the constant).
#[test]
fn sq8_score_is_the_reconstruction_inner_product() {
    let dim = 100;
    let data = vectors(300, dim, Shape::PowerLaw, 4);
    let q = Quantizer::train_sq8(&data, dim).unwrap();
    let codes = encode_all(&q, &data);
    let y = vectors(1, dim, Shape::Gaussian, 5);
    let est = scores(&q, &y, &codes);
    let mut decoded = vec![0.0; dim];
    for (code, &e) in codes.chunks_exact(q.code_bytes()).zip(&est) {
        q.decode(code, &mut decoded);
        let exact = dot(&decoded, &y);
        let magnitude: f64 = decoded
            .iter()
            .zip(&y)
            .map(|(&a, &b)| f64::from(a * b).abs())
            .sum();
        assert!(
            (f64::from(e) - exact).abs() <= 4.0 * dim as f64 * EPS * magnitude,
            "{e} vs {exact}"
        );
    }
}

// ---------------------------------------------------------------- rabitq4

/// The estimator's error bound, checked per pair:
/// `|est − <r, y>| ≤ C·‖r‖·‖y‖/√dim` with C = 0.5 for ≥ 99% of pairs.
///
/// Derivation. Write o = P·r, ỹ = P·y, θ the angle between ô and o. RaBitQ's
/// estimator `<ô, ỹ>·‖o‖²/<ô, o>` equals `<o, ỹ>` plus
/// `‖o‖·‖ỹ⊥‖·tan θ·ξ`, where ỹ⊥ is ỹ's part orthogonal to o and ξ is the
/// cosine between ỹ⊥ and the quantisation error's direction, which the random
/// rotation makes ≈ N(0, 1/dim). With 16 levels and the step search,
/// cos θ ≈ 0.995 typically and ≥ 0.985 always (tested below), so tan θ is
/// ≈ 0.10 typically and ≤ 0.175, and the 99.5% quantile of |ξ|·√dim is 2.81:
/// ≈ 0.28·‖r‖·‖y‖/√dim for a typical residual, ≤ 0.49 for the worst. The int8 query
/// adds `Σ f·(u_i − 7.5)·e_i` with |e_i| ≤ s/2, s = max|ỹ|/127 ≈ 3.5·‖y‖/(127·√dim):
/// a rounding noise of std ≈ ‖r‖·s/√12 ≈ 0.008·‖r‖·‖y‖/√dim, so C = 0.5 leaves
/// a margin. Also: the mean of |est − true|/(‖r‖‖y‖/√dim) stays ≤ 0.15, and
/// the mean relative error of the implied L2 distance `‖r‖² + ‖y‖² − 2·est` ≤ 1%.
#[test]
fn rabitq4_estimates_are_within_the_documented_bound() {
    for dim in [128, 384] {
        let q = Quantizer::rabitq4(dim, 77).unwrap();
        for shape in [Shape::Gaussian, Shape::Spike, Shape::PowerLaw] {
            let rs = vectors(400, dim, shape, 10);
            let ys = vectors(20, dim, shape, 11);
            let codes = encode_all(&q, &rs);
            let (mut pairs, mut within, mut scaled_sum, mut l2_rel_sum) =
                (0usize, 0usize, 0.0, 0.0);
            let mut worst = 0.0f64;
            for y in ys.chunks_exact(dim) {
                let est = scores(&q, y, &codes);
                for (r, &e) in rs.chunks_exact(dim).zip(&est) {
                    let truth = dot(r, y);
                    let (nr2, ny2) = (dot(r, r), dot(y, y));
                    let unit = (nr2 * ny2).sqrt() / (dim as f64).sqrt();
                    let scaled = (f64::from(e) - truth).abs() / unit;
                    worst = worst.max(scaled);
                    pairs += 1;
                    within += usize::from(scaled <= 0.5);
                    scaled_sum += scaled;
                    let l2 = nr2 + ny2 - 2.0 * truth;
                    l2_rel_sum += (2.0 * (f64::from(e) - truth)).abs() / l2;
                }
            }
            let share = within as f64 / pairs as f64;
            let mean = scaled_sum / pairs as f64;
            let l2_rel = l2_rel_sum / pairs as f64;
            eprintln!(
                "rabitq4 dim {dim} {shape:?}: within 0.5 {share:.4}, mean {mean:.4}, worst {worst:.3}, \
                 mean L2 relative error {l2_rel:.5}"
            );
            assert!(
                share >= 0.99,
                "dim {dim} {shape:?}: only {share} of pairs within the bound"
            );
            assert!(
                mean <= 0.15,
                "dim {dim} {shape:?}: mean scaled error {mean}"
            );
            assert!(
                l2_rel <= 0.01,
                "dim {dim} {shape:?}: mean L2 relative error {l2_rel}"
            );
        }
    }
}

/// The chosen levels fit every residual closely: cos(ô, o) ≥ 0.985, measured
/// as `‖r‖ / ‖decode‖` (the decoded vector's component along r is ‖r‖ and its
/// norm ‖r‖/cos θ), so the decoded residual's error relative to ‖r‖ is
/// tan θ ≤ 0.175 (+ f32 slack of the two rotations). Measured on 2 000
/// Gaussian vectors: mean cos 0.995, 1st percentile 0.991, worst 0.988 (a
/// finer step search gains < 3·10⁻⁵; the worst vectors are those with one
/// coordinate beyond 4σ, which no uniform 16-level grid fits well).
#[test]
fn rabitq4_decode_error_is_within_the_documented_bound() {
    for dim in [5, 100, 128, 384] {
        let q = Quantizer::rabitq4(dim, 3).unwrap();
        for shape in [Shape::Gaussian, Shape::Spike, Shape::PowerLaw] {
            let rs = vectors(200, dim, shape, 12);
            let codes = encode_all(&q, &rs);
            let mut decoded = vec![0.0; dim];
            let mut worst_cos = 1.0f64;
            for (r, code) in rs.chunks_exact(dim).zip(codes.chunks_exact(q.code_bytes())) {
                q.decode(code, &mut decoded);
                let norm = dot(r, r).sqrt();
                let along = dot(r, &decoded) / norm;
                assert!(
                    (along - norm).abs() <= 1e-4 * norm,
                    "dim {dim}: component {along} vs ‖r‖ {norm}"
                );
                let cos = norm / dot(&decoded, &decoded).sqrt();
                worst_cos = worst_cos.min(cos);
                let err: f64 = r
                    .iter()
                    .zip(&decoded)
                    .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let min_cos: f64 = 0.985;
                let tan = (1.0 - min_cos * min_cos).sqrt() / min_cos;
                assert!(
                    err <= (tan + 1e-4) * norm,
                    "dim {dim} {shape:?}: error {err} > {tan}·‖r‖"
                );
            }
            eprintln!("rabitq4 dim {dim} {shape:?}: worst cos(ô, o) {worst_cos:.5}");
        }
    }
}

/// Recall-style check: the true top 10 by `<r, y>` of 1000 residuals are all
/// within the estimator's top 100.
#[test]
fn true_top_10_is_within_the_estimated_top_100() {
    for dim in [128, 384] {
        for shape in [Shape::Gaussian, Shape::Spike, Shape::PowerLaw] {
            let rs = vectors(1000, dim, shape, 20);
            let sample = vectors(1000, dim, shape, 21);
            for q in [
                Quantizer::rabitq4(dim, 5).unwrap(),
                Quantizer::train_sq8(&sample, dim).unwrap(),
            ] {
                let codes = encode_all(&q, &rs);
                for (t, y) in vectors(5, dim, shape, 22).chunks_exact(dim).enumerate() {
                    let est = scores(&q, y, &codes);
                    let truth: Vec<f64> = rs.chunks_exact(dim).map(|r| dot(r, y)).collect();
                    let top = |s: &dyn Fn(usize) -> f64, k: usize| {
                        let mut ids: Vec<usize> = (0..1000).collect();
                        ids.sort_by(|&a, &b| s(b).total_cmp(&s(a)));
                        ids.truncate(k);
                        ids
                    };
                    let true_top = top(&|i| truth[i], 10);
                    let est_top = top(&|i| f64::from(est[i]), 100);
                    for id in true_top {
                        assert!(
                            est_top.contains(&id),
                            "{} dim {dim} {shape:?} query {t}: true top-10 id {id} not in the estimated top 100",
                            q.scheme()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rabitq4_reports_its_parameters() {
    let q = Quantizer::rabitq4(100, 9).unwrap();
    assert_eq!(q.scheme(), Scheme::RaBitQ4);
    assert_eq!(q.dim(), 100);
    assert_eq!(q.code_bytes(), 8 + 128 / 2);
    assert_eq!(Quantizer::rabitq4(128, 9).unwrap().code_bytes(), 72);
    assert_eq!(Quantizer::rabitq4(384, 9).unwrap().code_bytes(), 200);
    assert_eq!(q.rotation_seed(), Some(9));
    assert_eq!(
        q.rotation_sha256(),
        Quantizer::rabitq4(100, 9).unwrap().rotation_sha256()
    );
    assert_ne!(
        q.rotation_sha256(),
        Quantizer::rabitq4(100, 10).unwrap().rotation_sha256()
    );
    assert!(q.sq8_ranges().is_none());
}

/// A zero residual encodes to factor 0 and scores 0; a zero query scores 0.
#[test]
fn rabitq4_zero_vectors_score_zero() {
    let q = Quantizer::rabitq4(70, 1).unwrap();
    let mut code = vec![0u8; q.code_bytes()];
    q.encode(&[0.0; 70], &[0.0; 70], &mut code);
    assert_eq!(Quantizer::norm2(&code), 0.0);
    assert_eq!(
        scores(&q, &vectors(1, 70, Shape::Gaussian, 1), &code),
        [0.0]
    );
    q.encode(&vectors(1, 70, Shape::Gaussian, 2), &[0.0; 70], &mut code);
    assert_eq!(scores(&q, &[0.0; 70], &code), [0.0]);
}

/// Encoding is pinned byte for byte: a change here changes every stored code
/// and must come with a format version bump. It also catches a platform that
/// encodes differently (CI runs the tests on each).
#[test]
fn encoded_bytes_are_pinned() {
    // Only exact IEEE operations make the input, so it is the same everywhere.
    let data: Vec<f32> = (0..1000)
        .map(|k| (((k * 7919) % 1013) as f32 / 97.0 - 5.0) / (1 + k % 100) as f32)
        .collect();
    let sq8 = Quantizer::train_sq8(&data, 100).unwrap();
    let rabitq = Quantizer::rabitq4(100, 99).unwrap();
    let hash = |q: &Quantizer| hex::encode(Sha256::digest(encode_all(q, &data)));
    assert_eq!(
        hash(&sq8),
        "47bb7d2417ced812e9553aef68be97c0506089be765914828835c2cd249a5d88"
    );
    assert_eq!(
        hash(&rabitq),
        "3cd599556abe16cc33723b75c0abdb66ad9deaf1dc45c2c952bfbeffa4e6a35a"
    );
}

// ---------------------------------------------------------------- pq4fs

/// The fast-scan path (per-query u8 tables, blocks, exact integer sums) and
/// the row-by-row `score` give the same bits, and both are within the
/// tables' documented rounding of `<r̂, y>` computed from `decode`:
/// `m·step/2`, plus f32 rounding of the table entries and of the final
/// multiply-add (relative 2⁻²⁰ of Σ|entries|, far above what occurs).
#[test]
fn pq4fs_fast_scan_equals_row_scores_and_the_reconstruction() {
    for dim in [7, 24, 128, 384] {
        for shape in [Shape::Gaussian, Shape::PowerLaw] {
            let sample = vectors(600, dim, shape, 40);
            let q = Quantizer::train_pq4(&sample, dim, 41).unwrap();
            let rs = vectors(77, dim, shape, 42);
            let codes = encode_all(&q, &rs);
            let m = sub_quantizers(dim);
            assert_eq!(q.code_bytes(), HEADER_BYTES + m / 2);
            for y in vectors(3, dim, shape, 43).chunks_exact(dim) {
                let rows = scores(&q, y, &codes);
                let lut = q.query_lut(y).unwrap();
                let blocks = q.blocks(&codes, 77);
                let mut sums = Vec::new();
                fastscan::scan(&lut, &blocks, &mut sums);
                let mut decoded = vec![0.0; dim];
                for (i, code) in codes.chunks_exact(q.code_bytes()).enumerate() {
                    let fast = lut.value(sums[i]);
                    assert_eq!(fast.to_bits(), rows[i].to_bits(), "dim {dim} row {i}");
                    q.decode(code, &mut decoded);
                    let exact = dot(&decoded, y);
                    let magnitude: f64 = y.iter().map(|v| f64::from(v.abs())).sum::<f64>()
                        * decoded
                            .iter()
                            .fold(0.0f64, |a, v| a.max(f64::from(v.abs())));
                    let bound = m as f64 * f64::from(lut.step) / 2.0 + magnitude * 1e-6;
                    assert!(
                        (f64::from(fast) - exact).abs() <= bound,
                        "dim {dim} {shape:?} row {i}: {fast} vs {exact} (bound {bound})"
                    );
                }
            }
        }
    }
}

/// The header holds the exact `‖r‖²` and the list term `‖r̂‖² + 2·<c, r̂>`
/// for the row's leaf.
#[test]
fn pq4fs_header_holds_norm_and_list_term() {
    let dim = 24;
    let q = Quantizer::train_pq4(&vectors(300, dim, Shape::Gaussian, 50), dim, 51).unwrap();
    let leaf = vectors(1, dim, Shape::Gaussian, 52);
    let r = vectors(1, dim, Shape::Gaussian, 53);
    let mut code = vec![0u8; q.code_bytes()];
    q.encode(&r, &leaf, &mut code);
    let mut decoded = vec![0.0; dim];
    q.decode(&code, &mut decoded);
    assert_eq!(Quantizer::norm2(&code), dot(&r, &r) as f32);
    let term = Quantizer::list_term(&code);
    let want = dot(&decoded, &decoded) + 2.0 * dot(&leaf, &decoded);
    let scale =
        dot(&decoded, &decoded) + 2.0 * (dot(&leaf, &leaf) * dot(&decoded, &decoded)).sqrt();
    assert!(
        (f64::from(term) - want).abs() <= 1e-6 * scale,
        "{term} vs {want}"
    );
}

/// Training is deterministic for a seed and each code is the nearest
/// centroid of its pair of dimensions.
#[test]
fn pq4fs_training_is_seeded_and_codes_are_nearest() {
    let dim = 10;
    let sample = vectors(2000, dim, Shape::Spike, 60);
    let a = Quantizer::train_pq4(&sample, dim, 1).unwrap();
    assert_eq!(
        a.pq4_centroids(),
        Quantizer::train_pq4(&sample, dim, 1)
            .unwrap()
            .pq4_centroids()
    );
    assert_ne!(
        a.pq4_centroids(),
        Quantizer::train_pq4(&sample, dim, 2)
            .unwrap()
            .pq4_centroids()
    );
    let centroids = a.pq4_centroids().unwrap();
    let r = vectors(1, dim, Shape::Spike, 61);
    let mut code = vec![0u8; a.code_bytes()];
    a.encode(&r, &[0.0; 10], &mut code);
    for s in 0..sub_quantizers(dim) {
        let x = [
            r.get(2 * s).copied().unwrap_or(0.0),
            r.get(2 * s + 1).copied().unwrap_or(0.0),
        ];
        let d = |j: usize| {
            let c = &centroids[(s * 16 + j) * 2..][..2];
            (x[0] - c[0]).powi(2) + (x[1] - c[1]).powi(2)
        };
        let got = usize::from((code[HEADER_BYTES + s / 2] >> (4 * (s % 2))) & 0x0F);
        assert!((0..16).all(|j| d(got) <= d(j)), "sub-quantiser {s}");
    }
}

#[test]
fn pq4fs_bad_codebooks_are_typed_errors() {
    assert_eq!(
        Quantizer::pq4_from_centroids(4, vec![0.0; 63]).unwrap_err(),
        QuantError::CodebookLength {
            dim: 4,
            len: 63,
            expected: 64
        }
    );
    let mut c = vec![0.0; 64];
    c[5] = f32::NAN;
    assert!(matches!(
        Quantizer::pq4_from_centroids(4, c).unwrap_err(),
        QuantError::NonFiniteCentroid { index: 5, .. }
    ));
}

// ---------------------------------------------------------------- both

#[test]
fn encode_batch_equals_encode_byte_for_byte() {
    for dim in [1, 5, 63, 64, 100, 128, 384] {
        let data = vectors(70, dim, Shape::Spike, 30);
        for q in [
            Quantizer::train_sq8(&data, dim).unwrap(),
            Quantizer::rabitq4(dim, 31).unwrap(),
            Quantizer::train_pq4(&data, dim, 31).unwrap(),
        ] {
            let batch = encode_all(&q, &data);
            let mut one = vec![0u8; q.code_bytes()];
            for (k, (r, code)) in data
                .chunks_exact(dim)
                .zip(batch.chunks_exact(q.code_bytes()))
                .enumerate()
            {
                q.encode(r, &vec![0.0; dim], &mut one);
                assert_eq!(one, code, "{} dim {dim} vector {k}", q.scheme());
            }
        }
    }
}

/// The documented f64 lane sum, written out: term k into lane k mod 8 (the
/// tail zero-padded to a multiple of 8), lanes combined as
/// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
fn reference_lane_dot(a: &[f32], b: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    for k in 0..a.len().div_ceil(8) * 8 {
        let x = a.get(k).map_or(0.0, |&v| f64::from(v));
        let y = b.get(k).map_or(0.0, |&v| f64::from(v));
        lanes[k % 8] += x * y;
    }
    ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
}

/// `o = P·r` as documented: each o_i from 0.0, `+= P_ik·r_k` for k in order.
fn reference_rotate(rotation: &Rotation, r: &[f32]) -> Vec<f32> {
    (0..r.len())
        .map(|i| {
            let mut acc = 0.0f32;
            for (k, &x) in r.iter().enumerate() {
                acc += rotation.entry(i, k) * x;
            }
            acc
        })
        .collect()
}

/// The `rabitq4` code of one residual, written from the documentation in the
/// plainest scalar form (one candidate step at a time).
fn reference_rabitq4_code(rotation: &Rotation, r: &[f32]) -> Vec<u8> {
    let level = |x: f32, inverse_step: f32| -> f32 {
        let v = x * inverse_step + 7.5;
        let v = if v > 0.0 { v } else { 0.0 };
        let v = if v < 15.0 { v } else { 15.0 };
        v + 8_388_608.0 - 8_388_608.0 - 7.5
    };
    let dim = r.len();
    let o = reference_rotate(rotation, r);
    let max_abs = o.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let o_norm2 = reference_lane_dot(&o, &o);
    let max_step = max_abs / 7.5;
    let (levels, factor) = if max_step.is_normal() && o_norm2.is_finite() {
        let mut best = (f32::NEG_INFINITY, max_step);
        for k in 0..32 {
            let step = max_step * (1.0 - k as f32 / 62.0);
            let inverse_step = 1.0 / step;
            let (mut dot, mut sq) = (0.0f32, 0.0f32);
            for &x in &o {
                let c = level(x, inverse_step);
                dot += c * x;
                sq += c * c;
            }
            let score = dot * dot / sq;
            if score > best.0 {
                best = (score, step);
            }
        }
        let inverse_step = 1.0 / best.1;
        let levels: Vec<f32> = o.iter().map(|&x| level(x, inverse_step)).collect();
        let factor = (o_norm2 / reference_lane_dot(&levels, &o)) as f32;
        (levels, factor)
    } else {
        (vec![0.5; dim], 0.0)
    };
    let norm2 = reference_lane_dot(r, r) as f32;
    let norm2 = if norm2.is_nan() { f32::NAN } else { norm2 };
    let mut code = Vec::new();
    code.extend_from_slice(&norm2.to_le_bytes());
    code.extend_from_slice(&factor.to_le_bytes());
    let u = |i: usize| levels.get(i).map_or(0u8, |&c| (c + 7.5) as u8);
    for b in 0..dim.div_ceil(64) {
        for j in 0..32 {
            code.push(u(64 * b + j) | u(64 * b + 32 + j) << 4);
        }
    }
    code
}

/// The fast encoding paths (the dispatched one, the portable build and, where
/// the CPU has them, the AVX2 and AVX-512 builds) against the plain scalar reference above:
/// the rotated values bit for bit and the codes byte for byte, on random
/// residuals of three shapes plus a zero, a tiny, a huge and a subnormal one, for batch
/// sizes that leave remainders after the 32-vector blocks and 4- or 8-vector
/// groups. It prints which builds ran.
#[test]
fn fast_encoding_equals_scalar_reference_byte_for_byte() {
    for dim in [1, 5, 63, 64, 100, 128, 384] {
        let q = Quantizer::rabitq4(dim, 17 + dim as u64).unwrap();
        let Kind::RaBitQ4(rotation) = &q.kind else {
            unreachable!()
        };
        let mut data = Vec::new();
        for (shape, seed) in [
            (Shape::Gaussian, 1),
            (Shape::Spike, 2),
            (Shape::PowerLaw, 3),
        ] {
            data.extend(vectors(13, dim, shape, seed + dim as u64));
        }
        data.extend(std::iter::repeat_n(0.0, dim));
        data.extend(
            vectors(1, dim, Shape::Gaussian, 9)
                .iter()
                .map(|x| x * 1e-30),
        );
        data.extend(
            vectors(1, dim, Shape::Gaussian, 10)
                .iter()
                .map(|x| x * 1e30),
        );
        data.extend(
            vectors(1, dim, Shape::Gaussian, 11)
                .iter()
                .map(|x| x * 1e-40),
        );
        let n = data.len() / dim;
        let expected: Vec<u8> = data
            .chunks_exact(dim)
            .flat_map(|r| reference_rabitq4_code(rotation, r))
            .collect();
        let expected_rotated: Vec<u32> = data
            .chunks_exact(dim)
            .flat_map(|r| reference_rotate(rotation, r))
            .map(f32::to_bits)
            .collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

        let mut rotated = vec![0.0f32; n * dim];
        rotation.apply_many(&data, &mut rotated);
        assert_eq!(
            bits(&rotated),
            expected_rotated,
            "dispatched rotation, dim {dim}"
        );
        rotation.apply_many_portable(&data, &mut rotated);
        assert_eq!(
            bits(&rotated),
            expected_rotated,
            "portable rotation, dim {dim}"
        );

        let mut codes = vec![0u8; n * q.code_bytes()];
        q.encode_batch(&data, &vec![0.0; dim], &vec![0; n], &mut codes);
        assert_eq!(codes, expected, "dispatched encode_batch, dim {dim}");
        codes.fill(0);
        encode_rabitq_batch_portable(rotation, &data, &mut codes);
        assert_eq!(codes, expected, "portable encode_batch, dim {dim}");

        #[cfg(target_arch = "x86_64")]
        if kernels::avx2_encode_available() {
            rotated.fill(0.0);
            // SAFETY: AVX2 was detected just above.
            unsafe { rotation.apply_many_avx2(&data, &mut rotated) };
            assert_eq!(bits(&rotated), expected_rotated, "AVX2 rotation, dim {dim}");
            codes.fill(0);
            // SAFETY: AVX2 was detected just above.
            unsafe { encode_rabitq_batch_avx2(rotation, &data, &mut codes) };
            assert_eq!(codes, expected, "AVX2 encode_batch, dim {dim}");
            println!("rabitq4 encode: the AVX2 kernels ran, dim {dim}");
        }
        #[cfg(target_arch = "x86_64")]
        if kernels::avx512_encode_available() {
            rotated.fill(0.0);
            // SAFETY: AVX-512F and AVX2 were detected just above.
            unsafe { rotation.apply_many_avx512(&data, &mut rotated) };
            assert_eq!(
                bits(&rotated),
                expected_rotated,
                "AVX-512 rotation, dim {dim}"
            );
            codes.fill(0);
            // SAFETY: AVX-512F and AVX2 were detected just above.
            unsafe { encode_rabitq_batch_avx512(rotation, &data, &mut codes) };
            assert_eq!(codes, expected, "AVX-512 encode_batch, dim {dim}");
            println!("rabitq4 encode: the AVX-512 kernels ran, dim {dim}");
        }
    }
}

#[test]
fn stored_norm2_is_exact() {
    for dim in [5, 100] {
        let data = vectors(20, dim, Shape::Gaussian, 40);
        for q in [
            Quantizer::train_sq8(&data, dim).unwrap(),
            Quantizer::rabitq4(dim, 41).unwrap(),
        ] {
            for (r, code) in data
                .chunks_exact(dim)
                .zip(encode_all(&q, &data).chunks_exact(q.code_bytes()))
            {
                let exact = dot(r, r);
                assert!(
                    (f64::from(Quantizer::norm2(code)) - exact).abs()
                        <= EPS / 2.0 * exact * 1.000_001
                );
            }
        }
    }
    assert!(Quantizer::norm2(&[1, 2]).is_nan());
}

#[test]
fn quantizer_is_shareable_across_threads() {
    fn shareable<T: Send + Sync + Clone + std::fmt::Debug>() {}
    shareable::<Quantizer>();
    shareable::<PreparedQuery>();
    let q = Quantizer::rabitq4(200, 1).unwrap();
    let text = format!("{q:?}");
    assert!(
        text.contains("sha256") && text.len() < 500,
        "Debug prints the matrix: {} bytes",
        text.len()
    );
}

#[test]
fn scheme_names_round_trip() {
    for scheme in [Scheme::Sq8, Scheme::RaBitQ4] {
        assert_eq!(scheme.to_string().parse::<Scheme>().unwrap(), scheme);
    }
    assert_eq!("sq8".parse::<Scheme>().unwrap(), Scheme::Sq8);
    assert_eq!("rabitq4".parse::<Scheme>().unwrap(), Scheme::RaBitQ4);
    let err = "pq4".parse::<Scheme>().unwrap_err();
    assert_eq!(err, QuantError::UnknownScheme { name: "pq4".into() });
    assert!(err.to_string().contains("pq4"));
}

#[test]
fn bad_parameters_are_typed_errors() {
    assert_eq!(
        Quantizer::train_sq8(&[], 4).unwrap_err(),
        QuantError::EmptySample {
            scheme: "sq8",
            dim: 4
        }
    );
    assert_eq!(
        Quantizer::train_sq8(&[1.0], 0).unwrap_err(),
        QuantError::ZeroDim
    );
    let err = Quantizer::train_sq8(&[1.0; 5], 4).unwrap_err();
    assert_eq!(
        err,
        QuantError::SampleLength {
            scheme: "sq8",
            len: 5,
            dim: 4
        }
    );
    assert!(err.to_string().contains('5') && err.to_string().contains('4'));
    let mut sample = vec![0.0; 8];
    sample[6] = f32::INFINITY;
    assert_eq!(
        Quantizer::train_sq8(&sample, 4).unwrap_err(),
        QuantError::NonFiniteSample {
            scheme: "sq8",
            row: 1,
            column: 2,
            value: f32::INFINITY
        }
    );
    sample[6] = f32::NAN;
    assert!(matches!(
        Quantizer::train_sq8(&sample, 4).unwrap_err(),
        QuantError::NonFiniteSample { scheme: "sq8", row: 1, column: 2, value } if value.is_nan()
    ));

    assert_eq!(
        Quantizer::sq8_from_ranges(vec![], vec![]).unwrap_err(),
        QuantError::ZeroDim
    );
    let err = Quantizer::sq8_from_ranges(vec![0.0; 3], vec![1.0; 2]).unwrap_err();
    assert_eq!(
        err,
        QuantError::RangeLengths {
            min_len: 3,
            scale_len: 2
        }
    );
    assert!(err.to_string().contains('3') && err.to_string().contains('2'));
    assert!(matches!(
        Quantizer::sq8_from_ranges(vec![0.0, f32::NAN], vec![1.0; 2]).unwrap_err(),
        QuantError::NonFiniteMin { index: 1, value } if value.is_nan()
    ));
    for bad in [0.0, -1.0, f32::INFINITY] {
        let err = Quantizer::sq8_from_ranges(vec![0.0; 3], vec![1.0, 1.0, bad]).unwrap_err();
        assert_eq!(
            err,
            QuantError::BadScale {
                index: 2,
                value: bad
            }
        );
        assert!(err.to_string().contains("dimension 2"), "{err}");
    }
    assert!(matches!(
        Quantizer::sq8_from_ranges(vec![0.0; 2], vec![f32::NAN, 1.0]).unwrap_err(),
        QuantError::BadScale { index: 0, value } if value.is_nan()
    ));

    assert_eq!(Quantizer::rabitq4(0, 1).unwrap_err(), QuantError::ZeroDim);
    let err = Quantizer::rabitq4(MAX_RABITQ_DIM + 1, 1).unwrap_err();
    assert_eq!(
        err,
        QuantError::DimTooLarge {
            dim: MAX_RABITQ_DIM + 1,
            max: MAX_RABITQ_DIM
        }
    );
    assert!(err.to_string().contains(&(MAX_RABITQ_DIM + 1).to_string()));
}

// ---------------------------------------------------------------- kernels

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    /// Random codes, plus the extremes: every nibble 15 against ±127 queries,
    /// the largest maddubs pair sums.
    fn rabitq_cases(dim: usize) -> (Quantizer, Vec<u8>, Vec<PreparedQuery>) {
        let q = Quantizer::rabitq4(dim, 50).unwrap();
        let mut codes = encode_all(&q, &vectors(37, dim, Shape::Spike, 51));
        let mut extreme = vec![0xFFu8; q.code_bytes()];
        extreme[..HEADER_BYTES].copy_from_slice(&[0, 0, 128, 63, 0, 0, 128, 63]);
        codes.extend_from_slice(&extreme);
        let ys = vectors(4, dim, Shape::Gaussian, 52);
        let mut prepared: Vec<PreparedQuery> = ys.chunks_exact(dim).map(|y| q.prepare(y)).collect();
        prepared.push(q.prepare(&vec![1.0; dim]));
        prepared.push(q.prepare(&vec![-1.0; dim]));
        (q, codes, prepared)
    }

    #[test]
    fn rabitq4_avx2_and_scalar_scores_are_bit_identical() {
        if !kernels::avx2_available() {
            eprintln!("AVX2 not available: skipped");
            return;
        }
        for dim in [1, 5, 64, 100, 128, 384, 1000] {
            let (q, codes, prepared) = rabitq_cases(dim);
            let n = codes.len() / q.code_bytes();
            for p in &prepared {
                let Prepared::RaBitQ4 {
                    query,
                    half_scale,
                    sum,
                } = &p.inner
                else {
                    panic!("rabitq4 query expected")
                };
                let (mut scalar, mut simd) = (vec![0.0f32; n], vec![0.0f32; n]);
                kernels::rabitq_scores_scalar(
                    query,
                    *half_scale,
                    *sum,
                    &codes,
                    q.code_bytes(),
                    &mut scalar,
                );
                // SAFETY: AVX2 was detected at the top of the test.
                unsafe {
                    kernels::rabitq_scores_avx2(
                        query,
                        *half_scale,
                        *sum,
                        &codes,
                        q.code_bytes(),
                        &mut simd,
                    )
                };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&scalar), bits(&simd), "dim {dim}");
                let mut dispatched = vec![0.0f32; n];
                q.score(p, &codes, &mut dispatched);
                assert_eq!(bits(&dispatched), bits(&simd), "dim {dim}");
            }
        }
    }

    /// Both versions compute S = Σ w_i·u_i with a rounding error
    /// ≤ γ_n·Σ|w_i·u_i| (γ_n = n·u/(1 − n·u), any summation order, FMA or
    /// not), so they differ by ≤ 2γ_n·Σ|w_i·u_i| ≈ n·ε·Σ|w_i·u_i|; adding the
    /// shared constant rounds each once more, ≤ u·|result| each.
    #[test]
    fn sq8_avx2_and_scalar_scores_agree_to_f32_rounding() {
        if !kernels::avx2_available() {
            eprintln!("AVX2 not available: skipped");
            return;
        }
        for dim in [1, 5, 8, 31, 32, 100, 128, 384, 1000] {
            let data = vectors(50, dim, Shape::PowerLaw, 60);
            let q = Quantizer::train_sq8(&data, dim).unwrap();
            let codes = encode_all(&q, &data);
            let n = data.len() / dim;
            for y in vectors(3, dim, Shape::Gaussian, 61).chunks_exact(dim) {
                let p = q.prepare(y);
                let Prepared::Sq8 { weights, offset } = &p.inner else {
                    panic!("sq8 query expected")
                };
                let (mut scalar, mut simd) = (vec![0.0f32; n], vec![0.0f32; n]);
                kernels::sq8_scores_scalar(weights, *offset, &codes, q.code_bytes(), &mut scalar);
                // SAFETY: AVX2 and FMA were detected at the top of the test.
                unsafe {
                    kernels::sq8_scores_avx2(weights, *offset, &codes, q.code_bytes(), &mut simd)
                };
                for (k, code) in codes.chunks_exact(q.code_bytes()).enumerate() {
                    let magnitude: f64 = weights
                        .iter()
                        .zip(&code[HEADER_BYTES..])
                        .map(|(&w, &u)| f64::from(w).abs() * f64::from(u))
                        .sum();
                    let (a, b) = (f64::from(scalar[k]), f64::from(simd[k]));
                    let bound =
                        dim as f64 * EPS * magnitude * 1.001 + EPS / 2.0 * (a.abs() + b.abs());
                    assert!(
                        (a - b).abs() <= bound,
                        "dim {dim} code {k}: {a} vs {b} (bound {bound:e})"
                    );
                }
            }
        }
    }
}
