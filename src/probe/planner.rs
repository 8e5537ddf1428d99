//! The pure planner: selected CIDs ∩ manifest file ranges (binary search, no
//! scan of all files), then one [`AccessPlan`] per candidate file from the
//! row-group cids the footer contract validated. No predicate expression, no `IN` list: the
//! plan is plain data computed here.

use super::access_plan::AccessPlan;
use crate::format::manifest::FileEntry;

/// Manifest indices of the files whose `[min-cid, max-cid]` holds at least one
/// of `cids` (sorted ascending), in manifest order. `files` must be ordered by
/// `(min-cid, max-cid)` with `min-cid ≤ max-cid` (checked when the index opens);
/// cost is `O(|cids| · log |files| + |result|)`.
pub fn candidate_files(files: &[FileEntry], cids: &[u32]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for &cid in cids {
        // First file that could hold `cid`: max-cid is non-decreasing.
        let mut i = files.partition_point(|f| f.max_cid < cid);
        while let Some(f) = files.get(i) {
            if f.min_cid > cid {
                break;
            }
            if out.last().is_none_or(|&last| last < i) {
                out.push(i);
            }
            i += 1;
        }
    }
    out
}

/// [`candidate_files`] over several postings tables whose files are
/// concatenated in `files`, table `t` starting at `starts[t]` (ascending,
/// `starts[0] = 0`): indices into `files`, table by table.
pub fn candidate_files_layered(files: &[FileEntry], starts: &[usize], cids: &[u32]) -> Vec<usize> {
    let mut out = Vec::new();
    for (t, &start) in starts.iter().enumerate() {
        let end = starts.get(t + 1).copied().unwrap_or(files.len());
        let table = files.get(start..end).unwrap_or_default();
        out.extend(candidate_files(table, cids).into_iter().map(|i| start + i));
    }
    out
}

/// Scan exactly the row groups whose cid is in `selected` (sorted ascending).
pub fn plan_row_groups(row_group_cids: &[u32], selected: &[u32]) -> AccessPlan {
    let mut plan = AccessPlan::skip_all(row_group_cids.len());
    for (rg, cid) in row_group_cids.iter().enumerate() {
        if selected.binary_search(cid).is_ok() {
            plan.scan(rg);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::access_plan::RowGroupAccess::{Scan, Skip};

    fn entry(min_cid: u32, max_cid: u32) -> FileEntry {
        FileEntry {
            path: format!("f{min_cid}-{max_cid}"),
            cid_bucket: 0,
            min_cid,
            max_cid,
            rows: 1,
            size: 1,
            sha256: String::new(),
        }
    }

    #[test]
    fn candidates_by_binary_search_include_spanning_cids() {
        // cid 3 spans files 1 and 2.
        let files = vec![
            entry(0, 1),
            entry(2, 3),
            entry(3, 3),
            entry(4, 7),
            entry(9, 9),
        ];
        assert_eq!(candidate_files(&files, &[3]), vec![1, 2]);
        assert_eq!(candidate_files(&files, &[0, 1, 5, 8]), vec![0, 3]);
        assert_eq!(candidate_files(&files, &[8]), Vec::<usize>::new());
        assert_eq!(candidate_files(&files, &[3, 9, 10]), vec![1, 2, 4]);
    }

    #[test]
    fn layered_candidates_search_each_table_on_its_own() {
        // A base [0,1] [2,3] [4,7] and a delta [1,5]: unsorted when concatenated.
        let files = vec![entry(0, 1), entry(2, 3), entry(4, 7), entry(1, 5)];
        assert_eq!(candidate_files_layered(&files, &[0, 3], &[3]), vec![1, 3]);
        assert_eq!(candidate_files_layered(&files, &[0, 3], &[6]), vec![2]);
        assert_eq!(candidate_files_layered(&files, &[0], &[3]), vec![1]);
    }

    #[test]
    fn plan_scans_exactly_selected_row_groups() {
        let plan = plan_row_groups(&[4, 5, 5, 6, 7], &[5, 7, 100]);
        assert_eq!(plan.entries(), &[Skip, Scan, Scan, Skip, Scan]);
    }
}
