//! The `ivf_centroids` table: root and leaf centroids as one Parquet object.
//! SKELETON: owned by the probe helper (issue 4).
