//! Top-k selection, stable on ties (ties broken by the smaller rowid).
//! SKELETON: owned by the k-means/distance helper (issue 3).

/// A bounded max-heap keeping the `k` smallest `(distance, rowid)` pairs.
pub struct TopK;
