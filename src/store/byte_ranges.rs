//! Byte ranges of a ranged read: coalesced before the request
//! ([`coalesce`]), and each wanted range cut back out of what came back
//! ([`slice()`]).

use bytes::Bytes;
use std::ops::Range;

/// Two wanted column chunks of one object whose gap is at most this are
/// read as one request ([`coalesce_near`]). A request to object storage costs a time to first byte
/// (about 30 ms on S3), in which megabytes could stream; reading a gap of
/// 16 KiB costs far less than that, and far less than a request on local
/// disk. Kept small so that a large table's lists stay apart (a list's
/// vector chunk alone is larger), while a small table's scattered row
/// groups (a small delta's) become one request. Page reads of the re-rank
/// stay exact ([`coalesce`]): they are the bytes the codes path saves.
pub const COALESCE_GAP: u64 = 16 << 10;

/// Sort and merge ranges that overlap or touch.
pub fn coalesce(ranges: impl Iterator<Item = Range<u64>>) -> Vec<Range<u64>> {
    coalesce_within(ranges, 0)
}

/// The share of a delta table's file that one merged gap may read: a
/// delta is written small (one file per small change), its row groups are
/// a few rows each and scattered over every list, so reading up to 1/64 of
/// the file per gap makes its probe one request instead of one per row
/// group. A base table keeps [`COALESCE_GAP`].
pub const DELTA_GAP_SHARE: u64 = 64;

/// Sort and merge ranges that overlap or lie within `gap` of each other
/// ([`COALESCE_GAP`] for a base table's file; see [`DELTA_GAP_SHARE`]).
pub fn coalesce_near(ranges: impl Iterator<Item = Range<u64>>, gap: u64) -> Vec<Range<u64>> {
    coalesce_within(ranges, gap.max(COALESCE_GAP))
}

/// Sort and merge ranges that overlap or whose gap is at most `gap`.
fn coalesce_within(ranges: impl Iterator<Item = Range<u64>>, gap: u64) -> Vec<Range<u64>> {
    let mut v: Vec<Range<u64>> = ranges.collect();
    v.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(gap) => {
                last.end = last.end.max(r.end);
            }
            _ => out.push(r),
        }
    }
    out
}

/// The bytes of `want` out of the coalesced `ranges`/`data`.
pub fn slice(ranges: &[Range<u64>], data: &[Bytes], want: &Range<u64>) -> Option<Bytes> {
    let (i, at) = locate(ranges, data, want)?;
    Some(data[i].slice(at))
}

/// [`slice()`] borrowed: no reference count taken, for bytes used while
/// `data` is held.
pub fn slice_ref<'a>(
    ranges: &[Range<u64>],
    data: &'a [Bytes],
    want: &Range<u64>,
) -> Option<&'a [u8]> {
    let (i, at) = locate(ranges, data, want)?;
    Some(&data[i][at])
}

/// [`slice_ref`] of each of `wants`, in order: for wants ascending by
/// start, as a plan of page reads lists them, one walk over `ranges`
/// instead of a search each (a want out of that order is searched).
pub fn slices_ref<'a, 'w>(
    ranges: &'a [Range<u64>],
    data: &'a [Bytes],
    wants: impl Iterator<Item = &'w Range<u64>>,
) -> impl Iterator<Item = Option<&'a [u8]>> {
    let mut at = 0;
    wants.map(move |want| {
        // A range that ends before `want` does cannot hold it, nor any
        // later want.
        while ranges.get(at).is_some_and(|r| r.end < want.end) {
            at += 1;
        }
        match (ranges.get(at), data.get(at)) {
            (Some(r), Some(d)) if r.start <= want.start && want.end <= r.end => {
                d.get((want.start - r.start) as usize..(want.end - r.start) as usize)
            }
            _ => slice_ref(ranges, data, want),
        }
    })
}

/// The piece of `data` holding `want` and where in it: `None` when no
/// fetched range covers it.
fn locate(
    ranges: &[Range<u64>],
    data: &[Bytes],
    want: &Range<u64>,
) -> Option<(usize, Range<usize>)> {
    let i = ranges
        .partition_point(|r| r.start <= want.start)
        .checked_sub(1)?;
    let (r, d) = (ranges.get(i)?, data.get(i)?);
    if want.end > r.end {
        return None;
    }
    let (s, e) = (
        (want.start - r.start) as usize,
        (want.end - r.start) as usize,
    );
    (e <= d.len()).then_some((i, s..e))
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Walked in order, each want gets what a search gets: ascending,
    /// repeated, out of order, and not fetched at all.
    #[test]
    fn slices_in_order_equal_a_search_each() {
        let ranges = vec![10..20, 30..40, 50..90];
        let data: Vec<Bytes> = ranges
            .iter()
            .map(|r| Bytes::from((r.start..r.end).map(|b| b as u8).collect::<Vec<_>>()))
            .collect();
        let wants = vec![
            10..12,
            10..20,
            12..18,
            30..40,
            35..36,
            50..60,
            60..90,
            15..16, // out of order: behind the walk
            55..95, // past the last range's end
            20..30, // in a gap
            45..55, // straddles a range's start
            89..90,
        ];
        let walked: Vec<_> = slices_ref(&ranges, &data, wants.iter()).collect();
        let searched: Vec<_> = wants.iter().map(|w| slice_ref(&ranges, &data, w)).collect();
        assert_eq!(walked, searched);
        let found = |w: &Range<u64>| Some((w.start..w.end).map(|b| b as u8).collect::<Vec<_>>());
        assert_eq!(walked[4].map(<[u8]>::to_vec), found(&(35..36)));
        assert_eq!(walked[7].map(<[u8]>::to_vec), found(&(15..16)));
        assert_eq!(walked[8..11], [None, None, None]);
    }

    #[test]
    fn coalesce_merges_within_the_gap_only() {
        let gap = COALESCE_GAP;
        let got = coalesce_near(
            vec![0..5, gap + 5..gap + 6, 2 * gap + 7..2 * gap + 8].into_iter(),
            0,
        );
        assert_eq!(got, vec![0..gap + 6, 2 * gap + 7..2 * gap + 8]);
        let wide = coalesce_near(vec![0..5, 2 * gap + 7..2 * gap + 8].into_iter(), 3 * gap);
        assert_eq!(wide, vec![0..2 * gap + 8]);
        let got = coalesce(vec![10..20, 0..5, 5..8, 19..25, 30..31].into_iter());
        assert_eq!(got, vec![0..8, 10..25, 30..31]);
        let data: Vec<Bytes> = got
            .iter()
            .map(|r| Bytes::from((r.start..r.end).map(|b| b as u8).collect::<Vec<_>>()))
            .collect();
        assert_eq!(
            slice(&got, &data, &(12..15)).unwrap().as_ref(),
            &[12, 13, 14]
        );
        assert!(slice(&got, &data, &(7..11)).is_none());
        assert!(slice(&got, &data, &(26..27)).is_none());
        for want in [12..15, 0..8, 24..25, 7..11, 26..27, 8..10] {
            assert_eq!(
                slice_ref(&got, &data, &want),
                slice(&got, &data, &want).as_deref(),
                "{want:?}"
            );
        }
    }
}
