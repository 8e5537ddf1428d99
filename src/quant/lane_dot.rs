//! The one dot product of encoding: exact in f64 and in a fixed order, so a
//! code is the same bytes on every CPU.

/// `Σ a_k·b_k` in f64 in a fixed order: term k into lane k mod 8 (the tail
/// zero-padded), the lanes combined as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
/// Independent lanes let it vectorise without reassociating anything. For
/// f32 inputs (every widening to f64 is exact) and for the rotation's f64.
#[inline(always)]
pub fn lane_dot<T: Copy + Into<f64>>(a: &[T], b: &[T]) -> f64 {
    let widen =
        |x: &[T]| -> [f64; 8] { std::array::from_fn(|l| x.get(l).map_or(0.0, |&v| v.into())) };
    let (a_chunks, a_tail) = a.as_chunks::<8>();
    let (b_chunks, b_tail) = b.as_chunks::<8>();
    let mut lanes = [0.0f64; 8];
    for (x, y) in a_chunks
        .iter()
        .zip(b_chunks)
        .map(|(x, y)| (widen(x), widen(y)))
        .chain([(widen(a_tail), widen(b_tail))])
    {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
}
